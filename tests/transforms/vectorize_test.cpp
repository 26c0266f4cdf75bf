// vectorize: its golden cases, and the actions it must refuse (with the reason) or accept.
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace perfdojo::transforms_test {

std::vector<Refusal> vectorize_refusals() {
  return {
      {"vectorize: the path leads nowhere", kOneScope, "vectorize 1 8", Reason::kNoSuchLocation},
      {"vectorize: the path names a statement", kOneScope, "vectorize 0.0 8", Reason::kNotAScope},
      {"vectorize: the target has no 4-lane vectors", kOneScope, "vectorize 0 4",
       Reason::kUnsupportedByTarget},
      {"vectorize: the scope is unrolled", kOneD + "N:unroll y[{0}] = x[{0}]\n", "vectorize 0 8",
       Reason::kAnnotated},
      {"vectorize: the scope holds a scope", kSquare + "8 8 y[{0},{1}] = x[{0},{1}]\n",
       "vectorize 0 8", Reason::kNotInnermost},
      {"vectorize: 8 does not divide 12",
       "input x: f32[12]\noutput y: f32[12]\n\n12 y[{0}] = x[{0}]\n", "vectorize 0 8",
       Reason::kNotDivisible},
      {"vectorize: a stride-2 access", kSixteen + "16 y[{0}] = x2[{0}*2]\n", "vectorize 0 16",
       Reason::kNonContiguous, "x2"},
      {"vectorize: the lanes walk an outer dimension", kSixteen + "16 y[{0}] = m[{0},0]\n",
       "vectorize 0 16", Reason::kNonContiguous, "m"},
      {"vectorize: a recurrence carried by the scope", kSixteen + "16 a[{0}+1] = a[{0}] + x[{0}]\n",
       "vectorize 0 16", Reason::kDependence, "a"},
      {"vectorize: a partial sum read in the same scope",
       kSixteen + "16 s[0] += x[{0}]\n| y[{0}] = s[0]\n", "vectorize 0 16", Reason::kDependence,
       "s"},
      {"vectorize: a reduction that also reads its own target",
       kSixteen + "16 s[0] += s[0] * x[{0}]\n", "vectorize 0 16", Reason::kDependence, "s"},
      {"vectorize: every lane stores to one element", kSixteen + "16 s[0] = x[{0}]\n",
       "vectorize 0 16", Reason::kDependence, "s"},
  };
}

std::vector<Acceptance> vectorize_acceptances() {
  return {
      {"vectorize a row sum over the inner scope",
       "input x: f32[4, 32]\noutput s: f32[4] = 0\n\n4 32 s[{0}] += x[{0},{1}]\n",
       "vectorize 0.0 16"},
      {"vectorize a global sum into a scalar", kSixteen + "16 s[0] += x[{0}]\n", "vectorize 0 16"},
      {"vectorize with an invariant operand and an offset read",
       kSixteen + "16 y[{0}] = x2[{0}+1] * m[3,2]\n", "vectorize 0 8"},
      {"vectorize an iterator value (an iota) and a mask from it",
       kSixteen + "16 y[{0}] = {0} < 5 ? x[{0}] * ({0}+1) : 0\n", "vectorize 0 16"},
      {"vectorize iterator values of any stride over the lanes (a distance i - j, a stride 2)",
       kSixteen + "16 y[{0}] = x[{0}] * (15-{0}) + {0}*2\n", "vectorize 0 16"},
  };
}

}  // namespace perfdojo::transforms_test

TEST_CASE("vectorize replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("vectorize");
}

TEST_CASE(
    "vectorize's refused actions name their reason, are refused by apply and change nothing") {
  check_refusals(vectorize_refusals());
}

TEST_CASE("vectorize's legal counterparts are accepted and compute what the original computed") {
  check_acceptances(vectorize_acceptances());
}
