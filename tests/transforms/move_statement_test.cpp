// move_statement: its golden cases, and the actions it must refuse (with the reason) or accept,
// which legality_test.cpp runs together with the other loop-structure transformations'.
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace perfdojo::transforms_test {

std::vector<Refusal> move_statement_refusals() {
  return {
      {"move_statement: the path leads nowhere", kTwoChildren, "move_statement 0.2",
       Reason::kNoSuchLocation},
      {"move_statement: the last child has no next sibling", kTwoChildren, "move_statement 0.1",
       Reason::kNoNextSibling},
      {"move_statement: the next statement reads what this one writes",
       kOneD + "N y[{0}] = x[{0}] * 2\n| z[{0}] = y[{0}] + 1\n", "move_statement 0.0",
       Reason::kDependence, "y"},
      {"move_statement: a scope over the statement that reads its result",
       kRows + "B N m[{0}] = max(s[{0},{1}])\n| t[{0}] = m[{0}] * 2\n", "move_statement 0.0",
       Reason::kDependence, "m"},
      {"move_statement takes no parameter",
       kTwoChildren,
       "move_statement 0.0",
       Reason::kBadParameter,
       "",
       {},
       2},
  };
}

std::vector<Acceptance> move_statement_acceptances() {
  return {
      {"move_statement of independent statements",
       kOneD + "N y[{0}] = x[{0}] * 2\n| z[{0}] = x[{0}] + 1\n", "move_statement 0.0"},
      {"move_statement over a dependence carried only across iterations",
       "N = 8\ninput x: f32[N]\noutput a: f32[9] = 0\noutput y: f32[N]\n\n"
       "N a[{0}+1] = x[{0}]\n| y[{0}] = a[{0}]\n",
       "move_statement 0.0"},
  };
}

}  // namespace perfdojo::transforms_test

TEST_CASE("move_statement replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("move_statement");
}

TEST_CASE(
    "move_statement's refused actions name their reason, are refused by apply and change nothing") {
  check_refusals(move_statement_refusals());
}

TEST_CASE(
    "move_statement's legal counterparts are accepted and compute what the original computed") {
  check_acceptances(move_statement_acceptances());
}
