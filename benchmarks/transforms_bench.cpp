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

// One set per kernel, registered by name at start-up. (Names as strings, not stringified macro
// arguments: a formatter spacing `matmul-1024` into `matmul - 1024` cannot break them.)
namespace {
[[maybe_unused]] const bool kRegistered = [] {
  for (const std::string k : {"matmul-1024", "softmax", "conv2d-3x3", "attention", "layernorm"}) {
    benchmark::RegisterBenchmark(("BM_FlatMask/" + k).c_str(), BM_FlatMask, k);
    benchmark::RegisterBenchmark(("BM_Enumerate/" + k).c_str(), BM_Enumerate, k);
    benchmark::RegisterBenchmark(("BM_ApplyTile/" + k).c_str(), BM_ApplyTile, k);
  }
  return true;
}();
}  // namespace

BENCHMARK_MAIN();
