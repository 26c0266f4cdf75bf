// unroll: its golden cases, and the actions it must refuse (with the reason) or accept.
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace perfdojo::transforms_test {

std::vector<Refusal> unroll_refusals() {
  return {
      {"unroll: the path leads nowhere", kOneScope, "unroll 1 2", Reason::kNoSuchLocation},
      {"unroll: the path names a statement", kOneScope, "unroll 0.0 2", Reason::kNotAScope},
      {"unroll: the scope is parallel", kOneD + "N:par y[{0}] = x[{0}]\n", "unroll 0 2",
       Reason::kAnnotated},
      {"unroll: a factor of 1", kOneScope, "unroll 0 1", Reason::kBadParameter},
      {"unroll: a factor above the extent", kOneScope, "unroll 0 16", Reason::kBadParameter},
      {"unroll: a factor above 64",
       "input x: f32[128]\noutput y: f32[128]\n\n128 y[{0}] = x[{0}]\n", "unroll 0 128",
       Reason::kBadParameter},
      {"unroll: 3 does not divide 8", kOneScope, "unroll 0 3", Reason::kNotDivisible},
  };
}

std::vector<Acceptance> unroll_acceptances() {
  return {
      {"unroll 8 by 2", kOneD + "N y[{0}] = x[{0}]\n", "unroll 0 2"},
  };
}

}  // namespace perfdojo::transforms_test

TEST_CASE("unroll replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("unroll");
}

TEST_CASE("unroll's refused actions name their reason, are refused by apply and change nothing") {
  check_refusals(unroll_refusals());
}

TEST_CASE("unroll's legal counterparts are accepted and compute what the original computed") {
  check_acceptances(unroll_acceptances());
}
