// tile_scope: its golden cases, and the actions it must refuse (with the reason) or accept.
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace perfdojo::transforms_test {

std::vector<Refusal> tile_scope_refusals() {
  return {
      {"tile_scope: the path leads nowhere", kOneScope, "tile_scope 1 4", Reason::kNoSuchLocation},
      {"tile_scope: the path names a statement", kOneScope, "tile_scope 0.0 4", Reason::kNotAScope},
      {"tile_scope: the scope is parallel", kOneD + "N:par y[{0}] = x[{0}]\n", "tile_scope 0 4",
       Reason::kAnnotated},
      {"tile_scope: a factor equal to the extent", kOneScope, "tile_scope 0 8",
       Reason::kBadParameter},
      {"tile_scope: a factor of 1", kOneScope, "tile_scope 0 1", Reason::kBadParameter},
      {"tile_scope: 3 does not divide 8", kOneScope, "tile_scope 0 3", Reason::kNotDivisible},
  };
}

std::vector<Acceptance> tile_scope_acceptances() {
  return {
      {"tile_scope 16 by 4", kSixteen + "16 y[{0}] = x[{0}] * 2\n", "tile_scope 0 4"},
  };
}

}  // namespace perfdojo::transforms_test

TEST_CASE("tile_scope replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("tile_scope");
}

TEST_CASE(
    "tile_scope's refused actions name their reason, are refused by apply and change nothing") {
  check_refusals(tile_scope_refusals());
}

TEST_CASE("tile_scope's legal counterparts are accepted and compute what the original computed") {
  check_acceptances(tile_scope_acceptances());
}
