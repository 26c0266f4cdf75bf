// The product's promise: any sequence of legal actions computes what the original computed.
//
// For every kernel of the suite (at interpreter-friendly sizes) this runs many seeded random
// trajectories of legal actions and compares the final program's outputs with the original's on
// the same seeded inputs. The interpreter executes every scope in order (annotations included),
// and every transformation keeps each element's sequence of operations, so the comparison is
// exact: compiled code may reassociate vectorised reductions, the interpreter never does. The
// interpreter runs strict: a read of an element nothing has written fails the trajectory.
// PERFDOJO_GUARD_TRAJECTORIES, PERFDOJO_GUARD_STEPS and PERFDOJO_GUARD_SEED scale it up.
#include "transforms/semantics_guard.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "ir/check.h"
#include "ir/interp.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "support/scaled_kernels.h"
#include "transforms/action_space.h"
#include "transforms/analysis.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/registry.h"

using namespace perfdojo;
using transforms::Action;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// PERFDOJO_GUARD_SEED shifts every kernel's seed: a large run with a new seed walks new
// trajectories instead of repeating the first ones of the default run.
uint64_t env_seed() {
  const char* v = std::getenv("PERFDOJO_GUARD_SEED");
  return v ? std::strtoull(v, nullptr, 10) : 0;
}

// The trajectories' action sampler: a kind uniformly, then a legal candidate of that kind.
std::optional<Action> random_legal_action(const ir::Program& p, const transforms::Target& t,
                                          std::mt19937_64& rng) {
  return transforms::sample_legal_action(p, t, rng);
}

}  // namespace

TEST_CASE("every suite kernel has interpreter-friendly sizes for the guard") {
  // A kernel missing here would be interpreted at full size: minutes per trajectory.
  for (const auto& name : testing::suite_kernel_names()) {
    CHECK_MESSAGE(testing::small_sizes().count(name) == 1, "add " << name << " to small_sizes()");
    auto p = testing::load_scaled_kernel(name);
    REQUIRE_MESSAGE(p.ok(), p.error_text());
    int64_t elements = 0;
    for (const auto& b : p.value().buffers) elements += b.elements();
    CHECK_MESSAGE(elements <= 4096, name << " has " << elements << " elements at its small sizes");
  }
}

TEST_CASE("random legal trajectories never change what a suite kernel computes" *
          doctest::test_suite("slow")) {
  transforms::GuardOptions options;
  options.trajectories = env_int("PERFDOJO_GUARD_TRAJECTORIES", 200);
  options.max_steps = env_int("PERFDOJO_GUARD_STEPS", 30);
  int total_steps = 0;
  std::vector<int> kind_counts(transforms::kNumKinds, 0);
  for (const auto& name : testing::suite_kernel_names()) {
    auto loaded = testing::load_scaled_kernel(name);
    REQUIRE_MESSAGE(loaded.ok(), name << ": " << loaded.error_text());
    options.seed = std::hash<std::string>{}(name) + env_seed();
    const transforms::GuardReport r = transforms::run_semantics_guard(loaded.value(), options);
    REQUIRE_MESSAGE(r.error.empty(), name << ": " << r.error);
    REQUIRE_MESSAGE(!r.failure, transforms::describe(*r.failure, name));
    CHECK(r.trajectories == options.trajectories);
    total_steps += r.steps;
    for (int k = 0; k < transforms::kNumKinds; ++k) kind_counts[k] += r.kind_counts[k];
  }
  MESSAGE("steps taken: " << total_steps);
  CHECK(total_steps > options.trajectories);
  // The guard is only meaningful if the trajectories exercise the loop transformations.
  for (auto k :
       {transforms::Kind::kTileScope, transforms::Kind::kSwapScopes, transforms::Kind::kJoinScopes,
        transforms::Kind::kVectorize, transforms::Kind::kParallelize, transforms::Kind::kUnroll,
        transforms::Kind::kSplitRange, transforms::Kind::kCreateTemporary}) {
    CHECK_MESSAGE(kind_counts[static_cast<int>(k)] > 0, transforms::kind_name(k) << " never ran");
  }
}

TEST_CASE("random legal trajectories never change what a kernel outside the suite computes" *
          doctest::test_suite("slow")) {
  // benchmarks/unseen: kernels written to check the project on what it was never tuned on
  // (stencils, transposed products, odd sizes, f64), at instances small enough to interpret.
  transforms::GuardOptions options;
  options.trajectories = std::max(1, env_int("PERFDOJO_GUARD_TRAJECTORIES", 200) / 4);
  options.max_steps = env_int("PERFDOJO_GUARD_STEPS", 30);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(PERFDOJO_UNSEEN_DIR))
    if (e.path().extension() == ".pdj") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 10);
  int steps = 0;
  for (const auto& f : files) {
    auto loaded = ir::load_file(f.string());
    REQUIRE_MESSAGE(loaded.ok(), loaded.error_text());
    auto small = transforms::guard_instance(loaded.value(), 5e4, options.target);
    REQUIRE_MESSAGE(small, f.filename().string() << " has no instance small enough to interpret");
    CHECK(transforms::interpret_work(*small) <= 5e4);
    options.seed = std::hash<std::string>{}(f.filename().string()) + env_seed();
    const transforms::GuardReport r = transforms::run_semantics_guard(*small, options);
    REQUIRE_MESSAGE(r.error.empty(), f.filename().string() << ": " << r.error);
    REQUIRE_MESSAGE(!r.failure, transforms::describe(*r.failure, f.filename().string()));
    steps += r.steps;
  }
  MESSAGE("steps taken: " << steps);
  CHECK(steps > options.trajectories * static_cast<int>(files.size()));
}

TEST_CASE("the flat mask is exactly the legality checks, on every state of random trajectories") {
  const transforms::Target target;
  const transforms::FlatActionSpace space({}, target);
  // One memo across every trajectory of every kernel: the mask it gives must be the checks'
  // verdicts too.
  transforms::MaskMemo memo;
  int states = 0, legal_seen = 0;
  for (const auto& name : testing::suite_kernels_to_walk()) {
    auto loaded = testing::load_scaled_kernel(name);
    REQUIRE(loaded.ok());
    for (int t = 0; t < 4; ++t) {
      std::mt19937_64 rng(std::hash<std::string>{}(name) + static_cast<uint64_t>(t));
      ir::Program cur = loaded.value();
      for (int s = 0; s < 12; ++s) {
        auto mask = space.mask(cur);
        REQUIRE_MESSAGE(space.mask(cur, &memo) == mask, name << ": the memo's mask differs\n"
                                                             << ir::print_program(cur));
        ++states;
        for (int i = 0; i < space.size(); ++i) {
          auto a = space.decode(cur, i);
          bool legal = a && transforms::check(cur, *a, target).ok();
          legal_seen += legal;
          REQUIRE_MESSAGE(mask[i] == legal, name << ": index " << i << " (" << space.describe(i)
                                                 << ") mask " << int(mask[i]) << " vs check "
                                                 << legal << "\n"
                                                 << ir::print_program(cur));
          if (a) CHECK(space.encode(cur, *a) == i);
        }
        auto next = random_legal_action(cur, target, rng);
        if (!next) break;
        cur = transforms::apply(cur, *next, target).value();
      }
    }
  }
  CHECK(states > 100);
  CHECK(legal_seen > 1000);
  CHECK(memo.hits() > memo.misses());  // the trajectories reuse most nodes
}

TEST_CASE("masks with a memo equal fresh masks along long trajectories that revisit nodes") {
  // Every state of long trajectories whose actions are drawn from the mask itself, so hoisted
  // statements (a remembered node under new enclosing scopes), moved siblings, split and joined
  // scopes and new or removed buffers all meet remembered verdicts.
  const transforms::Target target;
  const transforms::FlatActionSpace space({}, target);
  int states = 0;
  for (const auto& name : testing::suite_kernels_to_walk()) {
    auto loaded = testing::load_scaled_kernel(name);
    REQUIRE(loaded.ok());
    transforms::MaskMemo memo;
    std::mt19937_64 rng(std::hash<std::string>{}(name)*7 + 1);
    for (int t = 0; t < 3; ++t) {
      ir::Program cur = loaded.value();
      for (int s = 0; s < 40; ++s) {
        const auto fresh = space.mask(cur);
        const auto remembered = space.mask(cur, &memo);
        if (s == 0) memo.pin();  // as an Env pins its episodes' start
        ++states;
        REQUIRE_MESSAGE(remembered == fresh, name << ", trajectory " << t << ", step " << s
                                                  << ": the memo's mask differs\n"
                                                  << ir::print_program(cur));
        std::vector<int> legal;
        for (int i = 0; i < space.size(); ++i)
          if (fresh[i]) legal.push_back(i);
        if (legal.empty()) break;
        const int pick = legal[std::uniform_int_distribution<size_t>(0, legal.size() - 1)(rng)];
        cur = transforms::apply(cur, *space.decode(cur, pick), target).value();
      }
    }
    // A kernel with bounded scopes or indirect indices is masked without the memo
    // (docs/actions.md, "Bounded scopes"): the masks above still had to be equal, and nothing
    // was remembered.
    if (ir::any_bounded(loaded.value().body) || ir::any_indirect(loaded.value().body))
      CHECK(memo.hits() == 0);
    else
      CHECK(memo.hits() > 0);
  }
  CHECK(states > 500);
}

TEST_CASE("a pinned program's verdicts outlive the masks of the programs after it") {
  const transforms::Target target;
  const transforms::FlatActionSpace space({}, target);
  for (const std::string name : {"conv2d-3x3", "attention"}) {
    auto loaded = testing::load_scaled_kernel(name);
    REQUIRE(loaded.ok());
    const ir::Program& start = loaded.value();
    const auto expected = space.mask(start);
    // The same walk with a pinned memo and with an unpinned one, then back to the start.
    uint64_t misses_back[2] = {};
    for (const bool pin : {true, false}) {
      transforms::MaskMemo memo;
      std::mt19937_64 rng(5);
      ir::Program cur = start;
      REQUIRE(space.mask(cur, &memo) == expected);
      if (pin) memo.pin();
      for (int s = 0; s < 10; ++s) {
        const auto m = space.mask(cur, &memo);
        std::vector<int> legal;
        for (int i = 0; i < space.size(); ++i)
          if (m[i]) legal.push_back(i);
        const int pick = legal[std::uniform_int_distribution<size_t>(0, legal.size() - 1)(rng)];
        cur = transforms::apply(cur, *space.decode(cur, pick), target).value();
      }
      (void)space.mask(cur, &memo);
      const uint64_t before = memo.misses();
      CHECK(space.mask(start, &memo) == expected);
      misses_back[pin ? 0 : 1] = memo.misses() - before;
    }
    INFO(name);
    CHECK(misses_back[0] < misses_back[1]);  // the start's nodes were still remembered
  }
}

TEST_CASE("a memo given to another action space starts over instead of reusing its verdicts") {
  auto loaded = testing::load_scaled_kernel("softmax");
  REQUIRE(loaded.ok());
  const ir::Program& p = loaded.value();
  const transforms::FlatActionSpace wide({}, *transforms::target_by_name("x86_avx512"));
  const transforms::FlatActionSpace narrow({}, *transforms::target_by_name("x86_avx2"));
  transforms::MaskMemo memo;
  CHECK(wide.mask(p, &memo) == wide.mask(p));
  const uint64_t misses = memo.misses();
  CHECK(narrow.mask(p, &memo) == narrow.mask(p));
  CHECK(memo.misses() > misses);  // nothing of the other space's verdicts was taken
  CHECK(wide.mask(p, &memo) == wide.mask(p));
}

TEST_CASE("checks given a program index give exactly the verdicts of checks without one") {
  const transforms::Target target;
  int compared = 0;
  for (const auto& name : testing::suite_kernels_to_walk()) {
    auto loaded = testing::load_scaled_kernel(name);
    REQUIRE(loaded.ok());
    for (int t = 0; t < 3; ++t) {
      std::mt19937_64 rng(std::hash<std::string>{}(name)*31 + static_cast<uint64_t>(t));
      ir::Program cur = loaded.value();
      for (int s = 0; s < 30; ++s) {
        const transforms::ProgramIndex index(cur);
        for (const auto& a : transforms::candidate_actions(cur, target)) {
          const transforms::Legality plain = transforms::check(cur, a, target);
          const transforms::Legality fast = transforms::check(cur, a, target, index);
          ++compared;
          REQUIRE_MESSAGE((fast.reason == plain.reason && fast.buffer == plain.buffer &&
                           fast.where == plain.where),
                          name << ": " << transforms::print_action(a) << ": with index "
                               << transforms::reason_name(fast.reason) << " " << fast.buffer << " "
                               << transforms::print_path(fast.where) << ", without "
                               << transforms::reason_name(plain.reason) << " " << plain.buffer
                               << " " << transforms::print_path(plain.where) << "\n"
                               << ir::print_program(cur));
        }
        auto next = random_legal_action(cur, target, rng);
        if (!next) break;
        cur = transforms::apply(cur, *next, target).value();
      }
    }
  }
  CHECK(compared > 10000);
}

TEST_CASE("the mask agrees with the checks on buffers no statement uses, with and without :vec") {
  // The prefilter decides swap_buffer_dims itself in a program without vector scopes (the check
  // then asks only that some access names the buffer); the suite never leaves a declared buffer
  // unused, so this program does.
  const transforms::Target target;
  const transforms::FlatActionSpace space({}, target);
  for (const char* inner : {"", ":vec"}) {
    auto p =
        ir::load_program(std::string("input A: f32[8, 16]\ntemp T: f32[8, 16]\ntemp U: f32[4, 4]\n"
                                     "output B: f32[8, 16]\n\n8 16") +
                         inner + " T[{0},{1}] = A[{0},{1}]\n8 16 B[{0},{1}] = T[{0},{1}]\n");
    REQUIRE_MESSAGE(p.ok(), p.error_text());
    transforms::MaskMemo memo;
    const auto mask = space.mask(p.value(), &memo);
    CHECK(mask == space.mask(p.value()));
    int swap_legal = 0;
    for (int i = 0; i < space.size(); ++i) {
      auto a = space.decode(p.value(), i);
      const bool legal = a && transforms::check(p.value(), *a, target).ok();
      REQUIRE_MESSAGE(mask[i] == legal, space.describe(i) << " with inner scope '" << inner << "'");
      if (legal && a->kind == transforms::Kind::kSwapBufferDims) {
        CHECK(a->buffer != "U");  // declared, never used: nothing to swap
        ++swap_legal;
      }
    }
    // Without :vec the used buffers may swap; with it, every access is contiguous in a vector
    // scope that the swap would break.
    CHECK((swap_legal > 0) == (std::string(inner).empty()));
  }
}

TEST_CASE(
    "a sketched GEMM parallelised at any scope computes the same, race-free, and so does what "
    "follows") {
  // The micro-kernel sketch leaves packed blocks and register tiles inside the macro loops;
  // parallelize gives each iteration its own copy of those. Every scope parallelize accepts,
  // alone and followed by random legal trajectories, against the sequential original. Blocks
  // small enough for the interpreter, every level of the sketch present (k blocks, row blocks,
  // column panels, row panels).
  const transforms::Target target;
  const std::string head = "M = 32\nN = 32\nK = 32\ninput A: f32[M, K]\n";
  const std::vector<std::pair<std::string, std::string>> gemms = {
      {"matmul", head + "input B: f32[K, N]\noutput C: f32[M, N] = 0\n\nM N K C[{0},{1}] += "
                        "A[{0},{2}] * B[{2},{1}]\n"},
      {"A A^T", head + "output C: f32[M, M] = 0\n\nM M K C[{0},{1}] += A[{0},{2}] * A[{1},{2}]\n"},
      {"batched",
       "M = 16\nN = 32\nK = 32\ninput A: f32[2, M, K]\ninput B: f32[2, K, N]\n"
       "output C: f32[2, M, N] = 0\n\n2 M N K C[{0},{1},{2}] += A[{0},{1},{3}] * B[{0},{3},{2}]\n"},
  };
  transforms::MicrokernelParams m;
  m.mr = 4;
  m.nr = 16;
  m.kc = 16;
  m.mc = 8;
  int parallelised = 0, with_copies = 0;
  for (const auto& gemm : gemms) {
    const std::string name = gemm.first;  // (a plain variable: the check macros capture it)
    auto loaded = ir::load_program(gemm.second, name + ".pdj");
    REQUIRE_MESSAGE(loaded.ok(), loaded.error_text());
    const ir::Program& p = loaded.value();
    auto sketch = transforms::expand_microkernel(p, {0}, m, target);
    REQUIRE_MESSAGE(sketch.ok(), name << ": " << sketch.error_text());
    const ir::TensorMap in = ir::make_inputs(p, 7);
    auto want = ir::interpret(p, in);
    REQUIRE(want.ok());
    ir::InterpretOptions strict;
    strict.forbid_uninitialised_reads = strict.detect_races = true;
    strict.par_order = ir::InterpretOptions::ParOrder::kShuffle;
    for (const auto& path : transforms::scope_paths(sketch->program)) {
      const Action a{transforms::Kind::kParallelize, path, "", "", 0};
      auto q = transforms::apply(sketch->program, a, target);
      if (!q.ok()) continue;
      ++parallelised;
      for (size_t b = 0; b < q->buffers.size(); ++b)
        if (q->buffers[b].shape != sketch->program.buffers[b].shape) {
          ++with_copies;
          break;
        }
      const std::string where = name + " parallelised at " + transforms::print_path(path);
      auto got = ir::interpret(q.value(), in, strict);
      REQUIRE_MESSAGE(got.ok(), where << ": " << got.error_text());
      for (const auto& b : p.buffers)
        if (b.role == ir::Role::kOutput)
          CHECK_MESSAGE(got->at(b.name).data == want->at(b.name).data,
                        where << ": " << b.name << " differs");
      transforms::GuardOptions options;
      options.trajectories = std::max(1, env_int("PERFDOJO_GUARD_TRAJECTORIES", 200) / 30);
      options.max_steps = 10;
      options.seed = std::hash<std::string>{}(where);
      const transforms::GuardReport r = transforms::run_semantics_guard(q.value(), options);
      REQUIRE_MESSAGE(r.error.empty(), where << ": " << r.error);
      REQUIRE_MESSAGE(!r.failure, transforms::describe(*r.failure, where));
    }
  }
  MESSAGE("parallelised " << parallelised << " scopes of sketched GEMMs, " << with_copies
                          << " with per-iteration copies");
  CHECK(with_copies >= 3);  // each GEMM's row blocks at least
}
