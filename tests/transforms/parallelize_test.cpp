// parallelize: its golden cases, and the actions it must refuse (with the reason) or accept.
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace perfdojo::transforms_test {

std::vector<Refusal> parallelize_refusals() {
  return {
      {"parallelize: the path leads nowhere", kOneScope, "parallelize 1", Reason::kNoSuchLocation},
      {"parallelize: the path names a statement", kOneScope, "parallelize 0.0", Reason::kNotAScope},
      {"parallelize: the target has no threads", kOneScope, "parallelize 0",
       Reason::kUnsupportedByTarget, "", no_threads()},
      {"parallelize: the scope is unrolled", kOneD + "N:unroll y[{0}] = x[{0}]\n", "parallelize 0",
       Reason::kAnnotated},
      {"parallelize: a single iteration",
       "input x: f32[1, 8]\noutput y: f32[1, 8]\n\n1 8 y[{0},{1}] = x[{0},{1}]\n", "parallelize 0",
       Reason::kNothingToDo},
      {"parallelize: an enclosing scope is parallel", kTwoD + "4:par 8 y[{0},{1}] = x[{0},{1}]\n",
       "parallelize 0.0", Reason::kNestedParallel},
      {"parallelize: an inner scope is parallel", kTwoD + "4 8:par y[{0},{1}] = x[{0},{1}]\n",
       "parallelize 0", Reason::kNestedParallel},
      {"parallelize: the reduction scope K of a matmul", kMatmul, "parallelize 0.0.0",
       Reason::kDependence, "C"},
      {"parallelize: a scalar accumulator", kSixteen + "16 s[0] += x[{0}]\n", "parallelize 0",
       Reason::kDependence, "s"},
      {"parallelize: a recurrence", kSixteen + "16 a[{0}+1] = a[{0}] + x[{0}]\n", "parallelize 0",
       Reason::kDependence, "a"},
      {"parallelize: a temporary read before the iteration writes it carries the row before",
       "input x: f32[6, 5]\noutput y: f32[6, 5]\ntemp t: f32[5] = 0\n\n"
       "6 5 y[{0},{1}] = t[{1}]\n| 5 t[{1}] = x[{0},{1}]\n",
       "parallelize 0", Reason::kDependence, "t"},
      // 32 copies of a 2^20-element temporary would pass 2^24 elements: none are made, and the
      // temporary still carries a write-after-write between iterations.
      {"parallelize: per-iteration copies too large to make",
       "input x: f32[32, 1048576]\noutput y: f32[32, 1048576]\ntemp t: f32[1048576]\n\n"
       "32 1048576 t[{1}] = x[{0},{1}]\n| 1048576 y[{0},{1}] = t[{1}]\n",
       "parallelize 0", Reason::kDependence, "t"},
      {"parallelize takes no parameter",
       kOneScope,
       "parallelize 0",
       Reason::kBadParameter,
       "",
       {},
       2},
  };
}

std::vector<Acceptance> parallelize_acceptances() {
  return {
      {"parallelize matmul's M scope", kMatmul, "parallelize 0"},
      {"parallelize matmul's N scope", kMatmul, "parallelize 0.0"},

      {"parallelize the inner scope of a recurrence over rows",
       "input x: f32[4, 8]\noutput a: f32[5, 8] = 0\n\n4 8 a[{0}+1,{1}] = a[{0},{1}] + "
       "x[{0},{1}]\n",
       "parallelize 0.0"},
  };
}

}  // namespace perfdojo::transforms_test

TEST_CASE("parallelize replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("parallelize");
}

TEST_CASE("moving a parallel scope inward and fusing independent parallel scopes stay legal") {
  const ir::Program transpose =
      load("input x: f32[4, 8]\noutput y: f32[8, 4]\n\n4:par 8 y[{1},{0}] = x[{0},{1}]\n");
  CHECK(transforms::check(transpose, action("swap_scopes 0"), Target{}).ok());
  const ir::Program two = load(kOneD + "N:par y[{0}] = x[{0}]\nN:par z[{0}] = y[{0}] * 2\n");
  auto r = transforms::apply(two, action("join_scopes 0"), Target{});
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  CHECK(ir::print_program(*r) == kOneD + "N:par y[{0}] = x[{0}]\n| z[{0}] = y[{0}] * 2\n");
}

TEST_CASE(
    "parallelize's refused actions name their reason, are refused by apply and change nothing") {
  check_refusals(parallelize_refusals());
}

TEST_CASE("parallelize's legal counterparts are accepted and compute what the original computed") {
  check_acceptances(parallelize_acceptances());
}
