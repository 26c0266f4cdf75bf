#include "ir/liveness.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace perfdojo::ir {
namespace {

bool reads(const Expr& e, const std::string& b) {
  if (e.kind == ExprKind::kLoad && e.access.buffer == b) return true;
  for (const auto& a : e.args)
    if (reads(*a, b)) return true;
  return false;
}

// Whether `index`, over iterators of the given extents (extents[k] for depth k), reaches every
// element of `shape` (each exactly once).
bool covers(const std::vector<Affine>& index, const std::vector<int64_t>& extents,
            const std::vector<int64_t>& shape) {
  if (index.size() != shape.size()) return false;
  std::vector<int> dim_of(extents.size(), -1);
  for (size_t d = 0; d < index.size(); ++d) {
    const Affine& f = index[d];
    if (f.constant != 0) return false;
    std::vector<std::pair<int64_t, int64_t>> terms;  // coefficient, extent
    for (size_t k = 0; k < f.coeffs.size(); ++k) {
      if (f.coeffs[k] == 0) continue;
      if (k >= extents.size() || f.coeffs[k] < 0 || dim_of[k] >= 0) return false;
      dim_of[k] = static_cast<int>(d);
      terms.push_back({f.coeffs[k], extents[k]});
    }
    std::sort(terms.begin(), terms.end());
    int64_t span = 1;  // elements the smaller terms reach, contiguously from 0
    for (const auto& [c, e] : terms) {
      if (c != span) return false;
      span *= e;
    }
    if (span != shape[d]) return false;
  }
  return true;
}

// Walks the body: sets `read` when some statement reads `b`, `covered` when some plain store to
// `b` covers its shape.
void walk(const std::vector<NodePtr>& body, const BufferDecl& b, std::vector<int64_t>& extents,
          bool& read, bool& covered) {
  for (const auto& n : body) {
    if (read) return;
    if (n->is_scope) {
      extents.push_back(n->extent);
      walk(n->body, b, extents, read, covered);
      extents.pop_back();
      continue;
    }
    const Stmt& s = n->stmt;
    if (reads(*s.rhs, b.name) || (s.lhs.buffer == b.name && s.op != Reduce::kNone)) {
      read = true;
      return;
    }
    if (s.lhs.buffer == b.name && !covered) covered = covers(s.lhs.index, extents, b.shape);
  }
}

}  // namespace

bool initial_value_dead(const Program& p, const BufferDecl& b) {
  if (b.role == Role::kInput || !b.init) return false;
  bool read = false, covered = false;
  std::vector<int64_t> extents;
  walk(p.body, b, extents, read, covered);
  return !read && covered;
}

}  // namespace perfdojo::ir
