#include "backends/backend.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string_view>
#include <thread>

#include "backends/cost_model.h"
#include "backends/cross_backend.h"
#include "backends/cuda_backend.h"
#include "backends/interpreter_backend.h"
#include "backends/x86_backend.h"

namespace perfdojo::backends {
namespace {

using Factory = std::function<std::unique_ptr<Backend>(const BackendConfig&)>;

std::unique_ptr<Backend> model_of(const std::string& profile, BackendConfig c) {
  c.machine_profile = "builtin:" + profile;
  return make_cost_model_backend(c);
}

// The registry: one row per backend name, in the order `backend_names` lists them.
const std::vector<std::pair<std::string, Factory>>& registry() {
  static const std::vector<std::pair<std::string, Factory>> kTable = {
      {"x86_avx512", [](const BackendConfig& c) { return make_x86_backend(X86Isa::kAvx512, c); }},
      {"x86_avx2", [](const BackendConfig& c) { return make_x86_backend(X86Isa::kAvx2, c); }},
      {"x86_64", [](const BackendConfig& c) { return make_x86_backend(X86Isa::kPortable, c); }},
      {"aarch64_neon",
       [](const BackendConfig& c) { return make_cross_backend(*cross_target("aarch64_neon"), c); }},
      {"aarch64_sve",
       [](const BackendConfig& c) { return make_cross_backend(*cross_target("aarch64_sve"), c); }},
      {"riscv64_rvv",
       [](const BackendConfig& c) { return make_cross_backend(*cross_target("riscv64_rvv"), c); }},
      {"x86_memcheck",
       [](const BackendConfig& c) { return make_cross_backend(memcheck_target(), c); }},
      {"cuda", [](const BackendConfig& c) { return make_cuda_backend(c); }},
      {"cost_model", [](const BackendConfig& c) { return make_cost_model_backend(c); }},
      {"interpreter", [](const BackendConfig& c) { return make_interpreter_backend(c); }},
      // The cost model on a cross target's built-in profile: the instant, deterministic env
      // and agent for a core this machine is not (the cross backends compile and verify too).
      {"cost_model:neoverse-n1", [](const BackendConfig& c) { return model_of("neoverse-n1", c); }},
      {"cost_model:neoverse-v1", [](const BackendConfig& c) { return model_of("neoverse-v1", c); }},
      {"cost_model:snitch", [](const BackendConfig& c) { return model_of("snitch", c); }},
      {"cost_model:a100", [](const BackendConfig& c) { return model_of("a100", c); }},
  };
  return kTable;
}

double expr_flops(const ir::Expr& e) {
  double n = 0;
  switch (e.kind) {
    case ir::ExprKind::kConst:
    case ir::ExprKind::kLoad:
    case ir::ExprKind::kIndex:
      break;  // a conversion, not a flop
    case ir::ExprKind::kUnary:
      n = (e.un == ir::UnOp::kCastF32 || e.un == ir::UnOp::kCastF64 || e.un == ir::UnOp::kCastI32)
              ? 0
              : 1;
      break;
    case ir::ExprKind::kBinary:
    case ir::ExprKind::kSelect:
      n = 1;
      break;
    case ir::ExprKind::kFma:
      n = 2;
      break;  // a multiply and an add, as a fused update counts
  }
  for (const auto& a : e.args) n += expr_flops(*a);
  return n;
}

double body_flops(const std::vector<ir::NodePtr>& body) {
  double n = 0;
  for (const auto& c : body) {
    if (c->is_scope) {
      n += static_cast<double>(c->extent) * body_flops(c->body);
    } else {
      n += expr_flops(*c->stmt.rhs) + (c->stmt.op == ir::Reduce::kNone ? 0 : 1);
    }
  }
  return n;
}

}  // namespace

std::vector<Measurement> Backend::compare(const std::vector<const ir::Program*>& programs,
                                          const MeasureOptions& options) {
  std::vector<Measurement> out;
  for (const ir::Program* p : programs) out.push_back(measure(*p, options));
  return out;
}

std::vector<Measurement> Backend::measure_each(const std::vector<const ir::Program*>& programs,
                                               const MeasureOptions& options) {
  return Backend::compare(programs, options);  // the same loop: one after another
}

std::vector<std::string> backend_names() {
  std::vector<std::string> out;
  for (const auto& [n, f] : registry()) out.push_back(n);
  return out;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendConfig& config) {
  for (const auto& [n, f] : registry())
    if (n == name) return f(config);
  return nullptr;
}

double flop_count(const ir::Program& p) { return body_flops(p.body); }

double compulsory_bytes(const ir::Program& p) {
  double b = 0;
  for (const auto& d : p.buffers)
    if (d.role != ir::Role::kTemp)
      b += static_cast<double>(d.elements()) * ir::dtype_bytes(d.dtype);
  return b;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

bool cpu_has(const char* feature) {
  if (const char* hidden = std::getenv("PERFDOJO_HIDE_CPU_FEATURES"); hidden && *hidden) {
    std::string_view list(hidden);
    while (!list.empty()) {
      const size_t comma = list.find(',');
      if (list.substr(0, comma) == feature) return false;
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }
  __builtin_cpu_init();
  // __builtin_cpu_supports needs a literal: name the features the project asks about.
  const std::string_view f(feature);
  if (f == "avx512f") return __builtin_cpu_supports("avx512f");
  if (f == "avx2") return __builtin_cpu_supports("avx2");
  if (f == "fma") return __builtin_cpu_supports("fma");
  return false;
}

}  // namespace perfdojo::backends
