// Moves on programs with bounded (non-rectangular) scopes (docs/actions.md, "Bounded scopes"):
// each either handles them, computing what the program computed, or refuses with
// non_rectangular; and the flat mask stays the checks' verdicts on such programs.
#include "support/scaled_kernels.h"
#include "transforms/flat_space.h"
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace bounded_scopes_cases {

// trmm at a small size: C[i,j] = sum_{k <= i} A[i,k] B[k,j], loops i k j.
const std::string kTrmm =
    "N = 8\n"
    "input A: f32[N, N]\n"
    "input B: f32[N, N]\n"
    "output C: f32[N, N] = 0\n"
    "temp t: f32[N] = 0\n"
    "\n"
    "N N(..{0}+1) N C[{0},{2}] += A[{0},{1}] * B[{1},{2}]\n"
    "N N t[{0}] += C[{0},{1}]\n";

}  // namespace bounded_scopes_cases

using bounded_scopes_cases::kTrmm;

TEST_CASE("moves that do not handle a bounded scope refuse it with non_rectangular") {
  const ir::Program p = load(kTrmm);
  // The bounded scope itself, and the scope holding it (tile_scope and vectorize handle them:
  // the next test).
  require_refused(p, "unroll 0.0 2", Reason::kNonRectangular);
  require_refused(p, "swap_scopes 0.0", Reason::kNonRectangular);  // the outer one is bounded
  require_refused(p, "split_range 0 3", Reason::kNonRectangular);
  // The next sibling is bounded: an independent nest may not trade places with it (yet).
  require_refused(
      "N = 8\ninput x: f32[N]\noutput y: f32[N]\noutput z: f32[N] = 0\n\n"
      "N y[{0}] = x[{0}]\nN N(..{0}+1) z[{0}] += x[{1}]\n",
      "move_statement 0", Reason::kNonRectangular);
  // A buffer written under the bounded scope.
  require_refused(p, "create_temporary 0 C", Reason::kNonRectangular);
}

TEST_CASE("tile_scope moves a scope's bounds to its inner scope; vectorize runs a bounded one") {
  const ir::Program p = load(kTrmm);
  // k <= i tiled by 4: the inner scope keeps k = {1}*4+{2} <= {0}, the outer runs every tile.
  const ir::Program tiled = apply_all(p, {"tile_scope 0.0 4"});
  CHECK(ir::print_program(tiled).find("N 2 4(..{0}-{1}*4+1) N C[{0},{3}] += A[{0},{1}*4+{2}]") !=
        std::string::npos);
  require_same_outputs(p, tiled);
  // A band clamped at both ends, tiled, then its inner scope vectorised.
  const std::string band =
      "N = 16\ninput x: f32[N, N]\noutput y: f32[N, N] = 0\n\n"
      "N N({0}-5..{0}+3) y[{0},{1}] = x[{0},{1}] * 2\n";
  const ir::Program b = load(band);
  const ir::Program bv = apply_all(b, {"tile_scope 0.0 8", "vectorize 0.0.0 8"});
  CHECK(ir::print_program(bv).find("N 2 8({0}-{1}*8-5..{0}-{1}*8+3):vec y") != std::string::npos);
  require_same_outputs(b, bv);
  // vectorize at a bounded scope that is not innermost is refused by its own check.
  require_refused(p, "vectorize 0.0 8", Reason::kNotInnermost);
}

TEST_CASE("swap_scopes interchanges a triangle and a band with their bounds rewritten exactly") {
  // trmm: i outer, k <= i inner -> k outer, i >= k inner.
  const ir::Program p = load(kTrmm);
  const ir::Program swapped = apply_all(p, {"swap_scopes 0"});
  CHECK(ir::print_program(swapped).find("N N({0}..) N C[{1},{2}] += A[{1},{0}] * B[{0},{2}]") !=
        std::string::npos);
  require_same_outputs(p, swapped);
  // Back again: the bounds return to where they were.
  const ir::Program back = apply_all(swapped, {"swap_scopes 0"});
  CHECK(ir::print_program(back).find("N N(..{0}+1) N C[{0},{2}]") != std::string::npos);
  require_same_outputs(p, back);
  // A band clamped at both ends, under an outer scope its bounds also use.
  const std::string band =
      "N = 8\nB = 2\ninput x: f32[B, N]\noutput y: f32[B, N] = 0\n\n"
      "B N N({1}-2-{0}..{1}+2) y[{0},{1}] += x[{0},{2}] * ({2} + 1)\n";
  const ir::Program b = load(band);
  const ir::Program bs = apply_all(b, {"swap_scopes 0.0"});
  CHECK(ir::print_program(bs).find("B N N({1}-1..{0}+{1}+3) y[{0},{2}]") != std::string::npos);
  require_same_outputs(b, bs);
  // A coefficient of 2 on the outer iterator has no exact single bound: refused.
  require_refused("N = 8\ninput x: f32[N]\noutput y: f32[N] = 0\n\nN N(..{0}*2) y[{0}] += x[{1}]\n",
                  "swap_scopes 0", Reason::kNonRectangular);
}

TEST_CASE("annotations, tiling around a bounded scope and moves elsewhere compute the same") {
  const ir::Program p = load(kTrmm);
  // Tiling the outer scope re-indexes the bound: {0} becomes {0}*2+{1}.
  const ir::Program tiled = apply_all(p, {"tile_scope 0 2"});
  CHECK(ir::print_program(tiled).find("2 N(..{0}*2+{1}+1) N C[{0}*2+{1},{3}]") !=
        std::string::npos);
  require_same_outputs(p, tiled);
  // Vectorising the rectangular innermost scope under the bound; parallel rows.
  const ir::Program fast = apply_all(p, {"vectorize 0.0.0 8", "parallelize 0"});
  require_same_outputs(p, fast);
  // The rectangular nest that follows takes its own moves.
  const ir::Program rest = apply_all(p, {"tile_scope 1.0 4", "swap_scopes 1"});
  require_same_outputs(p, rest);
}

TEST_CASE("on bounded kernels the flat mask is the checks' verdict at every index") {
  const transforms::Target target;
  const transforms::FlatActionSpace space({}, target);
  for (const char* name : {"trmm", "syrk-lower", "causal-attention-bounded", "lu-bounded"}) {
    INFO(name);
    auto loaded = testing::load_scaled_kernel(name);
    REQUIRE(loaded.ok());
    const ir::Program& p = loaded.value();
    const std::vector<uint8_t> mask = space.mask(p);
    int legal = 0;
    for (int i = 0; i < space.size(); ++i) {
      auto a = space.decode(p, i);
      const bool ok = a && transforms::check(p, *a, target).ok();
      CHECK_MESSAGE((mask[i] != 0) == ok, "index ", i);
      legal += ok;
    }
    CHECK(legal > 0);
  }
}

TEST_CASE("mask_to_bounds is an action of the flat space; an older layout of 18 kinds has none") {
  const transforms::Target target;
  const transforms::FlatActionSpace space({}, target);
  CHECK(space.param_count(Kind::kMaskToBounds) == 1);
  const ir::Program p = load(
      "N = 8\ninput x: f32[N]\noutput y: f32[N] = 0\n\nN N y[{0}] += {1} < {0} ? x[{1}] : 0\n");
  const Action a = action("mask_to_bounds 0.0");
  CHECK(transforms::check(p, a, target).ok());
  const int index = space.encode(p, a);
  REQUIRE(index >= 0);
  CHECK(space.decode(p, index) == a);
  CHECK(space.mask(p)[index]);
  // The layout the first shipped agent was trained on: the registry's first 18 kinds, with the
  // same indices for them (kinds are append-only).
  transforms::FlatSpaceConfig old;
  old.kinds = 18;
  const transforms::FlatActionSpace first(old, target);
  CHECK(first.param_count(Kind::kMaskToBounds) == 0);
  CHECK(first.encode(p, a) == -1);
  CHECK(first.size() < space.size());
  const Action tile = action("tile_scope 0.0 4");
  CHECK(first.encode(p, tile) == space.encode(p, tile));
  for (int i = 0; i < first.size(); ++i)
    if (auto d = first.decode(p, i)) CHECK(static_cast<int>(d->kind) < 18);
}
