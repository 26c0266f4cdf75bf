#include "transforms/parallelize.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/liveness.h"
#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// Whether an access of `buffer` lies outside the scope at `path`.
bool used_outside(const ir::Program& p, const Path& path, const std::string& buffer) {
  const std::vector<ir::NodePtr>* body = &p.body;
  for (const int i : path) {
    for (int k = 0; k < static_cast<int>(body->size()); ++k)
      if (k != i && uses_buffer((*body)[k], buffer)) return true;
    body = &(*body)[i]->body;
  }
  return false;
}

// The temporaries parallelize gives each iteration a copy of (ir::iteration_private_buffers),
// unless the copies together would pass kMaxPrivateElements.
constexpr int64_t kMaxPrivateElements = int64_t{1} << 24;
std::vector<std::string> privatised(const ir::Program& p, const Path& path, const ir::Node& s) {
  std::vector<std::string> out;
  for (std::string& b : ir::iteration_private_buffers(p, path))
    if (p.find_buffer(b)->elements() * s.extent <= kMaxPrivateElements) out.push_back(std::move(b));
  return out;
}

}  // namespace

Legality check_parallelize(const ir::Program& p, const Action& a, const Target& t,
                           const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = scope_location(p, a.path, &s, index); !l.ok()) return l;
  if (!t.parallel) return {Reason::kUnsupportedByTarget, "", a.path};
  if (s->annot != ir::Annot::kNone) return {Reason::kAnnotated, "", a.path};
  if (s->extent < 2) return {Reason::kNothingToDo, "", a.path};
  if (any_enclosing_annot(p, a.path, [](ir::Annot x) { return x == ir::Annot::kParallel; }))
    return {Reason::kNestedParallel, "", a.path};
  if (parallel_scopes(s->body) > 0) return {Reason::kNestedParallel, "", a.path};
  int d = static_cast<int>(a.path.size()) - 1;
  const ChildSites body(index, p, a.path, 0, static_cast<int>(s->body.size()));
  // Temporaries each iteration writes wholly before reading (a GEMM's packed blocks, its
  // register tile) carry nothing between iterations: apply gives every iteration its own copy,
  // so their accesses order nothing.
  const std::vector<std::string> own = privatised(p, a.path, *s);
  std::vector<AccessSite> shared;
  std::span<const AccessSite> sites = body.sites();
  if (!own.empty()) {
    for (const AccessSite& site : sites)
      if (!std::binary_search(own.begin(), own.end(), site.access->buffer)) shared.push_back(site);
    sites = shared;
  }
  const DirList dirs = eq_dirs(d, {Dir::kLt});
  if (auto b = find_dependence(sites, sites, dirs)) return {Reason::kDependence, *b, a.path};
  return {};
}

Precheck precheck_parallelize(MaskSummary& sum, const MaskSite& at,
                              std::span<const int64_t> params) {
  // A plain scope of more than one iteration, with no :par scope around or inside it.
  const ir::Node& s = sum.scope(at.scope);
  if (s.annot != ir::Annot::kNone || s.extent <= 1 || sum.near_parallel(at.scope)) return {};
  return check_all(params);
}

ir::Program apply_parallelize(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_parallelize, p, a, t);
  const ir::Node* s = node_at(p, a.path);
  const std::vector<std::string> own = privatised(p, a.path, *s);
  ir::NodePtr par = ir::Node::scope_like(*s, ir::Annot::kParallel, s->body);
  if (own.empty()) return replace_node(p, a.path, {par});
  // Each private temporary gets a copy per iteration: a first dimension, the scope's iterator.
  // One used only inside the scope gains the dimension itself (the code generator keeps one
  // slice per thread, ir::iteration_slices); one used elsewhere too keeps its name there, the
  // scope's accesses go to a new buffer with the dimension, and a copy-out after the scope gives
  // it what the last iteration wrote, as the sequential loop leaves it.
  const int d = static_cast<int>(a.path.size()) - 1;
  const ir::Affine mine = ir::Affine::iter(d);
  ir::Program q = p;
  std::map<std::string, std::string> copy_of;  // private temporary -> its per-iteration buffer
  std::vector<ir::NodePtr> after;              // the copy-outs
  for (const std::string& name : own) {
    const ir::BufferDecl b = *p.find_buffer(name);
    ir::BufferDecl per = b;
    per.shape_names.resize(per.shape.size());
    per.shape.insert(per.shape.begin(), s->extent);
    per.shape_names.insert(per.shape_names.begin(), s->extent_name);
    if (!used_outside(p, a.path, name)) {
      copy_of[name] = name;
      for (ir::BufferDecl& x : q.buffers)
        if (x.name == name) x = per;
      continue;
    }
    per.name = fresh_buffer_name(q, name + "_p");
    per.init.reset();
    copy_of[name] = per.name;
    q.buffers.push_back(per);
    // b[{d}, ...] = per[E - 1, {d}, ...] over b's shape, beside the scope.
    ir::Access to{name, {}, s->loc},
        from{per.name, {ir::Affine::constant_of(s->extent - 1)}, s->loc};
    for (size_t k = 0; k < b.shape.size(); ++k) {
      to.index.push_back(ir::Affine::iter(d + static_cast<int>(k)));
      from.index.push_back(ir::Affine::iter(d + static_cast<int>(k)));
    }
    ir::Stmt st;
    st.lhs = to;
    st.rhs = ir::Expr::load(from);
    st.loc = s->loc;
    ir::NodePtr nest = ir::Node::statement(std::move(st));
    for (size_t k = b.shape.size(); k-- > 0;)
      nest = ir::Node::scope(b.shape[k], k < b.shape_names.size() ? b.shape_names[k] : "",
                             ir::Annot::kNone, {nest}, s->loc);
    after.push_back(nest);
  }
  par = map_accesses(par, [&](const ir::Access& x) -> std::optional<ir::Access> {
    auto it = copy_of.find(x.buffer);
    if (it == copy_of.end()) return std::nullopt;
    ir::Access y = x;
    y.buffer = it->second;
    y.index.insert(y.index.begin(), mine);
    return y;
  });
  std::vector<ir::NodePtr> nodes = {par};
  nodes.insert(nodes.end(), after.begin(), after.end());
  return replace_node(q, a.path, std::move(nodes));
}

}  // namespace perfdojo::transforms
