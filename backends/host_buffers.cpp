#include "backends/host_buffers.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "backends/x86_backend.h"

namespace perfdojo::backends {

void write_tensor(uint8_t* dst, ir::DType t, const std::vector<double>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t) {
      case ir::DType::kF32:
        reinterpret_cast<float*>(dst)[i] = static_cast<float>(v[i]);
        break;
      case ir::DType::kF64:
        reinterpret_cast<double*>(dst)[i] = v[i];
        break;
      case ir::DType::kI32:
        reinterpret_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v[i]);
        break;
    }
  }
}

ir::Tensor read_tensor(const uint8_t* src, const ir::BufferDecl& b) {
  ir::Tensor t{b.dtype, b.shape, std::vector<double>(b.elements())};
  for (size_t i = 0; i < t.data.size(); ++i) {
    switch (b.dtype) {
      case ir::DType::kF32:
        t.data[i] = reinterpret_cast<const float*>(src)[i];
        break;
      case ir::DType::kF64:
        t.data[i] = reinterpret_cast<const double*>(src)[i];
        break;
      case ir::DType::kI32:
        t.data[i] = reinterpret_cast<const int32_t*>(src)[i];
        break;
    }
  }
  return t;
}

void prefill_outputs(uint8_t* base, const std::vector<const ir::BufferDecl*>& params,
                     const std::vector<size_t>& offs) {
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& b = *params[i];
    if (b.role != ir::Role::kOutput) continue;
    double v = b.dtype == ir::DType::kI32 ? 0 : std::numeric_limits<double>::quiet_NaN();
    write_tensor(base + offs[i], b.dtype, std::vector<double>(b.elements(), v));
  }
}

std::string codegen_test_hook(const BackendConfig& c, const ir::Program& p) {
  auto it = c.extra.find("inject");
  if (it == c.extra.end()) return "";
  const std::string& v = it->second;
  auto colon = v.find(':');
  if (colon == std::string::npos) return v;
  return p.find_buffer(v.substr(colon + 1)) ? v.substr(0, colon) : "";
}

double config_number(const BackendConfig& c, const std::string& key, double fallback) {
  auto it = c.extra.find(key);
  if (it == c.extra.end()) return fallback;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  return end && *end == '\0' && end != it->second.c_str() ? v : fallback;
}

bool compare_outputs(const ir::Program& p, const std::map<std::string, ir::Tensor>& got,
                     const std::map<std::string, ir::Tensor>& want, Measurement& m) {
  double worst = 0;
  std::string bad;  // the first output over its tolerance
  for (const auto& [n, t] : got) {
    double e = ir::max_relative_error(t, want.at(n));
    worst = std::max(worst, e);
    if (bad.empty() && !(e <= x86_verification_tolerance(t.dtype, p))) bad = n;
  }
  m.max_rel_error = worst;
  if (bad.empty()) return true;
  char buf[200];
  std::snprintf(buf, sizeof buf, "wrong result: max relative error %.3g in output '%s' (tolerance %g)",
                ir::max_relative_error(got.at(bad), want.at(bad)), bad.c_str(),
                x86_verification_tolerance(got.at(bad).dtype, p));
  m.error = buf;
  return false;
}

}  // namespace perfdojo::backends
