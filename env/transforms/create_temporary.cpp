#include "transforms/create_temporary.h"

#include <algorithm>
#include <span>

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// Whether create_temporary accepts a scope annotated `a` (plain or unrolled).
bool temporary_scope_annot(ir::Annot a) { return a == ir::Annot::kNone || a == ir::Annot::kUnroll; }

// How the iterators deeper than a scope's depth occur in the one index every access of a
// buffer inside the scope uses.
enum class InnerForm {
  kDistinct,  ///< each in exactly one dimension, at most one per dimension: injective
  kShared,    ///< some dimension holds several (8*{i}+{r}), or an iterator is in several
};

// The form of `index` below `depth`; the inner iterators, increasing, go to `inner` when given.
InnerForm inner_iterators(const std::vector<ir::Affine>& index, int depth,
                          std::vector<int>* inner) {
  // Iterators below 64 are remembered in a bit set, deeper ones (rare) in a list.
  uint64_t seen = 0;
  std::vector<int> deep;
  InnerForm form = InnerForm::kDistinct;
  for (const ir::Affine& f : index) {
    int found = 0;
    for (int k = depth + 1; k < static_cast<int>(f.coeffs.size()); ++k) {
      if (f.coeffs[k] == 0) continue;
      if (++found > 1) form = InnerForm::kShared;
      bool dup;
      if (k < 64) {
        dup = ((seen >> k) & 1) != 0;
        seen |= uint64_t{1} << k;
      } else {
        dup = std::find(deep.begin(), deep.end(), k) != deep.end();
        if (!dup) deep.push_back(k);
      }
      if (dup) {
        form = InnerForm::kShared;
        continue;
      }
      if (inner) inner->push_back(k);
    }
  }
  if (inner) std::sort(inner->begin(), inner->end());
  return form;
}

// For a shared form: whether distinct iterations of the inner iterators (at `extents`, one per
// `inner`) reach distinct elements. Sufficient test: every iterator in one dimension only, and in
// each dimension the terms, by increasing |coefficient|, form a mixed radix (each coefficient
// exceeds the span of the smaller terms), as tiling makes them: 8*{i}+{r} with r < 8.
bool injective(const std::vector<ir::Affine>& index, int depth, const std::vector<int>& inner,
               const std::vector<int64_t>& extents) {
  std::vector<int> dims_of(inner.size(), 0);
  for (const ir::Affine& f : index) {
    std::vector<std::pair<int64_t, int64_t>> terms;  // |coefficient|, extent
    for (size_t m = 0; m < inner.size(); ++m) {
      const int64_t c = f.coeff(inner[m]);
      if (c == 0) continue;
      ++dims_of[m];
      terms.push_back({c < 0 ? -c : c, extents[m]});
    }
    std::sort(terms.begin(), terms.end());
    int64_t span = 0;  // largest distance the smaller terms reach
    for (const auto& [c, e] : terms) {
      if (c <= span) return false;
      span += c * (e - 1);
    }
  }
  (void)depth;
  for (int n : dims_of)
    if (n != 1) return false;
  return true;
}

// One statement inside S that touches the buffer, with the scopes enclosing it inside S.
struct Use {
  const ir::Stmt* stmt;
  std::vector<const ir::Node*> scopes;  ///< scopes between S (excluded) and the statement
  bool reads = false;                   ///< the buffer is loaded, or the target of a reduction
  bool writes = false;
  size_t first_access = 0, end_access = 0;  ///< its accesses in the walk's list
};

void load_indices(const ir::Expr& e, const std::string& buf, std::vector<const ir::Access*>& out) {
  if (e.kind == ir::ExprKind::kLoad && e.access.buffer == buf) out.push_back(&e.access);
  for (const auto& a : e.args) load_indices(*a, buf, out);
}

void gather(const std::vector<ir::NodePtr>& body, const std::string& buf,
            std::vector<const ir::Node*>& scopes, std::vector<Use>& uses,
            std::vector<const ir::Access*>& accesses) {
  for (const auto& n : body) {
    if (n->is_scope) {
      scopes.push_back(n.get());
      gather(n->body, buf, scopes, uses, accesses);
      scopes.pop_back();
      continue;
    }
    // Only statements that touch the buffer pay for a Use (and its copy of `scopes`).
    size_t before = accesses.size();
    load_indices(*n->stmt.rhs, buf, accesses);
    bool reads = accesses.size() > before, writes = false;
    if (n->stmt.lhs.buffer == buf) {
      accesses.push_back(&n->stmt.lhs);
      writes = true;
      if (n->stmt.op != ir::Reduce::kNone) reads = true;
    }
    if (reads || writes)
      uses.push_back(Use{&n->stmt, scopes, reads, writes, before, accesses.size()});
  }
}

// Everything apply needs, established by the check.
struct Plan {
  const ir::Node* scope = nullptr;
  int depth = 0;
  const ir::BufferDecl* decl = nullptr;
  std::vector<ir::Affine> index;   ///< the one index every access of the buffer uses
  std::vector<int> inner;          ///< iterators of `index` deeper than `depth`, increasing
  std::vector<int64_t> extents;    ///< temporary dimensions, one per `inner`
  std::vector<std::string> names;  ///< size names of those extents ("" when not one name)
  bool copy_in = true;
  bool copy_out = false;
  /// A scope that only reads the buffer through several indices (C = A A^T reads A[{i},{k}]
  /// and A[{j},{k}]): one plan per distinct index, in order of first appearance, each with its
  /// own temporary; `index` and the fields after it are then unused.
  std::vector<Plan> forms;
  std::vector<Use> uses;  ///< for a plan in `forms`: the statements using its index
};

void complete_plan(const std::vector<Use>& uses, Plan& plan);

// A buffer some of whose elements may hold nothing when a scope starts: neither an input nor
// declared with an initial value.
bool may_be_undefined(const ir::BufferDecl& d) { return d.role != ir::Role::kInput && !d.init; }

// The index's access sites of buffer `buf` in the subtree of node `node`, in order.
std::span<const int> sites_in(const ProgramIndex& index, int node, const std::string& buf) {
  const ProgramIndex::NodeInfo& n = index.node(node);
  const std::span<const int> sites = index.buffer_sites(buf);
  const auto begin = std::lower_bound(sites.begin(), sites.end(), n.site_begin);
  return {begin, std::lower_bound(begin, sites.end(), n.site_end)};
}

// The same for the scope at `path`.
std::span<const int> sites_in(const ProgramIndex& index, const Path& path, const std::string& buf) {
  return sites_in(index, index.find(path), buf);
}

// Whether every access of buffer `buf` in the subtree of the scope at `path` uses one index;
// `first` is that index, or null when there is no access.
bool one_index(const ProgramIndex& index, const Path& path, const std::string& buf,
               const std::vector<ir::Affine>*& first) {
  first = nullptr;
  for (int si : sites_in(index, path, buf)) {
    const std::vector<ir::Affine>& ix = index.sites()[si].access->index;
    if (!first)
      first = &ix;
    else if (ix != *first)
      return false;
  }
  return true;
}

// Whether the copy-in loads only elements that hold a value when the scope starts, for a buffer
// that can hold nothing. The copy-in loads the region: the largest extent of each inner scope
// over the uses. Safe when the first use in program order spans the whole region (it stores all
// of it, and no copy-in is made, or it reads all of it before anything in the scope writes it:
// each element is used only in its own iteration of the inner scopes, all accesses using one
// index), or when the scope only reads the buffer and one use spans the region (the program read
// every element there, as it was on entry). Otherwise the copy-in could load an element the
// scope writes before reading it, or one no use touches, that nothing has written yet (a
// temporary written in part before the scope and in part inside it). `extent(u, m)` is use u's
// extent for inner iterator m.
template <typename Extent>
bool copy_in_loads_defined(int n_uses, bool any_write, int n_inner, Extent extent) {
  if (n_uses == 0) return true;
  thread_local std::vector<int64_t> most;  // the region's extents (the mask asks at every scope)
  most.assign(static_cast<size_t>(n_inner), 0);
  for (int m = 0; m < n_inner; ++m)
    for (int v = 0; v < n_uses; ++v) most[m] = std::max(most[m], extent(v, m));
  auto spans = [&](int u) {
    for (int m = 0; m < n_inner; ++m)
      if (extent(u, m) != most[m]) return false;
    return true;
  };
  if (spans(0)) return true;
  if (any_write) return false;
  for (int u = 1; u < n_uses; ++u)
    if (spans(u)) return true;
  return false;
}

// copy_in_loads_defined over the uses of the full walk.
bool loads_defined(const std::vector<Use>& uses, const Plan& plan) {
  bool any_write = false;
  for (const Use& u : uses) any_write |= u.writes;
  return copy_in_loads_defined(
      static_cast<int>(uses.size()), any_write, static_cast<int>(plan.inner.size()),
      [&](int u, int m) { return uses[u].scopes[plan.inner[m] - plan.depth - 1]->extent; });
}

// copy_in_loads_defined over a ProgramIndex's `sites` of the buffer in the scope, in program
// order, with the inner iterators `inner`. A site stands for its statement's use: the sites of
// one statement lie in the same scopes.
bool loads_defined(const ProgramIndex& index, std::span<const int> sites,
                   std::span<const int> inner) {
  bool any_write = false;
  for (int si : sites) any_write = any_write || index.sites()[si].write;
  return copy_in_loads_defined(
      static_cast<int>(sites.size()), any_write, static_cast<int>(inner.size()),
      [&](int u, int m) { return index.sites()[sites[u]].extents[inner[m]]; });
}

// The distinct indices of `accesses`, in order of first appearance.
std::vector<const std::vector<ir::Affine>*> distinct_indices(
    std::span<const ir::Access* const> accesses) {
  std::vector<const std::vector<ir::Affine>*> out;
  for (const ir::Access* x : accesses)
    if (std::none_of(out.begin(), out.end(), [&](const auto* ix) { return *ix == x->index; }))
      out.push_back(&x->index);
  return out;
}

// make_plan for a scope whose accesses of the buffer use several indices. Legal only when the
// scope just reads the buffer: each index then gets a temporary of its own, as a one-index
// scope would (copying a read-only region is exact whatever the index), and each must pass the
// one-index rule for a buffer that can hold nothing. A scope that writes the buffer is refused:
// a store through one index and a load through another may meet at one element in an order the
// separate copies would not keep.
Legality several_forms(const Action& a, const ProgramIndex* index, Plan& plan,
                       std::vector<Use>* uses, const std::vector<const ir::Access*>& accesses) {
  const Legality irregular{Reason::kIrregularAccess, a.buffer, a.path};
  const Legality dependence{Reason::kDependence, a.buffer, a.path};
  const bool undefined = may_be_undefined(*plan.decl);
  if (!uses) {  // from the index: the mask's check
    const std::span<const int> sites = sites_in(*index, a.path, a.buffer);
    thread_local std::vector<const ir::Access*> xs;
    xs.clear();
    for (int si : sites) {
      if (index->sites()[si].write) return irregular;
      xs.push_back(index->sites()[si].access);
    }
    if (!undefined) return {};
    thread_local std::vector<int> form_sites, inner;
    for (const std::vector<ir::Affine>* ix : distinct_indices(xs)) {
      form_sites.clear();
      for (int si : sites)
        if (index->sites()[si].access->index == *ix) form_sites.push_back(si);
      inner.clear();
      inner_iterators(*ix, plan.depth, &inner);
      if (!loads_defined(*index, form_sites, inner)) return dependence;
    }
    return {};
  }
  for (const Use& u : *uses)
    if (u.writes) return irregular;
  plan.forms.clear();
  for (const std::vector<ir::Affine>* ix : distinct_indices(accesses)) {
    Plan f;
    f.scope = plan.scope;
    f.depth = plan.depth;
    f.decl = plan.decl;
    f.index = *ix;
    inner_iterators(*ix, f.depth, &f.inner);
    for (const Use& u : *uses)
      for (size_t k = u.first_access; k < u.end_access; ++k)
        if (accesses[k]->index == *ix) {
          f.uses.push_back(u);
          break;
        }
    if (undefined && !loads_defined(f.uses, f)) return dependence;
    plan.forms.push_back(std::move(f));
  }
  return {};
}

// The check, and the plan apply follows. With an index and no `uses` asked for, only the
// verdict and `plan.index` are made (from the index).
Legality make_plan(const ir::Program& p, const Action& a, const ProgramIndex* index, Plan& plan,
                   std::vector<Use>* uses) {
  const ir::Node* s = nullptr;
  if (auto l = scope_location(p, a.path, &s, index); !l.ok()) return l;
  plan.scope = s;
  plan.depth = static_cast<int>(a.path.size()) - 1;
  plan.decl = find_decl(p, a.buffer);
  if (!plan.decl) return {Reason::kNoSuchLocation, a.buffer, a.path};
  if (!temporary_scope_annot(s->annot)) return {Reason::kAnnotated, a.buffer, a.path};
  if (any_enclosing_annot(p, a.path, shares_storage)) return {Reason::kAnnotated, a.buffer, a.path};

  const std::vector<ir::Affine>* first = nullptr;
  bool regular = true;
  std::vector<const ir::Access*> accesses;
  if (index && !uses) {
    regular = one_index(*index, a.path, a.buffer, first);
  } else {
    std::vector<const ir::Node*> scopes;
    gather(s->body, a.buffer, scopes, *uses, accesses);
    if (!accesses.empty()) first = &accesses[0]->index;
    for (const ir::Access* x : accesses) regular &= x->index == *first;
  }
  if (!first) return {Reason::kNothingToDo, a.buffer, a.path};
  if (!regular) return several_forms(a, index, plan, uses, accesses);
  const std::vector<ir::Affine>& ix = *first;

  plan.inner.clear();
  if (inner_iterators(ix, plan.depth, &plan.inner) == InnerForm::kShared) {
    // A dimension holds several inner iterators (a tiled index, a sliding window): copying is
    // exact when the scope only reads the buffer; a written buffer must map injectively, which
    // needs the extents of the inner scopes (the full walk).
    if (!uses) {
      // From the index: whether the scope writes the buffer, and the largest extent of each
      // inner scope over the accesses (as complete_plan takes it from the walk).
      bool any_write = false;
      std::vector<int64_t> extents(plan.inner.size(), 0);
      for (int si : sites_in(*index, a.path, a.buffer)) {
        const AccessSite& x = index->sites()[si];
        any_write = any_write || x.write;
        for (size_t m = 0; m < plan.inner.size(); ++m)
          extents[m] = std::max(extents[m], x.extents[plan.inner[m]]);
      }
      if (any_write && !injective(ix, plan.depth, plan.inner, extents))
        return {Reason::kIrregularAccess, a.buffer, a.path};
    } else {
      complete_plan(*uses, plan);
      if (plan.copy_out && !injective(ix, plan.depth, plan.inner, plan.extents))
        return {Reason::kIrregularAccess, a.buffer, a.path};
    }
  }
  if (uses) plan.index = ix;
  if (may_be_undefined(*plan.decl) &&
      !(uses ? loads_defined(*uses, plan)
             : loads_defined(*index, sites_in(*index, a.path, a.buffer), plan.inner)))
    return {Reason::kDependence, a.buffer, a.path};
  return {};
}

// The rest of the plan, for apply: extents of the temporary and which copies it needs.
void complete_plan(const std::vector<Use>& uses, Plan& plan) {
  const int d = plan.depth;
  plan.extents.clear();
  plan.names.clear();
  // Extents: the largest scope at each inner depth holding an access. Every access uses every
  // inner iterator, so each use lies inside a scope at each of those depths.
  for (int k : plan.inner) {
    int64_t ext = 0;
    std::string name;
    bool one_name = true;
    for (const Use& u : uses) {
      const ir::Node* sc = u.scopes[k - d - 1];
      if (ext != 0 && (sc->extent != ext || sc->extent_name != name)) one_name = false;
      if (sc->extent > ext) ext = sc->extent, name = sc->extent_name;
    }
    plan.extents.push_back(ext);
    plan.names.push_back(one_name ? name : "");
  }

  bool any_write = false;
  for (const Use& u : uses) any_write |= u.writes;
  // The copy-in is needed unless the first use in program order stores the whole region without
  // reading it: every later read (all use the one index) then finds what S itself stored, and
  // copying in would read what is about to be overwritten (for a temporary without an initial
  // value, memory never written).
  bool first_covers = false;
  if (!uses.empty() && uses.front().writes && !uses.front().reads) {
    first_covers = true;
    for (size_t m = 0; m < plan.inner.size(); ++m)
      first_covers &= uses.front().scopes[plan.inner[m] - d - 1]->extent == plan.extents[m];
  }
  plan.copy_out = any_write;
  plan.copy_in = !first_covers || plan.decl->role == ir::Role::kInput;
}

// Statements writing `buf` in `nodes` and below them.
int writers_of(std::span<const ir::NodePtr> nodes, const std::string& buf) {
  int n = 0;
  for (const auto& c : nodes)
    n += c->is_scope ? writers_of(c->body, buf) : c->stmt.lhs.buffer == buf;
  return n;
}

// Whether every element an iteration of S touches still holds the buffer's initial value when
// the iteration starts, so that the copy-in may store that value instead of loading it: the
// buffer has one, no statement outside S writes it before S's top-level nest ends (later
// top-level nodes run after every iteration of S), and distinct iterations of S and of the
// scopes around it touch distinct elements (the index is injective over every enclosing
// iterator of extent > 1 and the inner ones; an enclosing scope whose iterator the index does
// not use, a blocked reduction's Ko, revisits the same elements).
bool holds_init(const ir::Program& p, const Path& path, const std::vector<Use>& uses,
                const Plan& plan) {
  if (!plan.decl->init || plan.decl->role == ir::Role::kInput) return false;
  int inside = 0;
  for (const Use& u : uses) inside += u.writes;
  // Writers in later top-level nodes run after every iteration of S (pointwise-conv's bias).
  const std::span<const ir::NodePtr> up_to_s(p.body.data(), static_cast<size_t>(path.front()) + 1);
  if (writers_of(up_to_s, plan.decl->name) != inside) return false;
  std::vector<int> iters;
  std::vector<int64_t> extents;
  for (int k = 0; k <= plan.depth; ++k) {
    const ir::Node* n = node_at(p, Path(path.begin(), path.begin() + k + 1));
    if (!n || !n->is_scope) return false;
    if (n->extent == 1) continue;
    iters.push_back(k);
    extents.push_back(n->extent);
  }
  iters.insert(iters.end(), plan.inner.begin(), plan.inner.end());
  extents.insert(extents.end(), plan.extents.begin(), plan.extents.end());
  return injective(plan.index, -1, iters, extents);
}

// `index` with inner iterator inner[m] moved to depth d+1+m (the copy nest's iterators).
std::vector<ir::Affine> renumbered(const Plan& plan) {
  std::vector<ir::Affine> out;
  for (const ir::Affine& x : plan.index) {
    ir::Affine y;
    y.constant = x.constant;
    y.coeffs.assign(plan.depth + 1 + plan.inner.size(), 0);
    for (int k = 0; k <= plan.depth; ++k) y.coeffs[k] = x.coeff(k);
    for (size_t m = 0; m < plan.inner.size(); ++m)
      y.coeffs[plan.depth + 1 + m] = x.coeff(plan.inner[m]);
    y.normalise();
    out.push_back(std::move(y));
  }
  return out;
}

// The temporary's index: the iterators at `depths`, or [0] for a scalar.
std::vector<ir::Affine> temp_index(const std::vector<int>& depths) {
  if (depths.empty()) return {ir::Affine::constant_of(0)};
  std::vector<ir::Affine> out;
  for (int k : depths) out.push_back(ir::Affine::iter(k));
  return out;
}

// `dst = value` wrapped in one scope per temporary dimension.
ir::NodePtr copy_nest(const Plan& plan, ir::Access dst, ir::ExprPtr value) {
  ir::Stmt st;
  st.lhs = std::move(dst);
  st.rhs = std::move(value);
  ir::NodePtr n = ir::Node::statement(std::move(st));
  for (int m = static_cast<int>(plan.extents.size()) - 1; m >= 0; --m)
    n = ir::Node::scope(plan.extents[m], plan.names[m], ir::Annot::kNone, {n});
  return n;
}

// The temporary of a plan, named `name`.
ir::BufferDecl temporary_decl(const Plan& plan, const std::string& name) {
  ir::BufferDecl decl;
  decl.name = name;
  decl.role = ir::Role::kTemp;
  decl.dtype = plan.decl->dtype;
  decl.shape = plan.extents.empty() ? std::vector<int64_t>{1} : plan.extents;
  decl.shape_names = plan.extents.empty() ? std::vector<std::string>{""} : plan.names;
  return decl;
}

// The copy-in nest of a plan into temporary `tmp`.
ir::NodePtr copy_in_nest(const ir::Program& p, const Path& path, const Plan& plan,
                         const std::string& tmp, const std::vector<Use>& uses) {
  std::vector<int> copy_depths;
  for (size_t m = 0; m < plan.inner.size(); ++m)
    copy_depths.push_back(plan.depth + 1 + static_cast<int>(m));
  const ir::Access tmp_copy{tmp, temp_index(copy_depths), {}};
  const ir::Access buf_copy{plan.decl->name, renumbered(plan), {}};
  return copy_nest(plan, tmp_copy,
                   holds_init(p, path, uses, plan) ? ir::Expr::constant(*plan.decl->init)
                                                   : ir::Expr::load(buf_copy));
}

// apply for a scope that reads the buffer through several indices: one temporary and one
// copy-in per index, in order of first appearance, then the body reading each access's own.
ir::Program apply_forms(const ir::Program& p, const Action& a, Plan& plan) {
  const ir::Node& s = *plan.scope;
  std::vector<ir::NodePtr> body;
  std::vector<ir::Access> tmp_uses;
  ir::Program names;  // p's names and the temporaries' so far, for fresh_buffer_name
  names.sizes = p.sizes;
  names.buffers = p.buffers;
  for (Plan& f : plan.forms) {
    complete_plan(f.uses, f);
    const std::string name = fresh_buffer_name(names, a.buffer + "_t");
    names.buffers.push_back(temporary_decl(f, name));
    body.push_back(copy_in_nest(p, a.path, f, name, f.uses));
    tmp_uses.push_back(ir::Access{name, temp_index(f.inner), {}});
  }
  for (const auto& c : s.body)
    body.push_back(map_accesses(c, [&](const ir::Access& x) -> std::optional<ir::Access> {
      if (x.buffer != a.buffer) return std::nullopt;
      for (size_t k = 0; k < plan.forms.size(); ++k)
        if (plan.forms[k].index == x.index) return tmp_uses[k];
      return std::nullopt;  // unreachable: every access's index has a form
    }));
  ir::Program q = replace_node(p, a.path, {ir::Node::scope_like(s, s.annot, std::move(body))});
  for (size_t k = p.buffers.size(); k < names.buffers.size(); ++k)
    q.buffers.push_back(std::move(names.buffers[k]));
  return q;
}

}  // namespace

Legality check_create_temporary(const ir::Program& p, const Action& a, const Target&,
                                const ProgramIndex* index) {
  Plan plan;
  std::vector<Use> uses;
  return make_plan(p, a, index, plan, index ? nullptr : &uses);
}

Precheck precheck_create_temporary(MaskSummary& sum, const MaskSite& at,
                                   std::span<const int64_t> params) {
  // Asked a row at a time (every buffer at the scope); a buffer past the summary is left to the
  // check. For the others this is the whole check: it reads the scope's annotation and those
  // enclosing it, and the one index every access of the buffer in the scope uses.
  if (at.buffer >= 0) return check_all(params);
  if (!temporary_scope_annot(sum.scope(at.scope).annot) || sum.shared_above(at.scope)) return {};
  const MaskSummary::Uses& u = sum.uses(at.scope);
  Precheck out;
  for (uint64_t regular = u.used & ~u.irregular; regular; regular &= regular - 1) {
    const int b = __builtin_ctzll(regular);
    const InnerForm form = inner_iterators(sum.first_index(b), sum.depth(at.scope), nullptr);
    // A shared form is legal when the scope only reads the buffer (no copy-out), or else when
    // it maps injectively, which needs the extents of the inner scopes: left to the check.
    const bool legal = form == InnerForm::kDistinct || !(u.written >> b & 1);
    // A buffer that can hold nothing: its copy-in must load only values (the order of its
    // uses, from the index's sites in the scope); where it would not, illegal, as the check says.
    const ir::BufferDecl& decl = sum.program().buffers[static_cast<size_t>(b)];
    if (legal && may_be_undefined(decl)) {
      thread_local std::vector<int> inner;
      inner.clear();
      inner_iterators(sum.first_index(b), sum.depth(at.scope), &inner);
      if (!loads_defined(sum.index(), sites_in(sum.index(), sum.scope_node(at.scope), decl.name),
                         inner))
        continue;
    }
    (legal ? out.legal : out.check) |= uint64_t{1} << b;
  }
  // Several indices in a scope that only reads the buffer: one temporary per index, legal; for a
  // buffer that can hold nothing each copy-in's loads are left to the check.
  for (uint64_t several = u.used & u.irregular & ~u.written; several; several &= several - 1) {
    const int b = __builtin_ctzll(several);
    (may_be_undefined(sum.program().buffers[static_cast<size_t>(b)]) ? out.check : out.legal) |=
        uint64_t{1} << b;
  }
  return out;
}

ir::Program apply_create_temporary(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_create_temporary, p, a, t);
  Plan plan;
  std::vector<Use> uses;
  make_plan(p, a, nullptr, plan, &uses);
  if (!plan.forms.empty()) return apply_forms(p, a, plan);
  complete_plan(uses, plan);
  const std::string tmp = fresh_buffer_name(p, a.buffer + "_t");
  const ir::Node& s = *plan.scope;

  std::vector<int> copy_depths;
  for (size_t m = 0; m < plan.inner.size(); ++m)
    copy_depths.push_back(plan.depth + 1 + static_cast<int>(m));
  const ir::Access tmp_copy{tmp, temp_index(copy_depths), {}};
  const ir::Access buf_copy{a.buffer, renumbered(plan), {}};
  const ir::Access tmp_use{tmp, temp_index(plan.inner), {}};

  std::vector<ir::NodePtr> body;
  if (plan.copy_in) body.push_back(copy_in_nest(p, a.path, plan, tmp, uses));
  for (const auto& c : s.body)
    body.push_back(map_accesses(c, [&](const ir::Access& x) -> std::optional<ir::Access> {
      if (x.buffer != a.buffer) return std::nullopt;
      return tmp_use;
    }));
  if (plan.copy_out) body.push_back(copy_nest(plan, buf_copy, ir::Expr::load(tmp_copy)));

  ir::Program q = replace_node(p, a.path, {ir::Node::scope_like(s, s.annot, std::move(body))});
  q.buffers.push_back(temporary_decl(plan, tmp));
  return q;
}

}  // namespace perfdojo::transforms
