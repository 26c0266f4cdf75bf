#include "transforms/analysis.h"

#include <algorithm>
#include <numeric>

namespace perfdojo::transforms {

bool shares_storage(ir::Annot a) {
  return a == ir::Annot::kParallel || a == ir::Annot::kGpuBlock || a == ir::Annot::kGpuThread;
}

using ir::Access;
using ir::Affine;
using ir::Expr;
using ir::ExprPtr;
using ir::Node;
using ir::NodePtr;
using ir::Program;

const Node* node_at(const Program& p, const Path& path) {
  const std::vector<NodePtr>* list = &p.body;
  const Node* n = nullptr;
  for (int i : path) {
    if (!list || i < 0 || i >= static_cast<int>(list->size())) return nullptr;
    n = (*list)[i].get();
    list = n->is_scope ? &n->body : nullptr;
  }
  return n;
}

std::vector<const Node*> enclosing_scopes(const Program& p, const Path& path) {
  std::vector<const Node*> out;
  const std::vector<NodePtr>* list = &p.body;
  for (size_t k = 0; k + 1 < path.size(); ++k) {
    const Node* n = (*list)[path[k]].get();
    out.push_back(n);
    list = &n->body;
  }
  return out;
}

bool any_enclosing_annot(const Program& p, const Path& path, bool (*pred)(ir::Annot)) {
  const std::vector<NodePtr>* list = &p.body;
  for (size_t k = 0; k + 1 < path.size(); ++k) {
    const Node* n = (*list)[path[k]].get();
    if (pred(n->annot)) return true;
    list = &n->body;
  }
  return false;
}

std::vector<int64_t> enclosing_extents(const Program& p, const Path& path) {
  std::vector<int64_t> out;
  for (const Node* n : enclosing_scopes(p, path)) out.push_back(n->extent);
  return out;
}

namespace {

std::vector<NodePtr> rebuild(
    const std::vector<NodePtr>& list, const Path& path, size_t depth,
    const std::function<std::vector<NodePtr>(const std::vector<NodePtr>&, int)>& edit) {
  if (depth + 1 == path.size()) return edit(list, path[depth]);
  std::vector<NodePtr> out = list;
  const Node& n = *list[path[depth]];
  out[path[depth]] = Node::scope_like(n, n.annot, rebuild(n.body, path, depth + 1, edit));
  return out;
}

}  // namespace

Program replace_in_parent(
    const Program& p, const Path& path,
    const std::function<std::vector<NodePtr>(const std::vector<NodePtr>&, int)>& edit) {
  Program q = p;
  q.body = rebuild(p.body, path, 0, edit);
  return q;
}

Program replace_node(const Program& p, const Path& path, std::vector<NodePtr> nodes) {
  return replace_in_parent(p, path, [&](const std::vector<NodePtr>& list, int i) {
    std::vector<NodePtr> out(list.begin(), list.begin() + i);
    out.insert(out.end(), nodes.begin(), nodes.end());
    out.insert(out.end(), list.begin() + i + 1, list.end());
    return out;
  });
}

ExprPtr map_accesses(const ExprPtr& e, const AccessMap& f) {
  switch (e->kind) {
    case ir::ExprKind::kConst:
      return e;
    case ir::ExprKind::kLoad: {
      std::optional<Access> b = f(e->access);
      if (!b || *b == e->access) return e;
      return Expr::load(std::move(*b));
    }
    case ir::ExprKind::kIndex: {  // an access of no buffer: its index is rewritten the same way
      std::optional<Access> b = f(e->access);
      if (!b || *b == e->access) return e;
      return Expr::index(std::move(b->index.front()), e->loc);
    }
    default: {
      std::shared_ptr<Expr> c;  // made at the first argument that changes
      for (size_t i = 0; i < e->args.size(); ++i) {
        ExprPtr a = map_accesses(e->args[i], f);
        if (a == e->args[i]) continue;
        if (!c) c = std::make_shared<Expr>(*e);
        c->args[i] = std::move(a);
      }
      if (!c) return e;
      return c;
    }
  }
}

NodePtr map_accesses(const NodePtr& n, const AccessMap& f) {
  if (!n->is_scope) {
    std::optional<Access> lhs = f(n->stmt.lhs);
    if (lhs && *lhs == n->stmt.lhs) lhs.reset();
    ExprPtr rhs = map_accesses(n->stmt.rhs, f);
    if (rhs == n->stmt.rhs && !lhs) return n;
    ir::Stmt s = n->stmt;
    if (lhs) s.lhs = std::move(*lhs);
    s.rhs = std::move(rhs);
    return Node::statement(std::move(s));
  }
  std::vector<NodePtr> body;
  body.reserve(n->body.size());
  bool changed = false;
  for (const auto& c : n->body) {
    body.push_back(map_accesses(c, f));
    changed = changed || body.back() != c;
  }
  if (!changed) return n;
  return Node::scope_like(*n, n->annot, std::move(body));
}

NodePtr map_indices(const NodePtr& n, const std::function<Affine(const Affine&)>& f) {
  const AccessMap on_access = [&](const Access& a) -> std::optional<Access> {
    std::optional<Access> b;  // copied at the first index that changes
    for (size_t i = 0; i < a.index.size(); ++i) {
      Affine ix = f(a.index[i]);
      ix.normalise();
      if (ix == a.index[i]) continue;
      if (!b) b = a;
      b->index[i] = std::move(ix);
    }
    // An indirect term's own indices are affine in the same iterators: they follow.
    for (size_t d = 0; d < a.gather.size(); ++d) {
      if (!a.gather[d]) continue;
      const auto& gi = a.gather[d]->index;
      for (size_t i = 0; i < gi.size(); ++i) {
        Affine ix = f(gi[i]);
        ix.normalise();
        if (ix == gi[i]) continue;
        if (!b) b = a;
        b->gather[d]->index[i] = std::move(ix);
      }
    }
    return b;
  };
  if (!n->is_scope) return map_accesses(n, on_access);
  // A bounded scope's bounds are affine in the same iterators as the accesses: they follow.
  ir::ScopeBounds bounds = n->bounds;
  bool changed = false;
  for (auto* b : {&bounds.lo, &bounds.hi}) {
    if (!*b) continue;
    Affine m = f(**b);
    m.normalise();
    changed = changed || !(m == **b);
    **b = std::move(m);
  }
  for (auto* g : {&bounds.lo_gather, &bounds.hi_gather}) {  // an indirect bound's indices too
    if (!*g) continue;
    for (auto& ix : (*g)->index) {
      Affine m = f(ix);
      m.normalise();
      changed = changed || !(m == ix);
      ix = std::move(m);
    }
  }
  std::vector<NodePtr> body;
  body.reserve(n->body.size());
  for (const auto& c : n->body) {
    body.push_back(map_indices(c, f));
    changed = changed || body.back() != c;
  }
  if (!changed) return n;
  return Node::scope(n->extent, n->extent_name, n->annot, std::move(body), n->loc,
                     std::move(bounds));
}

namespace {

// Sites are recorded with an offset into `storage` first (it grows while collecting) and
// get their pointer once collection is done.
void collect_expr(const Expr& e, const ir::Stmt& s, int64_t off, int depth, AccessSites& out) {
  // An iterator value is a read of no buffer (""): it never depends on anything, but every
  // test of which iterators a statement uses (vectorising, merging, hoisting) sees it.
  if (e.kind == ir::ExprKind::kLoad || e.kind == ir::ExprKind::kIndex)
    out.push_back({&e.access, false, false, &s, reinterpret_cast<const int64_t*>(off), depth});
  for (const auto& a : e.args) collect_expr(*a, s, off, depth, out);
}

void collect_statement(const Node* n, const std::vector<int64_t>& ext, AccessSites& out) {
  auto off = static_cast<int64_t>(out.storage.size());
  int depth = static_cast<int>(ext.size());
  out.storage.insert(out.storage.end(), ext.begin(), ext.end());
  out.push_back({&n->stmt.lhs, true, n->stmt.op != ir::Reduce::kNone, &n->stmt,
                 reinterpret_cast<const int64_t*>(off), depth});
  collect_expr(*n->stmt.rhs, n->stmt, off, depth, out);
}

void collect(const NodePtr& n, std::vector<int64_t>& ext, AccessSites& out) {
  if (n->is_scope) {
    ext.push_back(n->extent);
    for (const auto& c : n->body) collect(c, ext, out);
    ext.pop_back();
    return;
  }
  collect_statement(n.get(), ext, out);
}

// Turns the offsets recorded while collecting into pointers into `storage`.
void fix_extents(AccessSites& out) {
  for (auto& site : out)
    site.extents = out.storage.data() + reinterpret_cast<intptr_t>(site.extents);
}

struct Range {
  int64_t lo = 0, hi = 0;
};

// Range of c*x for x in [0, e-1].
Range span(int64_t c, int64_t e) {
  int64_t v = c * (e - 1);
  return {std::min<int64_t>(0, v), std::max<int64_t>(0, v)};
}

}  // namespace

AccessSites collect_accesses(const std::vector<NodePtr>& nodes, const std::vector<int64_t>& outer) {
  AccessSites out;
  std::vector<int64_t> ext = outer;
  for (const auto& n : nodes) collect(n, ext, out);
  fix_extents(out);
  return out;
}

AccessSites collect_accesses(const NodePtr& node, const std::vector<int64_t>& outer) {
  return collect_accesses(std::vector<NodePtr>{node}, outer);
}

bool may_overlap(const AccessSite& a, const AccessSite& b, std::span<const Dir> dirs) {
  const auto& ia = a.access->index;
  const auto& ib = b.access->index;
  if (ia.size() != ib.size()) return true;  // malformed; be conservative
  const int paired = static_cast<int>(dirs.size());
  // An impossible direction (i < j over a single iteration) means no instance pair exists.
  for (int k = 0; k < paired; ++k) {
    int64_t e = std::min(a.extents[k], b.extents[k]);
    if ((dirs[k] == Dir::kLt || dirs[k] == Dir::kGt) && e < 2) return false;
  }
  for (size_t d = 0; d < ia.size(); ++d) {
    const Affine& fa = ia[d];
    const Affine& fb = ib[d];
    // f(i) - g(j) = sum a_k i_k - sum b_k j_k + (ca - cb); is 0 reachable?
    int64_t lo = fa.constant - fb.constant, hi = lo;
    int64_t g = 0;
    // Coefficients past the stored ones are zero and contribute nothing: stop there.
    const int na = std::min(a.depth, static_cast<int>(fa.coeffs.size()));
    const int nb = std::min(b.depth, static_cast<int>(fb.coeffs.size()));
    const int n = std::max(na, nb);
    for (int k = 0; k < n; ++k) {
      const int64_t ca = k < na ? fa.coeffs[k] : 0, cb = k < nb ? fb.coeffs[k] : 0;
      if (ca == 0 && cb == 0) continue;
      if (k < paired) {
        int64_t e = std::min(a.extents[k], b.extents[k]);
        switch (dirs[k]) {
          case Dir::kEq: {
            Range r = span(ca - cb, e);
            lo += r.lo, hi += r.hi;
            g = std::gcd(g, ca - cb);
            continue;
          }
          case Dir::kLt:
          case Dir::kGt: {
            // Extremes of ca*i - cb*j over the triangle i<j (or i>j) are at its vertices.
            int64_t pts[3][2] = {{0, 1}, {0, e - 1}, {e - 2, e - 1}};
            int64_t mn = INT64_MAX, mx = INT64_MIN;
            for (auto& pt : pts) {
              int64_t i = pt[0], j = pt[1];
              if (dirs[k] == Dir::kGt) std::swap(i, j);
              int64_t v = ca * i - cb * j;
              mn = std::min(mn, v), mx = std::max(mx, v);
            }
            lo += mn, hi += mx;
            g = std::gcd(g, std::gcd(ca, cb));
            continue;
          }
          case Dir::kAny:
            break;
        }
      }
      if (k < na && ca != 0) {
        Range r = span(ca, a.extents[k]);
        lo += r.lo, hi += r.hi;
      }
      if (k < nb && cb != 0) {
        Range r = span(-cb, b.extents[k]);
        lo += r.lo, hi += r.hi;
      }
      g = std::gcd(g, std::gcd(ca, cb));
    }
    if (lo > 0 || hi < 0) return false;
    int64_t c = fb.constant - fa.constant;
    if (g != 0 && c % g != 0) return false;
    if (g == 0 && c != 0) return false;
  }
  return true;
}

bool may_depend(const AccessSite& a, const AccessSite& b, std::span<const Dir> dirs) {
  if (!a.write && !b.write) return false;
  if (a.access->buffer != b.access->buffer) return false;
  return may_overlap(a, b, dirs);
}

std::optional<std::string> find_dependence(std::span<const AccessSite> from,
                                           std::span<const AccessSite> to,
                                           std::span<const Dir> dirs) {
  // may_depend on every pair, in the same order.
  for (const auto& a : from) {
    const std::string& na = a.access->buffer;
    for (const auto& b : to) {
      if (!a.write && !b.write) continue;
      if (a.buffer >= 0 && b.buffer >= 0) {  // both from one index: its ids tell names apart
        if (a.buffer != b.buffer) continue;
      } else if (!same_name(na, b.access->buffer)) {
        continue;
      }
      if (may_overlap(a, b, dirs)) return na;
    }
  }
  return std::nullopt;
}

std::optional<std::string> find_dependence(const std::vector<AccessSite>& from,
                                           const std::vector<AccessSite>& to,
                                           const std::vector<Dir>& dirs) {
  return find_dependence(std::span<const AccessSite>(from), std::span<const AccessSite>(to), dirs);
}

int count_statements(const NodePtr& n) {
  if (!n->is_scope) return 1;
  int c = 0;
  for (const auto& ch : n->body) c += count_statements(ch);
  return c;
}

namespace {
bool expr_uses(const Expr& e, const std::string& b) {
  if (e.kind == ir::ExprKind::kLoad && e.access.buffer == b) return true;
  for (const auto& a : e.args)
    if (expr_uses(*a, b)) return true;
  return false;
}

void paths_rec(const std::vector<NodePtr>& list, Path& cur, bool scopes_only,
               std::vector<Path>& out) {
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    cur.push_back(i);
    if (list[i]->is_scope || !scopes_only) out.push_back(cur);
    if (list[i]->is_scope) paths_rec(list[i]->body, cur, scopes_only, out);
    cur.pop_back();
  }
}
}  // namespace

bool uses_buffer(const NodePtr& n, const std::string& buffer) {
  if (!n->is_scope) return n->stmt.lhs.buffer == buffer || expr_uses(*n->stmt.rhs, buffer);
  for (const auto& c : n->body)
    if (uses_buffer(c, buffer)) return true;
  return false;
}

int parallel_scopes(const std::vector<NodePtr>& body) {
  int n = 0;
  for (const auto& c : body)
    if (c->is_scope) n += c->annot == ir::Annot::kParallel ? 1 : parallel_scopes(c->body);
  return n;
}

std::vector<Path> scope_paths(const Program& p) {
  std::vector<Path> out;
  Path cur;
  paths_rec(p.body, cur, true, out);
  return out;
}

void loaded_buffers(const ir::Expr& e, BufferNames& out) {
  if (e.kind == ir::ExprKind::kLoad) out.push_back(&e.access.buffer);
  for (const auto& a : e.args) loaded_buffers(*a, out);
}

bool holds_name(const BufferNames& names, std::string_view b) {
  for (const std::string* n : names)
    if (same_name(*n, b)) return true;
  return false;
}

const std::string* first_common_name(const BufferNames& xs, const BufferNames& ys) {
  const std::string* first = nullptr;
  for (const std::string* x : xs)
    if ((!first || *x < *first) && holds_name(ys, *x)) first = x;
  return first;
}

std::vector<Path> node_paths(const Program& p) {
  std::vector<Path> out;
  Path cur;
  paths_rec(p.body, cur, false, out);
  return out;
}

std::string fresh_buffer_name(const Program& p, const std::string& base) {
  for (int i = 0;; ++i) {
    std::string n = base + std::to_string(i);
    if (!p.find_buffer(n) && !p.find_size(n)) return n;
  }
}

ProgramIndex::ProgramIndex(const Program& p) {
  // Enough for the suite's kernels after many steps: one allocation each.
  nodes_.reserve(64);
  path_pool_.reserve(256);
  path_begin_.reserve(65);
  sites_.reserve(256);
  sites_.storage.reserve(1024);
  site_node_.reserve(256);
  rebuild(p);
}

void ProgramIndex::rebuild(const Program& p) {
  p_ = &p;
  nodes_.clear();
  path_pool_.clear();
  path_begin_.clear();
  top_nodes_.clear();
  scopes_.clear();
  sites_.clear();
  sites_.storage.clear();
  site_node_.clear();
  site_buffer_.clear();
  names_.clear();
  hint_ = -1;
  bounded_ = false;
  indirect_ = false;
  for (auto& b : buffer_sites_) b.clear();  // kept with their storage; names_ says how many count
  cur_.clear();
  ext_.clear();
  walk(p.body, -1, cur_, ext_);
  path_begin_.push_back(static_cast<int>(path_pool_.size()));
  fix_extents(sites_);
  // Buffer ids, in order of first appearance among the sites.
  site_buffer_.reserve(sites_.size());
  for (int s = 0; s < static_cast<int>(sites_.size()); ++s) {
    const std::string& name = sites_[s].access->buffer;
    int id = buffer_id(name);
    if (id < 0) {
      id = static_cast<int>(names_.size());
      names_.push_back(name);
      if (buffer_sites_.size() < names_.size()) buffer_sites_.emplace_back();
    }
    site_buffer_.push_back(id);
    sites_[s].buffer = id;
    buffer_sites_[id].push_back(s);
  }
}

void ProgramIndex::walk(const std::vector<NodePtr>& body, int parent, Path& cur,
                        std::vector<int64_t>& ext) {
  int prev = -1;
  for (int i = 0; i < static_cast<int>(body.size()); ++i) {
    const Node* n = body[i].get();
    const int me = static_cast<int>(nodes_.size());
    cur.push_back(i);
    NodeInfo info;
    info.node = n;
    info.parent = parent;
    info.top = parent < 0 ? i : nodes_[parent].top;
    info.site_begin = static_cast<int>(sites_.size());
    nodes_.push_back(info);
    path_begin_.push_back(static_cast<int>(path_pool_.size()));
    path_pool_.insert(path_pool_.end(), cur.begin(), cur.end());
    if (prev >= 0)
      nodes_[prev].next = me;
    else if (parent >= 0)
      nodes_[parent].first_child = me;
    if (parent < 0) top_nodes_.push_back(me);
    if (n->is_scope) {
      scopes_.push_back(me);
      bounded_ = bounded_ || n->bounds.any();
      indirect_ = indirect_ || n->bounds.indirect();  // as ir::any_indirect counts it
      ext.push_back(n->extent);
      walk(n->body, me, cur, ext);
      ext.pop_back();
    } else {
      const size_t first = sites_.size();
      collect_statement(n, ext, sites_);
      for (size_t s = first; s < sites_.size() && !indirect_; ++s)
        indirect_ = sites_[s].access->indirect();
      site_node_.resize(sites_.size(), me);
    }
    nodes_[me].site_end = static_cast<int>(sites_.size());
    cur.pop_back();
    prev = me;
  }
}

int ProgramIndex::find(const Path& path) const {
  if (hint_ >= 0 && !path.empty()) {
    const std::span<const int> h = this->path(hint_);
    if ((path.size() == h.size() || path.size() == h.size() + 1) &&
        std::equal(h.begin(), h.end(), path.begin())) {
      if (path.size() == h.size()) return hint_;
      if (path.back() < 0) return -1;
      int n = nodes_[hint_].first_child;
      for (int i = 0; i < path.back() && n >= 0; ++i) n = nodes_[n].next;
      return n;
    }
  }
  int n = -1;
  for (size_t k = 0; k < path.size(); ++k) {
    if (path[k] < 0) return -1;
    if (k == 0) {
      if (path[0] >= static_cast<int>(top_nodes_.size())) return -1;
      n = top_nodes_[path[0]];
      continue;
    }
    n = nodes_[n].first_child;
    for (int i = 0; i < path[k] && n >= 0; ++i) n = nodes_[n].next;
    if (n < 0) return -1;
  }
  return n;
}

int ProgramIndex::buffer_id(std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (same_name(names_[i], name)) return static_cast<int>(i);
  return -1;
}

std::span<const AccessSite> ProgramIndex::child_sites(int scope, int from, int to) const {
  if (from >= to) return {};
  auto nth = [&](int i) {
    int n = scope < 0 ? top_nodes_[0] : nodes_[scope].first_child;
    for (int k = 0; k < i; ++k) n = nodes_[n].next;
    return n;
  };
  const int first = nth(from);
  int last = first;
  for (int k = from + 1; k < to; ++k) last = nodes_[last].next;
  return sites(nodes_[first].site_begin, nodes_[last].site_end);
}

ChildSites::ChildSites(const ProgramIndex* index, const Program& p, const Path& scope, int from,
                       int to) {
  if (index) {
    view_ = index->child_sites(scope.empty() ? -1 : index->find(scope), from, to);
    return;
  }
  const std::vector<NodePtr>& body = scope.empty() ? p.body : node_at(p, scope)->body;
  std::vector<int64_t> outer;
  if (!scope.empty()) {
    outer = enclosing_extents(p, scope);
    outer.push_back(node_at(p, scope)->extent);
  }
  owned_ = collect_accesses(std::vector<NodePtr>(body.begin() + from, body.begin() + to), outer);
  view_ = owned_;
}

}  // namespace perfdojo::transforms
