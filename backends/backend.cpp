#include "backends/backend.h"

#include <cpuid.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string_view>
#include <thread>

namespace perfdojo::backends {
namespace {

struct Registered {
  std::string name;
  int order = 0;
  BackendFactory make = nullptr;
};

// The registry. A function-local static: backends register during static initialisation, in
// whatever order the linker put their files.
std::vector<Registered>& registry() {
  static std::vector<Registered> table;
  return table;
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

// The flops of `body` where the enclosing iterators hold `iters`. A subtree without bounded
// scopes is counted in closed form (extent x body); a scope above a bounded one runs its actual
// range value by value while `budget` (scope iterations) lasts, so a triangle counts the flops
// it does (trmm: half a GEMM's), and past the budget at the range's midpoint value.
double body_flops(const std::vector<ir::NodePtr>& body, std::vector<int64_t>& iters,
                  std::vector<int64_t>& extents, double& budget) {
  double n = 0;
  for (const auto& c : body) {
    if (!c->is_scope) {
      n += expr_flops(*c->stmt.rhs) + (c->stmt.op == ir::Reduce::kNone ? 0 : 1);
      continue;
    }
    if (!ir::any_bounded(*c)) {
      n += static_cast<double>(c->extent) * body_flops(c->body, iters, extents, budget);
      continue;
    }
    if (c->bounds.indirect()) {  // the data decides; the model's even split (a CSR's rows)
      const double trips = ir::indirect_mean_trips(c->extent, c->bounds, extents);
      iters.push_back(c->extent / 2);
      extents.push_back(c->extent);
      n += trips * body_flops(c->body, iters, extents, budget);
      extents.pop_back();
      iters.pop_back();
      continue;
    }
    const auto [first, end] = ir::scope_range(c->extent, c->bounds, iters.data());
    if (end <= first) continue;
    const auto trips = static_cast<double>(end - first);
    if (!ir::any_bounded(c->body) || budget < trips) {
      iters.push_back(first + (end - first - 1) / 2);
      extents.push_back(c->extent);
      n += trips * body_flops(c->body, iters, extents, budget);
      extents.pop_back();
      iters.pop_back();
      continue;
    }
    budget -= trips;
    extents.push_back(c->extent);
    for (int64_t i = first; i < end; ++i) {
      iters.push_back(i);
      n += body_flops(c->body, iters, extents, budget);
      iters.pop_back();
    }
    extents.pop_back();
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

bool register_backend(const std::string& name, int order, BackendFactory make) {
  auto& table = registry();
  for (const auto& r : table)
    if (r.name == name) return false;
  // Kept sorted by order (then name), so backend_names() needs no sort.
  Registered entry{name, order, make};
  auto at = std::upper_bound(table.begin(), table.end(), entry, [](const auto& x, const auto& y) {
    return x.order != y.order ? x.order < y.order : x.name < y.name;
  });
  table.insert(at, std::move(entry));
  return true;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> out;
  for (const auto& r : registry()) out.push_back(r.name);
  return out;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendConfig& config) {
  for (const auto& r : registry())
    if (r.name == name) return r.make(config);
  // "cost_model:FILE": the cost model on a machine profile file (perfdojo calibrate writes one).
  constexpr std::string_view kModelOn = "cost_model:";
  if (name.size() > kModelOn.size() && name.compare(0, kModelOn.size(), kModelOn) == 0) {
    BackendConfig c = config;
    c.machine_profile = name.substr(kModelOn.size());
    return make_backend("cost_model", c);
  }
  return nullptr;
}

std::optional<CacheFlush> parse_cache_flush(const std::string& text) {
  if (text == "auto") return CacheFlush::kAuto;
  if (text == "on") return CacheFlush::kOn;
  if (text == "off") return CacheFlush::kOff;
  return std::nullopt;
}

const char* cache_flush_name(CacheFlush how) {
  switch (how) {
    case CacheFlush::kOn:
      return "on";
    case CacheFlush::kOff:
      return "off";
    case CacheFlush::kAuto:
      break;
  }
  return "auto";
}

double flop_count(const ir::Program& p) {
  std::vector<int64_t> iters;
  double budget = 1e6;
  std::vector<int64_t> extents;
  return body_flops(p.body, iters, extents, budget);
}

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
  if (f == "avx512vnni") return __builtin_cpu_supports("avx512vnni");
  if (f == "avx512bf16") return __builtin_cpu_supports("avx512bf16");
  if (f == "avxvnni") {
    // Not every compiler's __builtin_cpu_supports knows it (clang 14 does not): CPUID leaf 7,
    // sub-leaf 1, EAX bit 4, with the AVX state the OS saves (which avx2 implies).
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
           (a >> 4 & 1u);
  }
  return false;
}

}  // namespace perfdojo::backends
