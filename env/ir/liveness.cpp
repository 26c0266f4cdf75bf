#include "ir/liveness.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <string>
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
      // A bounded scope may skip some of its extent: it covers nothing (extent 0 to covers).
      extents.push_back(n->bounds.any() ? 0 : n->extent);
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

// Calls fn on every access of `b` (loads, stores and reductions) in `body`.
void for_each_access(const std::vector<NodePtr>& body, const std::string& b,
                     const std::function<void(const Access&)>& fn) {
  std::function<void(const Expr&)> loads = [&](const Expr& e) {
    if (e.kind == ExprKind::kLoad && e.access.buffer == b) fn(e.access);
    for (const auto& a : e.args) loads(*a);
  };
  for (const auto& c : body) {
    if (c->is_scope) {
      for_each_access(c->body, b, fn);
    } else {
      if (c->stmt.lhs.buffer == b) fn(c->stmt.lhs);
      loads(*c->stmt.rhs);
    }
  }
}

int64_t accesses(const std::vector<NodePtr>& body, const std::string& b) {
  int64_t n = 0;
  for_each_access(body, b, [&](const Access&) { ++n; });
  return n;
}

// The walk of one scope's body for private_buffers: `depth` is the depth of the scope (its
// iterator is {depth}), `extents` the extents by depth of the scopes around and including it.
struct PrivateWalk {
  bool ok = true;        // no read of `b` before a covering store in the same iteration
  bool covered = false;  // at the end of the body, every element has been written in this iteration
  int pending = INT_MAX;  // a covering store done once the scope at this depth exits
};

// `slice` >= 0: every access of `b` has {slice} as its first index, and a store covers the
// slice (the other dimensions); else a store covers the whole buffer.
PrivateWalk written_before_read(const std::vector<NodePtr>& body, const BufferDecl& b, int slice,
                                int depth, std::vector<int64_t>& extents, bool covered) {
  PrivateWalk w;
  w.covered = covered;
  for (const auto& n : body) {
    if (n->is_scope) {
      extents.push_back(n->bounds.any() ? 0 : n->extent);  // bounded: covers nothing
      PrivateWalk c = written_before_read(n->body, b, slice, depth + 1, extents, w.covered);
      extents.pop_back();
      if (!c.ok) return c;
      // Every iteration of the child ends covered, or a store over the child's own scopes
      // has reached every element once the child is done.
      if (c.covered || (c.pending != INT_MAX && c.pending > depth))
        w.covered = true;
      else
        w.pending = std::min(w.pending, c.pending);
      continue;
    }
    const Stmt& s = n->stmt;
    if (!w.covered &&
        (reads(*s.rhs, b.name) || (s.lhs.buffer == b.name && s.op != Reduce::kNone))) {
      w.ok = false;
      return w;
    }
    if (s.lhs.buffer != b.name || s.op != Reduce::kNone) continue;
    const size_t first = slice >= 0 ? 1 : 0;
    const std::vector<Affine> index(s.lhs.index.begin() + first, s.lhs.index.end());
    const std::vector<int64_t> shape(b.shape.begin() + first, b.shape.end());
    if (!covers(index, extents, shape)) continue;
    // Done once the scope of the shallowest iterator it uses exits (none: at once).
    int shallowest = INT_MAX;
    for (const Affine& f : index)
      for (int k = 0; k < static_cast<int>(f.coeffs.size()); ++k)
        if (f.coeffs[k] != 0) shallowest = std::min(shallowest, k);
    if (shallowest == INT_MAX)
      w.covered = true;
    else
      w.pending = std::min(w.pending, shallowest);
  }
  return w;
}

// The scope at `path` in `p` (nullptr when the path leads to no scope).
const Node* scope_at(const Program& p, const std::vector<int>& path) {
  const Node* s = nullptr;
  for (const std::vector<NodePtr>* body = &p.body; const int i : path) {
    if (i < 0 || i >= static_cast<int>(body->size())) return nullptr;
    s = (*body)[i].get();
    body = &s->body;
  }
  return s && s->is_scope ? s : nullptr;
}

// private_buffers (slice < 0) or iteration_slices (slice: the scope's depth).
std::vector<std::string> private_buffers(const Program& p, const std::vector<int>& path,
                                         bool sliced) {
  std::vector<std::string> out;
  const Node* s = scope_at(p, path);
  if (!s) return out;
  const int depth = static_cast<int>(path.size()) - 1;
  for (const BufferDecl& b : p.buffers) {
    if (b.role != Role::kTemp) continue;
    const int64_t inside = accesses(s->body, b.name);
    if (inside == 0 || (sliced && inside != accesses(p.body, b.name))) continue;
    if (sliced) {
      // Each iteration's own slice: the first index is the scope's iterator, alone; the
      // others do not use it.
      bool own = b.shape.size() >= 2 && b.shape[0] == s->extent;
      for_each_access(s->body, b.name, [&](const Access& a) {
        own = own && a.index.size() == b.shape.size() && a.index[0] == Affine::iter(depth);
        for (size_t k = 1; own && k < a.index.size(); ++k) own = a.index[k].coeff(depth) == 0;
      });
      if (!own) continue;
    }
    // (A store using an iterator of `s` or around it writes different elements in different
    // iterations: it covers nothing within one. Their extents are 0, which covers refuses.)
    std::vector<int64_t> extents(static_cast<size_t>(depth) + 1, 0);
    const PrivateWalk w =
        written_before_read(s->body, b, sliced ? depth : -1, depth, extents, false);
    // (Private: every iteration also writes all of it, so what the scope leaves in it is the
    // last iteration's copy. Slices: the iteration's own, read by nothing after the scope.)
    if (w.ok && (sliced || w.covered)) out.push_back(b.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

bool initial_value_dead(const Program& p, const BufferDecl& b) {
  if (b.role == Role::kInput || !b.init) return false;
  bool read = false, covered = false;
  std::vector<int64_t> extents;
  walk(p.body, b, extents, read, covered);
  return !read && covered;
}

std::vector<std::string> iteration_private_buffers(const Program& p, const std::vector<int>& path) {
  return private_buffers(p, path, false);
}

std::vector<std::string> iteration_slices(const Program& p, const std::vector<int>& path) {
  return private_buffers(p, path, true);
}

}  // namespace perfdojo::ir
