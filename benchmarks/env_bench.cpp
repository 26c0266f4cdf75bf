// perfdojo-env speed (issue: env): single-env steps/s with the cost model, the flat action space,
// the mask and the feature observation; resets/s; vector env scaling; resident memory.
// Target: >= 20,000 steps/s per core on each kernel.
#include <benchmark/benchmark.h>

#include <fstream>
#include <random>
#include <string>

#include "gym/env.h"
#include "gym/vector_env.h"

namespace {

using namespace perfdojo;

env::EnvConfig config(const std::string& kernel) {
  env::EnvConfig c;
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

void BM_Step(benchmark::State& state, const std::string& kernel) {
  auto e = std::move(env::Env::make(config(kernel))).value();
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

void BM_Reset(benchmark::State& state, const std::string& kernel) {
  auto e = std::move(env::Env::make(config(kernel))).value();
  for (auto _ : state) {
    auto r = e->reset(0);
    benchmark::DoNotOptimize(r.first.features.data());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_VectorStep(benchmark::State& state) {
  auto v = std::move(env::VectorEnv::make(config("softmax"), static_cast<int>(state.range(0)))).value();
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

}  // namespace

#define PERFDOJO_ENV_KERNELS(X) X(softmax) X(matmul-1024) X(conv2d-3x3) X(attention)
#define PERFDOJO_ENV_REG(k)                          \
  BENCHMARK_CAPTURE(BM_Step, k, std::string(#k));    \
  BENCHMARK_CAPTURE(BM_Reset, k, std::string(#k));
PERFDOJO_ENV_KERNELS(PERFDOJO_ENV_REG)
BENCHMARK(BM_VectorStep)->Arg(1)->Arg(2)->Arg(8)->UseRealTime();
BENCHMARK(BM_Memory)->Iterations(1);

BENCHMARK_MAIN();
