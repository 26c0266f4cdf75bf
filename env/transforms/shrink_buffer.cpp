#include "transforms/shrink_buffer.h"

#include <algorithm>
#include <forward_list>

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// An access of the buffer and the path of its statement.
struct Site {
  const ir::Access* access;
  std::span<const int> path;
};

// The paths the sites point to, when there is no index to hold them.
struct Sites {
  std::vector<Site> sites;
  std::forward_list<Path> paths;
};

void loads(const ir::Expr& e, const std::string& buf, std::span<const int> path,
           std::vector<Site>& out) {
  if (e.kind == ir::ExprKind::kLoad && e.access.buffer == buf) out.push_back({&e.access, path});
  for (const auto& a : e.args) loads(*a, buf, path, out);
}

void gather(const std::vector<ir::NodePtr>& body, const std::string& buf, Path& path, Sites& out) {
  for (int i = 0; i < static_cast<int>(body.size()); ++i) {
    path.push_back(i);
    const ir::Node& n = *body[i];
    if (n.is_scope) {
      gather(n.body, buf, path, out);
    } else if (uses_buffer(body[i], buf)) {
      const std::span<const int> at = out.paths.emplace_front(path);
      if (n.stmt.lhs.buffer == buf) out.sites.push_back({&n.stmt.lhs, at});
      loads(*n.stmt.rhs, buf, at, out.sites);
    }
    path.pop_back();
  }
}

// Every access of `buf` in the program, in collect_accesses order.
void gather(const ir::Program& p, const ProgramIndex* index, const std::string& buf, Sites& out) {
  if (!index) {
    Path cur;
    gather(p.body, buf, cur, out);
    return;
  }
  for (int s : index->buffer_sites(buf))
    out.sites.push_back({index->sites()[s].access, index->path(index->site_node(s))});
}

// Whether `f` is the iterator {k}: ir::Affine::iter(k) == f, without building one.
bool is_iter(const ir::Affine& f, int k) {
  if (f.constant != 0 || static_cast<int>(f.coeffs.size()) != k + 1 || f.coeffs[k] != 1)
    return false;
  for (int j = 0; j < k; ++j)
    if (f.coeffs[j] != 0) return false;
  return true;
}

struct Plan {
  const ir::BufferDecl* decl = nullptr;
  Path scope;  ///< path of S
  int depth = 0;
};

Legality make_plan(const ir::Program& p, const Action& a, const ProgramIndex* index, Plan& plan) {
  plan.decl = find_decl(p, a.buffer);
  if (!plan.decl) return {Reason::kNoSuchLocation, a.buffer, {}};
  if (plan.decl->role != ir::Role::kTemp) return {Reason::kNotATemporary, a.buffer, {}};
  const int rank = static_cast<int>(plan.decl->shape.size());
  if (a.param < 0 || a.param >= rank) return {Reason::kBadParameter, a.buffer, {}};
  const auto dim = static_cast<size_t>(a.param);

  thread_local Sites all_sites;  // storage kept between checks
  all_sites.sites.clear();
  all_sites.paths.clear();
  gather(p, index, a.buffer, all_sites);
  const std::vector<Site>& sites = all_sites.sites;
  if (sites.empty()) return {Reason::kNothingToDo, a.buffer, {}};
  const int k = sites[0].access->index[dim].max_depth();
  if (k < 0) return {Reason::kIrregularAccess, a.buffer, {}};
  plan.depth = k;
  plan.scope.assign(sites[0].path.begin(), sites[0].path.begin() + k + 1);
  for (const Site& s : sites) {
    const auto& ix = s.access->index;
    if (!is_iter(ix[dim], k))
      return {Reason::kIrregularAccess, a.buffer, Path(s.path.begin(), s.path.end())};
    for (size_t m = 0; m < ix.size(); ++m)
      if (m != dim && ix[m].coeff(k) != 0)
        return {Reason::kIrregularAccess, a.buffer, Path(s.path.begin(), s.path.end())};
    if (!std::equal(plan.scope.begin(), plan.scope.end(), s.path.begin()))
      return {Reason::kIrregularAccess, a.buffer, Path(s.path.begin(), s.path.end())};
  }

  const ir::Node* s = node_at(p, plan.scope);
  if (s->annot != ir::Annot::kNone && s->annot != ir::Annot::kUnroll)
    return {Reason::kAnnotated, a.buffer, plan.scope};
  if (plan.decl->init && any_enclosing_annot(p, plan.scope, shares_storage))
    return {Reason::kAnnotated, a.buffer, plan.scope};

  // A value must not flow from one execution of S to a later one: no element may be touched
  // (one of the two touches a write) under two different iterations of S's enclosing scopes.
  // Every access of the buffer lies in S, so its sites in S are all its sites.
  const ChildSites all(index, p, plan.scope, 0,
                       static_cast<int>(s->body.size()));  // owns `mine`'s extents
  thread_local std::vector<AccessSite> mine;
  mine.clear();
  for (const auto& x : all.sites())
    if (x.access->buffer == a.buffer) mine.push_back(x);
  for (int j = 0; j < k; ++j) {
    const DirList dirs = eq_dirs(j, {Dir::kLt});
    if (auto b = find_dependence(mine, mine, dirs)) return {Reason::kDependence, *b, plan.scope};
  }
  return {};
}

}  // namespace

Legality check_shrink_buffer(const ir::Program& p, const Action& a, const Target&,
                             const ProgramIndex* index) {
  Plan plan;
  return make_plan(p, a, index, plan);
}

Precheck precheck_shrink_buffer(MaskSummary& sum, const MaskSite& at,
                                std::span<const int64_t> params) {
  if (!sum.summarised(at.buffer)) return check_all(params);
  const ir::BufferDecl& d = sum.program().buffers[at.buffer];
  if (d.role != ir::Role::kTemp) return {};
  // The dimension must be one same iterator {k} in every access.
  const std::vector<bool>& single = sum.single_iterator_dims(at.buffer);
  Precheck out;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i] >= 0 && params[i] < static_cast<int64_t>(d.shape.size()) && single[params[i]])
      out.check |= uint64_t{1} << i;
  return out;
}

ir::Program apply_shrink_buffer(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_shrink_buffer, p, a, t);
  Plan plan;
  make_plan(p, a, nullptr, plan);
  const auto dim = static_cast<size_t>(a.param);
  ir::BufferDecl decl = *plan.decl;
  decl.shape_names.resize(decl.shape.size());
  decl.shape.erase(decl.shape.begin() + a.param);
  decl.shape_names.erase(decl.shape_names.begin() + a.param);
  if (decl.shape.empty()) decl.shape = {1}, decl.shape_names = {""};
  const std::optional<double> init = decl.init;
  decl.init.reset();

  ir::Program q = p;
  for (auto& b : q.buffers)
    if (b.name == a.buffer) b = decl;
  for (auto& n : q.body) {
    if (!uses_buffer(n, a.buffer)) continue;
    n = map_accesses(n, [&](const ir::Access& x) -> std::optional<ir::Access> {
      if (x.buffer != a.buffer) return std::nullopt;
      ir::Access y = x;
      y.index.erase(y.index.begin() + static_cast<long>(dim));
      if (y.index.empty()) y.index = {ir::Affine::constant_of(0)};
      return y;
    });
  }
  if (!init) return q;

  // Re-establish the initial value over the whole remaining slice at each iteration of S.
  const bool scalar = plan.decl->shape.size() == 1;
  ir::Stmt st;
  st.lhs.buffer = a.buffer;
  const int r = static_cast<int>(decl.shape.size());
  if (scalar) {
    st.lhs.index = {ir::Affine::constant_of(0)};
  } else {
    for (int m = 0; m < r; ++m) st.lhs.index.push_back(ir::Affine::iter(plan.depth + 1 + m));
  }
  st.rhs = ir::Expr::constant(*init);
  ir::NodePtr nest = ir::Node::statement(std::move(st));
  if (!scalar)
    for (int m = r - 1; m >= 0; --m)
      nest = ir::Node::scope(decl.shape[m], decl.shape_names[m], ir::Annot::kNone, {nest});
  const ir::Node* s = node_at(q, plan.scope);
  std::vector<ir::NodePtr> body = {nest};
  body.insert(body.end(), s->body.begin(), s->body.end());
  return replace_node(q, plan.scope, {ir::Node::scope_like(*s, s->annot, std::move(body))});
}

}  // namespace perfdojo::transforms
