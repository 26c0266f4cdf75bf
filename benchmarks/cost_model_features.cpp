#include "benchmarks/cost_model_features.h"

#include <algorithm>
#include <cmath>

namespace perfdojo::backends {
namespace {

// Statement executions by kind, over the whole program.
struct Census {
  double total = 0, vec = 0, chain = 0, strided = 0, short_inner = 0;
  double unrolled_statements = 0;
  bool parallel = false;
};

// Whether `e` (or its sub-expressions) loads with a stride in `depth` other than 0 or 1 on the
// last index (the one contiguous in memory).
bool strided_expr(const ir::Expr& e, int depth) {
  if (e.kind == ir::ExprKind::kLoad && !e.access.index.empty()) {
    const int64_t c = e.access.index.back().coeff(depth);
    bool other_dims = false;
    for (size_t k = 0; k + 1 < e.access.index.size(); ++k)
      other_dims = other_dims || e.access.index[k].coeff(depth) != 0;
    if ((c != 0 && c != 1) || other_dims) return true;
  }
  for (const auto& a : e.args)
    if (strided_expr(*a, depth)) return true;
  return false;
}

struct Frame {
  int64_t extent;
  ir::Annot annot;
};

void walk(const std::vector<ir::NodePtr>& body, std::vector<Frame>& frames, double executions,
          bool in_vec, double copies, Census& c) {
  for (const auto& n : body) {
    if (n->is_scope) {
      const bool unroll = n->annot == ir::Annot::kUnroll;
      c.parallel = c.parallel || n->annot == ir::Annot::kParallel;
      frames.push_back({n->extent, n->annot});
      walk(n->body, frames, executions * static_cast<double>(n->extent),
           in_vec || n->annot == ir::Annot::kVector,
           copies * (unroll ? static_cast<double>(n->extent) : 1), c);
      frames.pop_back();
      continue;
    }
    c.total += executions;
    c.unrolled_statements += copies;
    if (in_vec) c.vec += executions;
    if (frames.empty()) continue;
    const int depth = static_cast<int>(frames.size()) - 1;
    const Frame& inner = frames.back();
    if (inner.extent <= 4 || inner.annot == ir::Annot::kUnroll) c.short_inner += executions;
    const ir::Stmt& s = n->stmt;
    bool moves = false;
    for (const auto& ix : s.lhs.index) moves = moves || ix.coeff(depth) != 0;
    if (s.op != ir::Reduce::kNone && !moves && !in_vec) c.chain += executions;
    bool strided = s.rhs && strided_expr(*s.rhs, depth);
    if (!s.lhs.index.empty()) {
      const int64_t lc = s.lhs.index.back().coeff(depth);
      strided = strided || (lc != 0 && lc != 1);
    }
    if (strided) c.strided += executions;
  }
}

double log_share(double part, double whole) {
  return std::log(std::max(part, 1e-12) / std::max(whole, 1e-12));
}

}  // namespace

ModelFeatures model_features(const ir::Program& p, const CostEstimate& e, const MachineProfile& m) {
  Census c;
  std::vector<Frame> frames;
  walk(p.body, frames, 1, false, 1, c);
  const double total = std::max(c.total, 1.0);
  int temps = 0;
  for (const auto& b : p.buffers) temps += b.role == ir::Role::kTemp;
  const double t = std::max(e.time_s, 1e-12);
  const double peak = m.peak_gflops_avx512 > 0 ? m.peak_gflops_avx512 : m.peak_gflops_avx2;
  ModelFeatures f{};
  f[0] = 1;
  f[1] = std::max(-10.0, log_share(e.compute_s, t));
  f[2] = std::max(-10.0, log_share(e.level_s[0], t));
  f[3] = std::max(-10.0, log_share(e.level_s[1], t));
  f[4] = std::max(-10.0, log_share(e.level_s[2] + e.level_s[3], t));
  f[5] = std::max(-10.0, log_share(e.overhead_s, t));
  f[6] = c.vec / total;
  f[7] = c.chain / total;
  f[8] = c.strided / total;
  f[9] = c.short_inner / total;
  f[10] = std::log1p(c.unrolled_statements) / 5;
  f[11] = c.parallel ? 1 : 0;
  f[12] = std::log1p(temps);
  f[13] = e.flops > 0 && peak > 0 ? std::clamp(std::log(e.flops / t * 1e-9 / peak), -10.0, 2.0) : 0;
  return f;
}

}  // namespace perfdojo::backends
