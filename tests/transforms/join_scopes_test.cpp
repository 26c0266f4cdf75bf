// join_scopes: its golden cases, and the actions it must refuse (with the reason) or accept.
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace perfdojo::transforms_test {

std::vector<Refusal> join_scopes_refusals() {
  return {
      {"join_scopes: the path leads nowhere", kTwoScopes, "join_scopes 2", Reason::kNoSuchLocation},
      {"join_scopes: the path names a statement", kTwoScopes, "join_scopes 0.0",
       Reason::kNotAScope},
      {"join_scopes: the last scope has no next sibling", kTwoScopes, "join_scopes 1",
       Reason::kNoNextSibling},
      {"join_scopes: the next sibling is a statement",
       kTwoD + "4 8 y[{0},{1}] = x[{0},{1}]\n| z[{0}] = x[{0},0]\n", "join_scopes 0.0",
       Reason::kNoNextSibling},
      {"join_scopes: extents 8 and 4", kOneD + "N y[{0}] = x[{0}]\n4 z[{0}] = x[{0}]\n",
       "join_scopes 0", Reason::kExtentMismatch},
      {"join_scopes: only one of the scopes is parallel",
       kOneD + "N:par y[{0}] = x[{0}]\nN z[{0}] = x[{0}]\n", "join_scopes 0", Reason::kAnnotated},
      {"join_scopes: the consumer reads what a later producer iteration writes",
       "N = 8\ninput x: f32[N]\ntemp b: f32[N]\noutput c: f32[N]\n\n"
       "N b[{0}] = x[{0}]\nN c[{0}] = b[7-{0}]\n",
       "join_scopes 0", Reason::kDependence, "b"},
      {"join_scopes: the second scope overwrites what a later iteration of the first reads",
       "N = 8\ninput x: f32[N]\noutput y: f32[N]\noutput a: f32[9] = 0\n\n"
       "N y[{0}] = a[{0}]\nN a[{0}+1] = x[{0}]\n",
       "join_scopes 0", Reason::kDependence, "a"},
      {"join_scopes takes no parameter",
       kTwoScopes,
       "join_scopes 0",
       Reason::kBadParameter,
       "",
       {},
       2},
  };
}

std::vector<Acceptance> join_scopes_acceptances() {
  return {
      {"join_scopes of softmax-style producer and consumer of a row maximum",
       kRows + "output d: f32[B, N]\n\nB N m[{0}] = max(s[{0},{1}])\nB N d[{0},{1}] = s[{0},{1}] - "
               "m[{0}]\n",
       "join_scopes 0"},
      {"join_scopes when the consumer reads what an earlier producer iteration wrote",
       "N = 8\ninput x: f32[N]\ntemp b: f32[9] = 0\noutput c: f32[N]\n\n"
       "N b[{0}+1] = x[{0}]\nN c[{0}] = b[{0}]\n",
       "join_scopes 0"},
  };
}

}  // namespace perfdojo::transforms_test

TEST_CASE("join_scopes replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("join_scopes");
}

TEST_CASE(
    "join_scopes refuses to fuse parallel scopes when the fused scope would carry a dependence") {
  // Iteration y of the consumer reads b[y], written by iteration y-1 of the producer. Fusing is
  // legal for plain scopes, but a parallel fused scope would race on b.
  const std::string header = "input x: f32[8]\noutput b: f32[9] = 0\noutput c: f32[8]\n\n";
  const ir::Program plain = load(header + "8 b[{0}+1] = x[{0}]\n8 c[{0}] = b[{0}] * 2\n");
  REQUIRE(transforms::check(plain, action("parallelize 0"), Target{}).ok());
  REQUIRE(transforms::check(plain, action("parallelize 1"), Target{}).ok());
  const ir::Program fused = load(header + "8 b[{0}+1] = x[{0}]\n| c[{0}] = b[{0}] * 2\n");
  REQUIRE(transforms::check(fused, action("parallelize 0"), Target{}).reason ==
          Reason::kDependence);

  const ir::Program p = load(header + "8:par b[{0}+1] = x[{0}]\n8:par c[{0}] = b[{0}] * 2\n");
  const Action join = action("join_scopes 0");
  const Legality l = transforms::check(p, join, Target{});
  if (l.ok()) {
    auto r = transforms::apply(p, join, Target{});
    REQUIRE(r.ok());
    FAIL_CHECK("join_scopes 0 was accepted and made a parallel scope carry a dependence:\n"
               << ir::print_program(*r));
  }
}

TEST_CASE(
    "join_scopes's refused actions name their reason, are refused by apply and change nothing") {
  check_refusals(join_scopes_refusals());
}

TEST_CASE("join_scopes's legal counterparts are accepted and compute what the original computed") {
  check_acceptances(join_scopes_acceptances());
}
