// join_nested: its golden cases, and the actions it must refuse (with the reason) or accept.
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace perfdojo::transforms_test {

std::vector<Refusal> join_nested_refusals() {
  return {
      {"join_nested: the path leads nowhere", kTiledFlat, "join_nested 1", Reason::kNoSuchLocation},
      {"join_nested: the path names a statement", kTiledFlat, "join_nested 0.0.0",
       Reason::kNotAScope},
      {"join_nested: the only child is a statement", kOneScope, "join_nested 0",
       Reason::kNotPerfectlyNested},
      {"join_nested: a statement next to the inner scope",
       kFlat + "4 8 y[{0}*8+{1}] = x[{0}*8+{1}]\n| z[{0}] = x[{0}]\n", "join_nested 0",
       Reason::kNotPerfectlyNested},
      {"join_nested: the inner scope is unrolled",
       kFlat + "4 8:unroll y[{0}*8+{1}] = x[{0}*8+{1}]\n", "join_nested 0", Reason::kAnnotated},
      {"join_nested: the iterators index different dimensions",
       kTwoD + "4 8 y[{0},{1}] = x[{0},{1}]\n", "join_nested 0", Reason::kIndexNotMergeable, "y"},
      {"join_nested: the outer stride is not the inner extent", kFlat + "4 8 z[0] = x[{0}*4+{1}]\n",
       "join_nested 0", Reason::kIndexNotMergeable, "x"},
      {"join_nested: an iterator value the joined iterator cannot express",
       kFlat + "4 8 y[{0}*8+{1}] = {0}\n", "join_nested 0", Reason::kIndexNotMergeable, ""},
      {"join_nested takes no parameter",
       kTiledFlat,
       "join_nested 0",
       Reason::kBadParameter,
       "",
       {},
       2},
  };
}

std::vector<Acceptance> join_nested_acceptances() {
  return {
      {"join_nested of a tiled flat copy", kFlat + "4 8 y[{0}*8+{1}] = x[{0}*8+{1}]\n",
       "join_nested 0"},
  };
}

}  // namespace perfdojo::transforms_test

TEST_CASE("join_nested replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("join_nested");
}

TEST_CASE(
    "join_nested's refused actions name their reason, are refused by apply and change nothing") {
  check_refusals(join_nested_refusals());
}

TEST_CASE("join_nested's legal counterparts are accepted and compute what the original computed") {
  check_acceptances(join_nested_acceptances());
}
