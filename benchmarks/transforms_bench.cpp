// Time to enumerate every candidate action with legality (the mask) and to apply one action,
// on the shipped kernels. Target (issue: transformations): full mask of the suite's largest
// kernel under 50 us, single-threaded.
#include <benchmark/benchmark.h>

#include <string>

#include "ir/load.h"
#include "ir/parse.h"
#include "transforms/action_space.h"
#include "transforms/registry.h"

namespace {

using namespace perfdojo;

ir::Program load(const std::string& name) {
  auto r = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/" + name + ".pdj");
  if (!r.ok()) throw std::runtime_error(r.error_text());
  return r.value();
}

void BM_FlatMask(benchmark::State& state, const std::string& name) {
  auto p = load(name);
  transforms::FlatActionSpace space({}, transforms::Target{});
  int legal = 0;
  for (auto _ : state) {
    auto m = space.mask(p);
    benchmark::DoNotOptimize(m.data());
    legal = 0;
    for (auto v : m) legal += v;
  }
  state.counters["legal"] = legal;
  state.counters["actions"] = space.size();
}

void BM_Enumerate(benchmark::State& state, const std::string& name) {
  auto p = load(name);
  transforms::Target t;
  size_t n = 0;
  for (auto _ : state) {
    auto c = transforms::enumerate(p, t);
    n = c.size();
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["candidates"] = static_cast<double>(n);
}

void BM_ApplyTile(benchmark::State& state, const std::string& name) {
  auto p = load(name);
  transforms::Target t;
  auto legal = transforms::legal_actions(p, t);
  transforms::Action a = legal.front();
  for (auto _ : state) {
    auto r = transforms::apply(p, a, t);
    benchmark::DoNotOptimize(r.ok());
  }
  state.SetLabel(transforms::print_action(a));
}

}  // namespace

#define PERFDOJO_KERNELS(X) X(matmul - 1024) X(softmax) X(conv2d - 3x3) X(attention) X(layernorm)
#define PERFDOJO_REG(k)                                \
  BENCHMARK_CAPTURE(BM_FlatMask, k, std::string(#k));  \
  BENCHMARK_CAPTURE(BM_Enumerate, k, std::string(#k)); \
  BENCHMARK_CAPTURE(BM_ApplyTile, k, std::string(#k));
PERFDOJO_KERNELS(PERFDOJO_REG)

BENCHMARK_MAIN();
