// swap_scopes: its golden cases, and the actions it must refuse (with the reason) or accept.
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace perfdojo::transforms_test {

std::vector<Refusal> swap_scopes_refusals() {
  return {
      {"swap_scopes: the path leads nowhere", kMatmul, "swap_scopes 0.1", Reason::kNoSuchLocation},
      {"swap_scopes: the path names a statement", kMatmul, "swap_scopes 0.0.0.0",
       Reason::kNotAScope},
      {"swap_scopes: the only child is a statement", kMatmul, "swap_scopes 0.0.0",
       Reason::kNotPerfectlyNested},
      {"swap_scopes: a statement next to the inner scope",
       kFlat + "4 8 y[{0}*8+{1}] = x[{0}*8+{1}]\n| z[{0}] = x[{0}]\n", "swap_scopes 0",
       Reason::kNotPerfectlyNested},
      {"swap_scopes: a vector scope must stay innermost",
       kTwoD + "4 8:vec y[{0},{1}] = x[{0},{1}]\n", "swap_scopes 0", Reason::kAnnotated},
      {"swap_scopes: a stencil recurrence with direction (<,>)",
       "output a: f32[5, 7] = 1\n\n4 6 a[{0}+1,{1}] = a[{0},{1}+1] + 1\n", "swap_scopes 0",
       Reason::kDependence, "a"},
      {"swap_scopes: it would reorder a floating-point sum into one scalar",
       "input x: f32[4, 8]\noutput s: f32[1] = 0\n\n4 8 s[0] += x[{0},{1}]\n", "swap_scopes 0",
       Reason::kDependence, "s"},
      {"swap_scopes takes no parameter",
       kMatmul,
       "swap_scopes 0.0",
       Reason::kBadParameter,
       "",
       {},
       2},
  };
}

std::vector<Acceptance> swap_scopes_acceptances() {
  return {
      {"swap_scopes of matmul's N and K", kMatmul, "swap_scopes 0.0"},
      {"swap_scopes of matmul's M and N", kMatmul, "swap_scopes 0"},
      {"swap_scopes of a stencil with direction (<,<)",
       "output a: f32[5, 7] = 1\n\n4 6 a[{0}+1,{1}+1] = a[{0},{1}] + 1\n", "swap_scopes 0"},
      {"swap_scopes of a row sum: each row still sums in the same order",
       "input x: f32[4, 8]\noutput s: f32[4] = 0\n\n4 8 s[{0}] += x[{0},{1}]\n", "swap_scopes 0"},
  };
}

}  // namespace perfdojo::transforms_test

TEST_CASE("swap_scopes replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("swap_scopes");
}

// ---------------------------------------------------------------------------------------------
// Annotations must stay valid after the scopes carrying them move.

TEST_CASE(
    "swap_scopes refuses to move a parallel scope outward over a dependence it would then carry") {
  // Row i+1 depends on row i and column j+1 on column j: direction (<,<). Each row's columns
  // are independent, so the inner scope may be parallel; the swap itself is legal for a plain
  // nest. Moving the parallel scope outward, however, makes it carry the dependence.
  const std::string header = "output a: f32[5, 9] = 1\n\n";
  const ir::Program plain = load(header + "4 8 a[{0}+1,{1}+1] = a[{0},{1}] * 0.5\n");
  REQUIRE(transforms::check(plain, action("parallelize 0.0"), Target{}).ok());
  REQUIRE(transforms::check(plain, action("swap_scopes 0"), Target{}).ok());
  // After the interchange the outer scope carries the dependence, so it may not be parallel.
  const ir::Program swapped = load(header + "8 4 a[{1}+1,{0}+1] = a[{1},{0}] * 0.5\n");
  REQUIRE(transforms::check(swapped, action("parallelize 0"), Target{}).reason ==
          Reason::kDependence);

  const ir::Program p = load(header + "4 8:par a[{0}+1,{1}+1] = a[{0},{1}] * 0.5\n");
  const Action swap = action("swap_scopes 0");
  const Legality l = transforms::check(p, swap, Target{});
  if (l.ok()) {
    auto r = transforms::apply(p, swap, Target{});
    REQUIRE(r.ok());
    const ir::Program stripped = without_annotation(*r, {0});
    FAIL_CHECK("swap_scopes 0 was accepted and made a parallel scope carry a dependence:\n"
               << ir::print_program(*r) << "parallelize on that scope says: "
               << std::string(transforms::reason_name(
                      transforms::check(stripped, action("parallelize 0"), Target{}).reason)));
  }
}

TEST_CASE(
    "swap_scopes's refused actions name their reason, are refused by apply and change nothing") {
  check_refusals(swap_scopes_refusals());
}

TEST_CASE("swap_scopes's legal counterparts are accepted and compute what the original computed") {
  check_acceptances(swap_scopes_acceptances());
}
