// split_range: its golden cases, and the actions it must refuse (with the reason) or accept.
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace perfdojo::transforms_test {

std::vector<Refusal> split_range_refusals() {
  return {
      {"split_range: the path leads nowhere", kOneScope, "split_range 1 3",
       Reason::kNoSuchLocation},
      {"split_range: the path names a statement", kOneScope, "split_range 0.0 3",
       Reason::kNotAScope},
      {"split_range: the scope is vectorised", kOneD + "N:vec y[{0}] = x[{0}]\n", "split_range 0 3",
       Reason::kAnnotated},
      {"split_range: a factor equal to the extent", kOneScope, "split_range 0 8",
       Reason::kBadParameter},
      {"split_range: a factor of 1", kOneScope, "split_range 0 1", Reason::kBadParameter},
      {"split_range: 4 divides 8, tile_scope applies", kOneScope, "split_range 0 4",
       Reason::kNothingToDo},
  };
}

std::vector<Acceptance> split_range_acceptances() {
  return {
      {"split_range 8 by 3: 6 then 2", kOneScope, "split_range 0 3"},
      {"split_range of matmul's reduction: 3 then 3 more with the offset", kMatmul,
       "split_range 0.0.0 4"},
      {"split_range of a scope whose iterator the index does not use",
       kSixteen + "16 3 s[0] += x[{0}]\n", "split_range 0.0 2"},
  };
}

}  // namespace perfdojo::transforms_test

TEST_CASE("split_range replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("split_range");
}

TEST_CASE(
    "split_range's refused actions name their reason, are refused by apply and change nothing") {
  check_refusals(split_range_refusals());
}

TEST_CASE("split_range's legal counterparts are accepted and compute what the original computed") {
  check_acceptances(split_range_acceptances());
}

TEST_CASE("split_range keeps the iteration order, so a carried dependence stays satisfied") {
  // A prefix sum: each iteration reads the previous one's result; any other order would differ.
  const ir::Program p = load(R"(input x: f32[10]
output y: f32[11] = 0

10 y[{0}+1] = y[{0}] + x[{0}]
)");
  const ir::Program q = apply_all(p, {"split_range 0 4"});
  CHECK(q.body.size() == 2);
  CHECK(q.body[0]->extent == 8);
  CHECK(q.body[1]->extent == 2);
  require_same_outputs(p, q);
  // The first part tiles by the factor now.
  require_same_outputs(p, apply_all(q, {"tile_scope 0 4"}));
}
