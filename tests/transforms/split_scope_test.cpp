// split_scope: its golden cases, and the actions it must refuse (with the reason) or accept.
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace perfdojo::transforms_test {

std::vector<Refusal> split_scope_refusals() {
  return {
      {"split_scope: the path leads nowhere", kTwoChildren, "split_scope 3 1",
       Reason::kNoSuchLocation},
      {"split_scope: the path names a statement", kTwoChildren, "split_scope 0.0 1",
       Reason::kNotAScope},
      {"split_scope: a scope with one child", kOneScope, "split_scope 0 1", Reason::kNothingToDo},
      {"split_scope: index 0 leaves the first scope empty", kTwoChildren, "split_scope 0 0",
       Reason::kBadParameter},
      {"split_scope: index n leaves the second scope empty", kTwoChildren, "split_scope 0 2",
       Reason::kBadParameter},
      {"split_scope: fission would reverse a dependence from the tail to a later head",
       "N = 8\ninput x: f32[N]\noutput a: f32[9] = 0\noutput y: f32[N]\n\n"
       "N y[{0}] = a[{0}] + x[{0}]\n| a[{0}+1] = x[{0}] * 2\n",
       "split_scope 0 1", Reason::kDependence, "a"},
  };
}

std::vector<Acceptance> split_scope_acceptances() {
  return {
      {"split_scope of a forward dependence",
       kOneD + "N y[{0}] = x[{0}] * 2\n| z[{0}] = y[{0}] + 1\n", "split_scope 0 1"},
      {"split_scope when the head writes ahead of the tail",
       "N = 8\ninput x: f32[N]\noutput a: f32[9] = 0\noutput y: f32[N]\n\n"
       "N a[{0}+1] = x[{0}]\n| y[{0}] = a[{0}]\n",
       "split_scope 0 1"},
  };
}

}  // namespace perfdojo::transforms_test

TEST_CASE("split_scope replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("split_scope");
}

TEST_CASE(
    "split_scope's refused actions name their reason, are refused by apply and change nothing") {
  check_refusals(split_scope_refusals());
}

TEST_CASE("split_scope's legal counterparts are accepted and compute what the original computed") {
  check_acceptances(split_scope_acceptances());
}
