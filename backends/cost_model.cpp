// The cost model's entry points: estimate_cost (flatten, plan, compute, memory, roofline) and the
// cost-model backend. The parts live beside it: cost_model_params.h (fixed parameters),
// cost_model_flat.* (the flattened program, per-nest analysis), cost_model_memo.* (CostMemo),
// cost_model_core.* (vectorisation and register plan, compute, overheads, traffic).
#include "backends/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "backends/cost_model_core.h"
#include "backends/cost_model_flat.h"
#include "backends/cost_model_memo.h"

namespace perfdojo::backends {
namespace {

using namespace cost_detail;

// Roofline per nest: the slowest of core time and each level's traffic time, plus overheads;
// `out.overhead_s` holds the initial values' fill on entry.
void roofline(const Model& md, const MachineProfile& m, CostEstimate& out) {
  double comp_total = 0, l1_total = 0, lvl_total[4] = {};
  for (const auto& nc : md.nests) {
    double core = nc.core_cycles / md.freq_hz;
    double t = std::max({core, nc.level_s[1], nc.level_s[2], nc.level_s[3]});
    double rest = core + nc.level_s[1] + nc.level_s[2] + nc.level_s[3] - t;
    out.time_s += t + kRestShare * rest + nc.overhead_cycles / md.freq_hz;
    out.overhead_s += nc.overhead_cycles / md.freq_hz;
    comp_total += (nc.core_cycles - nc.l1_cycles) / md.freq_hz;
    l1_total += nc.l1_cycles / md.freq_hz;
    for (int k = 0; k < 4; ++k) {
      out.bytes[k] += nc.bytes[k];
      lvl_total[k] += nc.level_s[k];
    }
  }
  out.overhead_s += m.call_overhead_us * 1e-6;
  out.time_s += out.overhead_s - [&] {
    double o = 0;
    for (const auto& nc : md.nests) o += nc.overhead_cycles / md.freq_hz;
    return o;
  }();
  out.compute_s = comp_total;
  out.level_s[0] = l1_total;
  for (int k = 1; k < 4; ++k) out.level_s[k] = lvl_total[k];
  double best = comp_total;
  out.bound = Bound::kCompute;
  const Bound lb[4] = {Bound::kL1, Bound::kL2, Bound::kL3, Bound::kDram};
  for (int k = 0; k < 4; ++k)
    if (out.level_s[k] > best) {
      best = out.level_s[k];
      out.bound = lb[k];
    }
  if (out.overhead_s > best) out.bound = Bound::kOverhead;
  if (!std::isfinite(out.time_s) || out.time_s < 0) out.time_s = 0;
}

}  // namespace

const char* bound_name(Bound b) {
  switch (b) {
    case Bound::kCompute:
      return "compute";
    case Bound::kL1:
      return "L1";
    case Bound::kL2:
      return "L2";
    case Bound::kL3:
      return "L3";
    case Bound::kDram:
      return "DRAM";
    case Bound::kOverhead:
      return "overhead";
  }
  return "?";
}

CostEstimate estimate_cost(const ir::Program& p, const MachineProfile& m) {
  return estimate_cost(p, m, nullptr);
}

CostEstimate estimate_cost(const ir::Program& p, const MachineProfile& m, CostMemo* memo) {
  CostEstimate out;
  out.flops = flop_count(p);
  // One Flat per thread, reused: its pools keep their storage across estimates.
  thread_local Flat f;
  flatten(p, m, f, memo ? memo->impl_.get() : nullptr);
  thread_local ModelStorage storage;
  storage.nests.assign(f.top.size(), NestCost{});
  storage.group_cycles.clear();
  Model md{m, f, storage};
  md.plan_vectors();
  // Compute: group statements by their nearest non-vector enclosing scope.
  md.compute_groups();
  md.loop_overheads();
  // Memory: bytes each level serves; the initial values' fill counts as overhead.
  md.memory_traffic(out.overhead_s);
  roofline(md, m, out);
  return out;
}

namespace {

class CostModelBackend final : public Backend {
 public:
  explicit CostModelBackend(BackendConfig c) : config_(std::move(c)) {
    if (!config_.machine_profile.empty()) {
      std::string err;
      auto p = load_profile(config_.machine_profile, &err);
      if (p) {
        profile_ = *p;
      } else {
        error_ = err;
      }
    }
    // config.threads: the cores a parallel scope may use (1: a single-core target).
    if (config_.threads >= 1) profile_.cores = std::min(profile_.cores, config_.threads);
  }
  std::string name() const override { return "cost_model"; }
  Availability available() const override {
    if (error_) return {false, *error_};
    return {};
  }
  Capabilities capabilities() const override {
    if (profile_.vector_lanes >
        0) {  // a cross target's core: its one width, one core (cross_backend.h)
      Capabilities c;
      if (profile_.vector_lanes > 1) c.vector_widths = {profile_.native_lanes()};
      if (profile_.isa == "cuda") {  // a GPU: parallel scopes become threads
        c.parallel = true;
        c.threads = std::max(1, profile_.cores);
      }
      c.vector_registers = static_cast<int>(profile_.registers());
      return c;
    }
    // An x86 core: the widths of its ISA (a calibrated AVX2 core has no 16-lane vectors).
    std::vector<int> widths = {16, 8};
    if (profile_.isa == "x86_avx2") widths = {8};
    if (profile_.isa == "x86_64") widths = {};
    Capabilities c{widths, true, std::max(1, profile_.cores)};
    c.stream_stores = !widths.empty();
    return c;
  }
  bool deterministic() const override { return true; }
  Measurement measure(const ir::Program& p, const MeasureOptions&) override {
    Measurement m;
    if (error_) {
      m.error = *error_;
      return m;
    }
    CostEstimate e = estimate_cost(p, profile_, &memo_);
    m.median_s = m.min_s = e.time_s;
    m.reps = 0;
    m.verified = false;
    m.flags = "cost_model " + profile_.name;
    return m;
  }
  std::unique_ptr<Backend> clone() const override {
    return std::make_unique<CostModelBackend>(*this);
  }

 private:
  BackendConfig config_;
  MachineProfile profile_ = default_profile();
  std::optional<std::string> error_;
  CostMemo memo_;  // the nests of the last program measured (a clone starts with none)
};

}  // namespace

std::unique_ptr<Backend> make_cost_model_backend(const BackendConfig& config) {
  return std::make_unique<CostModelBackend>(config);
}

namespace {

// The cost model on a built-in profile.
template <const char* kProfile>
std::unique_ptr<Backend> model_on(const BackendConfig& config) {
  BackendConfig c = config;
  c.machine_profile = std::string("builtin:") + kProfile;
  return make_cost_model_backend(c);
}
constexpr char kN1[] = "neoverse-n1", kV1[] = "neoverse-v1", kSnitch[] = "snitch", kA100[] = "a100",
               kZen3[] = "zen3";

// The cost model on a cross target's built-in profile: the instant, deterministic env and agent
// for a core this machine is not (the cross backends compile and verify too).
[[maybe_unused]] const bool kCostModelRegistered =
    register_backend("cost_model", 30,
                     [](const BackendConfig& c) { return make_cost_model_backend(c); }) &&
    register_backend("cost_model:neoverse-n1", 40, model_on<kN1>) &&
    register_backend("cost_model:neoverse-v1", 41, model_on<kV1>) &&
    register_backend("cost_model:snitch", 42, model_on<kSnitch>) &&
    register_backend("cost_model:a100", 43, model_on<kA100>) &&
    register_backend("cost_model:zen3", 44, model_on<kZen3>);

}  // namespace

}  // namespace perfdojo::backends
