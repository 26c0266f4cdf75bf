// mask_to_bounds: its refusals (one per reason), the masked suite kernels it takes to their
// bounded forms bit for bit, and its golden cases (tests/data/golden/mask_to_bounds).
#include "support/scaled_kernels.h"
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace mask_to_bounds_cases {

const std::string kHead =
    "N = 8\n"
    "input x: f32[N]\n"
    "input A: f32[N, N]\n"
    "output y: f32[N] = 0\n"
    "output m: f32[N] = -inf\n"
    "output C: f32[N, N]\n"
    "\n";

}  // namespace mask_to_bounds_cases

using mask_to_bounds_cases::kHead;

TEST_CASE("mask_to_bounds refuses what is not a masked scope, each with its reason") {
  // Not a scope; an annotated one.
  require_refused(kHead + "N N y[{0}] += {1} < {0} ? x[{1}] : 0\n", "mask_to_bounds 0.0.0",
                  Reason::kNotAScope);
  require_refused(kHead + "N N:unroll y[{0}] += {1} < {0} ? x[{1}] : 0\n", "mask_to_bounds 0.0",
                  Reason::kAnnotated);
  // No select; a select whose discarded side is not a no-op (a store of 0 writes the zeros).
  require_refused(kHead + "N N y[{0}] += x[{1}]\n", "mask_to_bounds 0.0", Reason::kIrregularAccess,
                  "y");
  require_refused(kHead + "N N C[{0},{1}] = {1} <= {0} ? A[{0},{1}] : 0\n", "mask_to_bounds 0.0",
                  Reason::kIrregularAccess, "C");
  // `+=` with +0 into a target another statement stores to (it could hold -0).
  require_refused(kHead + "N y[{0}] = -x[{0}] * 0\n| N y[{0}] += {1} < {0} ? x[{1}] : 0\n",
                  "mask_to_bounds 0.1", Reason::kIrregularAccess, "y");
  // A condition that is not a bound on this scope's iterator: the outer one, `!=`, 2*{1}.
  require_refused(kHead + "N N y[{0}] += {0} < 4 ? x[{1}] : 0\n", "mask_to_bounds 0.0",
                  Reason::kIrregularAccess);
  require_refused(kHead + "N N y[{0}] += {1} != {0} ? x[{1}] : 0\n", "mask_to_bounds 0.0",
                  Reason::kIrregularAccess);
  require_refused(kHead + "N N y[{0}] += {1}*2 < {0} ? x[{1}] : 0\n", "mask_to_bounds 0.0",
                  Reason::kIrregularAccess);
  // Two statements with different masks.
  require_refused(kHead +
                      "N N y[{0}] += {1} < {0} ? x[{1}] : 0\n"
                      "| | m[{0}] = max({1} <= {0} ? x[{1}] : -inf)\n",
                  "mask_to_bounds 0.0", Reason::kIrregularAccess);
  // A bound the scope already has on that side is not replaced.
  require_refused(kHead + "N N(..{0}+1) y[{0}] += {1} < {0} ? x[{1}] : 0\n", "mask_to_bounds 0.0",
                  Reason::kIrregularAccess);
}

TEST_CASE("mask_to_bounds turns each no-op form into bounds, bit for bit") {
  struct Case {
    std::string body, action, bounded;
  };
  const std::vector<Case> cases = {
      {"N N y[{0}] += {1} < {0} ? x[{1}] : 0\n", "mask_to_bounds 0.0",
       "N N(..{0}) y[{0}] += x[{1}]"},
      {"N N y[{0}] += {1} > {0} ? 0 : x[{1}]\n", "mask_to_bounds 0.0",
       "N N(..{0}+1) y[{0}] += x[{1}]"},
      {"N N m[{0}] = max({0} < {1} ? x[{1}] : -inf)\n", "mask_to_bounds 0.0",
       "N N({0}+1..) m[{0}] = max(x[{1}])"},
      {"N N C[{0},{1}] = A[{0},{1}]\nN N C[{0},{1}] = {1} >= {0} ? C[{0},{1}] * 2 : C[{0},{1}]\n",
       "mask_to_bounds 1.0", "N N({0}..) C[{0},{1}] = C[{0},{1}] * 2"},
      {"N N C[{0},{1}] = A[{0},{1}]\nN N C[{0},{1}] = {1} == {0}+1 ? C[{0},{1}] * 2 : C[{0},{1}]\n",
       "mask_to_bounds 1.0", "N N({0}+1..{0}+2) C[{0},{1}] = C[{0},{1}] * 2"},
      // A band, one side at a time.
      {"N N y[{0}] += {1} > {0}-3 ? ({1} <= {0} ? x[{1}] : 0) : 0\n", "mask_to_bounds 0.0",
       "N N({0}-2..) y[{0}] += {1} <= {0} ? x[{1}] : 0"},
  };
  for (const auto& c : cases) {
    INFO(c.body);
    const ir::Program before = load(kHead + c.body);
    const ir::Program after = apply_all(before, {c.action});
    CHECK(ir::print_program(after).find(c.bounded) != std::string::npos);
    require_same_outputs(before, after);
  }
  // The band's second side.
  const ir::Program band =
      load(kHead + "N N y[{0}] += {1} > {0}-3 ? ({1} <= {0} ? x[{1}] : 0) : 0\n");
  const ir::Program both = apply_all(band, {"mask_to_bounds 0.0", "mask_to_bounds 0.0"});
  CHECK(ir::print_program(both).find("N N({0}-2..{0}+1) y[{0}] += x[{1}]") != std::string::npos);
  require_same_outputs(band, both);
}

TEST_CASE("mask_to_bounds takes the masked triangular solvers to their bounded forms") {
  // The suite's masked forms and the bounded forms written by hand: the moves reach the same
  // iteration spaces, and the outputs are the masked kernel's, bit for bit.
  struct Solver {
    const char* masked;
    const char* bounded;
    std::vector<std::string> moves;
  };
  for (const Solver& s :
       {Solver{"trsv-lower", "trsv-lower-bounded", {"mask_to_bounds 0.0"}},
        Solver{"lu",
               "lu-bounded",
               {"mask_to_bounds 1.0", "mask_to_bounds 1.1", "mask_to_bounds 1.1.0"}},
        Solver{"cholesky",
               "cholesky-bounded",
               {"mask_to_bounds 1.1", "mask_to_bounds 1.2.0", "mask_to_bounds 1.2.0"}}}) {
    INFO(s.masked);
    auto loaded = testing::load_scaled_kernel(s.masked);
    REQUIRE(loaded.ok());
    const ir::Program masked = loaded.value();
    const ir::Program moved = apply_all(masked, s.moves);
    require_same_outputs(masked, moved);
    auto bounded = testing::load_scaled_kernel(s.bounded);
    REQUIRE(bounded.ok());
    require_same_outputs(masked, bounded.value());
  }
}

TEST_CASE("mask_to_bounds replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("mask_to_bounds");
}
