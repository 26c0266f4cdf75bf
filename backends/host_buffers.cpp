#include "backends/host_buffers.h"

#include <algorithm>
#include <cmath>
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
      case ir::DType::kBF16:
      case ir::DType::kF16:
        reinterpret_cast<uint16_t*>(dst)[i] = static_cast<uint16_t>(ir::narrow_bits(t, v[i]));
        break;
      case ir::DType::kI8:
      case ir::DType::kU8:
        dst[i] = static_cast<uint8_t>(ir::narrow_bits(t, v[i]));
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
      case ir::DType::kBF16:
      case ir::DType::kF16:
        t.data[i] = ir::from_narrow_bits(b.dtype, reinterpret_cast<const uint16_t*>(src)[i]);
        break;
      case ir::DType::kI8:
      case ir::DType::kU8:
        t.data[i] = ir::from_narrow_bits(b.dtype, src[i]);
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
    const ir::DType ct = ir::compute_type(b.dtype);  // i8 and u8 have no NaN: 0, as i32
    double v = ct == ir::DType::kI32 ? 0 : std::numeric_limits<double>::quiet_NaN();
    write_tensor(base + offs[i], b.dtype, std::vector<double>(b.elements(), v));
  }
}

std::string codegen_test_hook(const BackendConfig& c, const ir::Program& p) {
  const std::string& v = c.inject;
  auto colon = v.find(':');
  if (colon == std::string::npos) return v;
  return p.find_buffer(v.substr(colon + 1)) ? v.substr(0, colon) : "";
}

namespace {

// "[i,j]" of a flat offset in `shape`.
bool same_bits(double x, double y) { return (std::isnan(x) && std::isnan(y)) || x == y; }

// Two units in the last place of `v` in type t.
double two_ulps(ir::DType t, double v) {
  const auto f = ir::float_format(t);
  if (!f) return 0;  // integers
  // The spacing relative to |v|, and one denormal step.
  const double eps = std::ldexp(1.0, 1 - f->p), tiny = std::ldexp(1.0, f->emin + 1 - f->p);
  return 2 * (eps * std::fabs(v) + tiny);
}

// compare_outputs without setting m.wrong_result.
bool outputs_agree(const ir::Program& p, const std::map<std::string, ir::Tensor>& got,
                   const std::map<std::string, ir::Tensor>& want, Measurement& m,
                   const Comparison& how) {
  double worst = 0;
  for (const auto& [n, t] : got) worst = std::max(worst, ir::max_relative_error(t, want.at(n)));
  m.max_rel_error = worst;
  char buf[400];
  const bool exact = how.exact || (!how.bounds && [&] {
                       for (const auto& [n, t] : got)
                         if (ir::compute_type(t.dtype) != ir::DType::kI32) return false;
                       return true;  // integers: exact whatever the order
                     }());
  if (exact || how.bounds) {
    m.verification = exact ? "exact" : "bound";
    for (const auto& [n, g] : got) {
      const ir::Tensor& w = want.at(n);
      if (g.data.size() != w.data.size()) {
        m.error = "wrong result: output '" + n + "' has the wrong size";
        return false;
      }
      const ir::Tensor* b = nullptr;
      if (!exact) {
        auto it = how.bounds->find(n);
        if (it != how.bounds->end() && it->second.data.size() == w.data.size()) b = &it->second;
      }
      for (size_t i = 0; i < g.data.size(); ++i) {
        const double x = g.data[i], y = w.data[i];
        if (same_bits(x, y)) continue;
        if (ir::compute_type(g.dtype) == ir::DType::kI32 || exact) {
          std::snprintf(buf, sizeof buf,
                        "wrong result: output '%s' element %s is %.9g, the interpreter's %.9g; the "
                        "code keeps the IR's order and rounding, so they must be equal bit for bit",
                        n.c_str(), ir::element_text(g.shape, static_cast<int64_t>(i)).c_str(), x,
                        y);
          m.error = buf;
          return false;
        }
        const double bound = (b ? kBoundFactor * b->data[i] : 0) + two_ulps(g.dtype, y);
        if (std::isnan(x) || std::isnan(y) || !(std::fabs(x - y) <= bound)) {
          std::snprintf(
              buf, sizeof buf,
              "wrong result: output '%s' element %s is %.9g, the interpreter's %.9g, %.3g "
              "apart: beyond the rounding bound %.3g (its error estimate, times %g, plus two ulps)",
              n.c_str(), ir::element_text(g.shape, static_cast<int64_t>(i)).c_str(), x, y,
              std::fabs(x - y), bound, kBoundFactor);
          m.error = buf;
          return false;
        }
      }
    }
    return true;
  }
  m.verification = "tolerance";
  std::string bad;  // the first output over its tolerance
  for (const auto& [n, t] : got)
    if (bad.empty() &&
        !(ir::max_relative_error(t, want.at(n)) <= x86_verification_tolerance(t.dtype, p)))
      bad = n;
  if (bad.empty()) return true;
  std::snprintf(buf, sizeof buf,
                "wrong result: max relative error %.3g in output '%s' (tolerance %g)",
                ir::max_relative_error(got.at(bad), want.at(bad)), bad.c_str(),
                x86_verification_tolerance(got.at(bad).dtype, p));
  m.error = buf;
  return false;
}

}  // namespace

bool compare_outputs(const ir::Program& p, const std::map<std::string, ir::Tensor>& got,
                     const std::map<std::string, ir::Tensor>& want, Measurement& m,
                     const Comparison& how) {
  const bool same = outputs_agree(p, got, want, m, how);
  m.wrong_result = !same;
  return same;
}

}  // namespace perfdojo::backends
