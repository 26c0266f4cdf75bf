// perfdojo-env speed (issue: env): single-env steps/s with the cost model, the flat action space,
// the mask and the feature observation; resets/s; vector env scaling; resident memory.
// Target: >= 20,000 steps/s per core on each kernel.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "backends/cost_model.h"
#include "gym/env.h"
#include "gym/observation.h"
#include "gym/vector_env.h"
#include "transforms/registry.h"

namespace {

using namespace perfdojo;

env::EnvConfig config(const std::string& kernel, int kinds = transforms::kNumKinds) {
  env::EnvConfig c;
  c.flat.kinds = kinds;
  c.benchmark = "perfdojo://suite/" + kernel;
  c.observation_spaces = {"features"};
  c.max_episode_steps = 30;
  return c;
}

// Picks uniformly among the legal actions (the mask is part of every step's cost).
int pick(const std::vector<uint8_t>& mask, std::mt19937& rng) {
  int n = 0;
  for (auto m : mask) n += m;
  int k = static_cast<int>(rng() % n);
  for (int i = 0; i < static_cast<int>(mask.size()); ++i)
    if (mask[i] && k-- == 0) return i;
  return static_cast<int>(mask.size()) - 1;
}

void BM_Step(benchmark::State& state, const std::string& kernel, int kinds) {
  auto e = std::move(env::Env::make(config(kernel, kinds))).value();
  std::mt19937 rng(1);
  auto [obs, info] = e->reset(0);
  std::vector<uint8_t> mask = info.action_mask;
  mask.back() = 0;  // keep episodes going: no stop
  for (auto _ : state) {
    auto r = e->step(pick(mask, rng));
    benchmark::DoNotOptimize(r.observation.features.data());
    if (r.terminated || r.truncated) {
      auto [o, i] = e->reset();
      mask = i.action_mask;
    } else {
      mask = r.info.action_mask;
    }
    mask.back() = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

// The programs BM_Step visits (its random policy, seed and episode length), recorded once per
// kernel so the parts of a step can be timed on exactly those programs.
struct Trajectory {
  std::vector<ir::Program> programs;        ///< each step's program before its action
  std::vector<transforms::Action> actions;  ///< the legal action taken on it
  transforms::FlatActionSpace space{{}, transforms::Target{}};
};

const Trajectory& trajectory(const std::string& kernel) {
  static std::map<std::string, Trajectory> cache;
  if (auto it = cache.find(kernel); it != cache.end()) return it->second;
  Trajectory& t = cache[kernel];
  auto e = std::move(env::Env::make(config(kernel))).value();
  std::mt19937 rng(1);
  auto [obs, info] = e->reset(0);
  std::vector<uint8_t> mask = info.action_mask;
  for (int i = 0; i < 300; ++i) {
    mask.back() = 0;
    const int a = pick(mask, rng);
    t.programs.push_back(e->program());
    t.actions.push_back(*e->decode(a));
    auto r = e->step(a);
    if (r.terminated || r.truncated) {
      auto [o, inf] = e->reset();
      mask = inf.action_mask;
    } else {
      mask = r.info.action_mask;
    }
  }
  return t;
}

// The share of a memo's lookups (MaskMemo, CostMemo, FeatureMemo) it answered.
template <class Memo>
void report_hit_rate(benchmark::State& state, const Memo& m) {
  state.counters["memo_hit_rate"] =
      static_cast<double>(m.hits()) /
      static_cast<double>(std::max<uint64_t>(m.hits() + m.misses(), 1));
}

// The parts of one step on the recorded programs: the flat mask, the cost model's estimate,
// the feature observation and applying the action. Their sum against BM_Step says what the
// env's own bookkeeping costs. The mask visits the programs in order with a MaskMemo, as an Env
// does (BM_StepMaskFresh: without one, every node checked).
void step_mask(benchmark::State& state, const std::string& kernel, bool memo) {
  const Trajectory& t = trajectory(kernel);
  transforms::MaskMemo m;
  size_t i = 0, legal = 0, n = 0;
  for (auto _ : state) {
    auto mask = t.space.mask(t.programs[i], memo ? &m : nullptr);
    for (auto b : mask) legal += b;
    ++n;
    benchmark::DoNotOptimize(mask.data());
    i = (i + 1) % t.programs.size();
  }
  state.counters["legal_per_mask"] = static_cast<double>(legal) / static_cast<double>(n);
  if (memo) report_hit_rate(state, m);
  state.SetItemsProcessed(state.iterations());
}

void BM_StepMask(benchmark::State& state, const std::string& kernel) {
  step_mask(state, kernel, true);
}
void BM_StepMaskFresh(benchmark::State& state, const std::string& kernel) {
  step_mask(state, kernel, false);
}

// The estimate and the features visit the programs in order with their memos, as an Env's
// backend and observation do; their hit rates say how many nests each step reused.
void BM_StepEstimate(benchmark::State& state, const std::string& kernel) {
  const Trajectory& t = trajectory(kernel);
  const backends::MachineProfile m = backends::default_profile();
  backends::CostMemo memo;
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(backends::estimate_cost(t.programs[i], m, &memo).time_s);
    i = (i + 1) % t.programs.size();
  }
  report_hit_rate(state, memo);
  state.SetItemsProcessed(state.iterations());
}

void BM_StepFeatures(benchmark::State& state, const std::string& kernel) {
  const Trajectory& t = trajectory(kernel);
  env::FeatureMemo memo;
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(env::features(t.programs[i], -1, &memo).data());
    i = (i + 1) % t.programs.size();
  }
  report_hit_rate(state, memo);
  state.SetItemsProcessed(state.iterations());
}

void BM_StepApply(benchmark::State& state, const std::string& kernel) {
  const Trajectory& t = trajectory(kernel);
  const transforms::Target target;
  size_t i = 0;
  for (auto _ : state) {
    const transforms::Action& a = t.actions[i];
    ir::Program q =
        transforms::registry()[static_cast<int>(a.kind)].apply(t.programs[i], a, target);
    benchmark::DoNotOptimize(q.body.data());
    i = (i + 1) % t.programs.size();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Reset(benchmark::State& state, const std::string& kernel) {
  auto e = std::move(env::Env::make(config(kernel))).value();
  for (auto _ : state) {
    auto r = e->reset(0);
    benchmark::DoNotOptimize(r.first.features.data());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_VectorStep(benchmark::State& state) {
  auto v =
      std::move(env::VectorEnv::make(config("softmax"), static_cast<int>(state.range(0)))).value();
  auto resets = v->reset(0);
  std::vector<std::vector<uint8_t>> masks;
  for (auto& r : resets) masks.push_back(r.second.action_mask);
  std::mt19937 rng(2);
  for (auto _ : state) {
    std::vector<int> actions;
    for (auto& m : masks) {
      m.back() = 0;
      actions.push_back(pick(m, rng));
    }
    auto out = v->step(actions);
    for (size_t i = 0; i < out.size(); ++i) masks[i] = out[i].result.info.action_mask;
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string k;
  long v = 0;
  while (in >> k) {
    if (k == "VmRSS:") {
      in >> v;
      return v;
    }
  }
  return 0;
}

// Resident memory: one env on the largest kernel, a 64-env vector env, and growth over a long
// episode (bounded history means no growth).
void BM_Memory(benchmark::State& state) {
  long before = rss_kib();
  auto one = std::move(env::Env::make(config("attention"))).value();
  one->reset(0);
  long after_one = rss_kib();
  auto v = std::move(env::VectorEnv::make(config("attention"), 64)).value();
  v->reset(0);
  long after_vec = rss_kib();
  // A long episode of uniformly random indices (mostly refused, so the program stays small):
  // what grows is the env's own bookkeeping, which must be bounded.
  env::EnvConfig long_cfg = config("softmax");
  long_cfg.max_episode_steps = 1 << 30;
  auto e = std::move(env::Env::make(long_cfg)).value();
  e->reset(0);
  std::mt19937 rng(3);
  const int n = e->action_spec().n - 1;
  long start_long = 0;
  for (int i = 0; i < 20000; ++i) {
    if (i == 2000) start_long = rss_kib();
    e->step(static_cast<int>(rng() % n));
  }
  long end_long = rss_kib();
  for (auto _ : state) benchmark::DoNotOptimize(before);
  state.counters["env_KiB"] = static_cast<double>(after_one - before);
  state.counters["vec64_KiB"] = static_cast<double>(after_vec - after_one);
  state.counters["growth_18k_random_steps_KiB"] = static_cast<double>(end_long - start_long);
}

// Which malloc serves the process (CMake links tcmalloc when installed): the figures depend on
// it by ~15%, so the report says.
const bool kMallocNamed = [] {
  const bool tcmalloc = dlsym(RTLD_DEFAULT, "tc_version") != nullptr;
  benchmark::AddCustomContext("malloc", tcmalloc ? "tcmalloc" : "libc");
  return true;
}();

}  // namespace

// BM_Step300/KERNEL: BM_Step's first 300 steps exactly, for instruction counts that repeat
// (valgrind --tool=callgrind --toggle-collect='perfdojo::env::Env::step(int)' env_bench
// --benchmark_filter=BM_Step300/softmax/). BM_Step300Kinds18/KERNEL: the same steps in the
// flat space's older layout of 18 kinds (what the kinds added since cost a step: on these f32
// kernels none of them is ever legal, so the trajectory is the same).
// One set per kernel, registered by name at start-up. (Names as strings, not stringified macro
// arguments: a formatter spacing `matmul-1024` into `matmul - 1024` cannot break them.)
namespace {
[[maybe_unused]] const bool kRegistered = [] {
  for (const std::string k : {"softmax", "matmul-1024", "conv2d-3x3", "attention"}) {
    const int all = transforms::kNumKinds;
    benchmark::RegisterBenchmark(("BM_Step/" + k).c_str(), BM_Step, k, all);
    benchmark::RegisterBenchmark(("BM_StepMask/" + k).c_str(), BM_StepMask, k);
    benchmark::RegisterBenchmark(("BM_StepMaskFresh/" + k).c_str(), BM_StepMaskFresh, k);
    benchmark::RegisterBenchmark(("BM_StepEstimate/" + k).c_str(), BM_StepEstimate, k);
    benchmark::RegisterBenchmark(("BM_StepFeatures/" + k).c_str(), BM_StepFeatures, k);
    benchmark::RegisterBenchmark(("BM_StepApply/" + k).c_str(), BM_StepApply, k);
    benchmark::RegisterBenchmark(("BM_Reset/" + k).c_str(), BM_Reset, k);
    benchmark::RegisterBenchmark(("BM_Step300/" + k).c_str(), BM_Step, k, all)->Iterations(300);
    benchmark::RegisterBenchmark(("BM_Step300Kinds18/" + k).c_str(), BM_Step, k, 18)
        ->Iterations(300);
  }
  return true;
}();
}  // namespace
BENCHMARK(BM_VectorStep)->Arg(1)->Arg(2)->Arg(8)->UseRealTime();
BENCHMARK(BM_Memory)->Iterations(1);

BENCHMARK_MAIN();
