// Moves on kernels with indirect indices (docs/actions.md, "Indirect indices"): the moves that
// handle them rewrite an indirect term's own indices with the rest and compute what the kernel
// computed; vectorize refuses lanes that would gather; every other move refuses with
// `indirect`; the flat mask stays the checks' verdicts; random trajectories (the guard) never
// change what a gather kernel computes.
#include <random>
#include <set>

#include "support/scaled_kernels.h"
#include "transforms/flat_space.h"
#include "transforms/semantics_guard.h"
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace indirect_moves_cases {

// An embedding bag at a small size, with a second statement (the mean) for the moves between
// statements.
const std::string kBagMean =
    "B = 4\n"
    "L = 3\n"
    "D = 16\n"
    "V = 10\n"
    "input W: f32[V, D]\n"
    "input idx: i32[B, L] in [0, V)\n"
    "output out: f32[B, D] = 0\n"
    "\n"
    "B L D out[{0},{2}] += W[idx[{0},{1}],{2}]\n"
    "| D out[{0},{1}] = out[{0},{1}] / 3\n";

}  // namespace indirect_moves_cases

using indirect_moves_cases::kBagMean;

TEST_CASE("tiling and interchange rewrite an indirect term's indices with the rest") {
  const ir::Program p = load(kBagMean);
  const ir::Program tiled = apply_all(p, {"tile_scope 0 2"});
  CHECK(ir::print_program(tiled).find("W[idx[{0}*2+{1},{2}],{3}]") != std::string::npos);
  require_same_outputs(p, tiled);
  const ir::Program swapped = apply_all(p, {"swap_scopes 0.0"});
  CHECK(ir::print_program(swapped).find("out[{0},{1}] += W[idx[{0},{2}],{1}]") !=
        std::string::npos);
  require_same_outputs(p, swapped);
  // Vectorised along the table's row (the index the same in every lane), unrolled, split.
  const ir::Program fast = apply_all(
      p, {"tile_scope 0.0.0 8", "vectorize 0.0.0.0 8", "unroll 0.0.0 2", "split_scope 0 1"});
  CHECK(ir::print_program(fast).find(":vec out[{0},{2}*8+{3}] += W[idx[{0},{1}],{2}*8+{3}]") !=
        std::string::npos);
  require_same_outputs(p, fast);
}

TEST_CASE("vectorize refuses lanes that would gather; other moves refuse with indirect") {
  const ir::Program p = load(kBagMean);
  // Lanes along L read a different index element each: a gather.
  const ir::Program lanes_on_l = apply_all(p, {"swap_scopes 0.0"});
  require_refused(
      "B = 4\nL = 8\nD = 2\nV = 10\ninput W: f32[V, D]\ninput idx: i32[B, L] in [0, V)\n"
      "output out: f32[B, D] = 0\n\nB D L out[{0},{1}] += W[idx[{0},{2}],{1}]\n",
      "vectorize 0.0.0 8", Reason::kIndirect, "W");
  // Moves that ask questions of the affine indices alone wait until they handle an indirect one:
  // none of their candidates is legal, and some that their own checks accept say `indirect`.
  const std::set<transforms::Kind> handled = {
      transforms::Kind::kTileScope,    transforms::Kind::kSwapScopes,
      transforms::Kind::kSplitScope,   transforms::Kind::kJoinScopes,
      transforms::Kind::kVectorize,    transforms::Kind::kUnroll,
      transforms::Kind::kParallelize,  transforms::Kind::kClearAnnotation,
      transforms::Kind::kStreamStores, transforms::Kind::kCreateTemporary};
  const transforms::Target target;
  const transforms::FlatActionSpace space({}, target);
  std::set<transforms::Kind> gated;
  // A statement its inner scope does not change (hoist) beside an independent gather
  // (move_statement), so those kinds' own checks accept.
  const ir::Program beside = load(
      "N = 4\nV = 4\ninput x: f32[N]\ninput W: f32[V]\ninput idx: i32[N] in [0, V)\n"
      "output z: f32[N]\noutput g: f32[N]\n\nN N z[{0}] = x[{0}]\nN g[{0}] = W[idx[{0}]]\n");
  for (const ir::Program& q : {p, lanes_on_l, apply_all(p, {"split_scope 0 1"}), beside}) {
    for (int i = 0; i < space.size(); ++i) {
      auto a = space.decode(q, i);
      if (!a || handled.count(a->kind)) continue;
      const transforms::Legality l = transforms::check(q, *a, target);
      CHECK_MESSAGE(!l.ok(), transforms::print_action(*a));
      if (l.reason == Reason::kIndirect) gated.insert(a->kind);
    }
  }
  for (auto k :
       {transforms::Kind::kHoist, transforms::Kind::kSplitRange, transforms::Kind::kMoveStatement})
    CHECK_MESSAGE(gated.count(k), std::string(transforms::kind_name(k))
                                      << " never refused with indirect");
}

TEST_CASE("create_temporary stages a buffer no index touches, never the table or the index") {
  const ir::Program p = load(kBagMean);
  // The bag's accumulators, one row per bag, held across its rows: a register tile.
  const ir::Program staged = apply_all(p, {"create_temporary 0.0 out"});
  CHECK(ir::print_program(staged).find("out_t0[{2}] += W[idx[{0},{1}],{2}]") != std::string::npos);
  require_same_outputs(p, staged);
  // The table read through the index: refused; the index buffer has no access of its own.
  require_refused(p, "create_temporary 0 W", Reason::kIndirect, "W");
  CHECK_FALSE(transforms::check(p, action("create_temporary 0 idx"), transforms::Target{}).ok());
}

TEST_CASE("a resized gather kernel's index range follows the size it was written with") {
  // `in [0, V)` keeps V's name: halving V halves the range, so the smaller instance checks.
  const ir::Program p = load(kBagMean);
  auto half =
      transforms::resize(p, [](const std::string& n, int64_t v) { return n == "V" ? v / 2 : v; });
  REQUIRE(half);
  CHECK(half->find_buffer("idx")->range->second == 5);
  CHECK(half->find_buffer("W")->shape[0] == 5);
  CHECK(ir::print_program(*half).find("input idx: i32[B, L] in [0, V]") != std::string::npos);
}

TEST_CASE("the flat mask is the checks' verdicts on a gather kernel") {
  const transforms::Target target;
  const transforms::FlatActionSpace space({}, target);
  ir::Program p = load(kBagMean);
  std::mt19937_64 rng(5);
  for (int step = 0; step < 12; ++step) {
    const std::vector<uint8_t> mask = space.mask(p);
    int legal = 0;
    for (int i = 0; i < space.size(); ++i) {
      auto a = space.decode(p, i);
      const bool ok = a && transforms::check(p, *a, target).ok();
      CHECK_MESSAGE(static_cast<bool>(mask[i]) == ok, "action " << i << " at step " << step);
      legal += ok;
    }
    if (legal == 0) break;
    auto next = transforms::sample_legal_action(p, target, rng);
    if (!next) break;
    auto q = transforms::apply(p, *next, target);
    REQUIRE(q.ok());
    p = *q;
  }
}

TEST_CASE("random legal trajectories never change what a gather kernel computes") {
  transforms::GuardOptions options;
  options.trajectories = 150;
  options.max_steps = 25;
  int steps = 0;
  for (const char* name : {"embedding-bag-sum", "embedding-bag-mean", "embedding", "csr-spmv",
                           "csr-spmm", "bsr-spmm", "sparse24-gemm"}) {
    auto loaded = testing::load_scaled_kernel(name);
    REQUIRE_MESSAGE(loaded.ok(), loaded.error_text());
    options.seed = std::hash<std::string>{}(name);
    const transforms::GuardReport r = transforms::run_semantics_guard(loaded.value(), options);
    REQUIRE_MESSAGE(r.error.empty(), name << ": " << r.error);
    REQUIRE_MESSAGE(!r.failure, transforms::describe(*r.failure, name));
    steps += r.steps;
    if (std::string(name) != "csr-spmv")  // its one statement gathers x along every scope
      CHECK(r.kind_counts[static_cast<int>(transforms::Kind::kVectorize)] > 0);
  }
  CHECK(steps > 7 * options.trajectories);
}
