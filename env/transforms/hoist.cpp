#include "transforms/hoist.h"

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// The buffers a subtree reads and writes.
void buffers_of(const ir::Node& n, BufferNames& reads, BufferNames& writes) {
  if (!n.is_scope) {
    writes.push_back(&n.stmt.lhs.buffer);
    if (n.stmt.op != ir::Reduce::kNone) reads.push_back(&n.stmt.lhs.buffer);
    loaded_buffers(*n.stmt.rhs, reads);
    return;
  }
  for (const auto& c : n.body) buffers_of(*c, reads, writes);
}

bool uses_depth_or_deeper(const ir::Access& x, int d) {
  for (const auto& ix : x.index)
    if (ix.max_depth() >= d) return true;
  return false;
}

bool expr_uses_depth_or_deeper(const ir::Expr& e, int d) {
  if ((e.kind == ir::ExprKind::kLoad || e.kind == ir::ExprKind::kIndex) &&
      uses_depth_or_deeper(e.access, d))
    return true;
  for (const auto& a : e.args)
    if (expr_uses_depth_or_deeper(*a, d)) return true;
  return false;
}

}  // namespace

Legality check_hoist(const ir::Program& p, const Action& a, const Target&, const ProgramIndex*) {
  const ir::Node* n = node_at(p, a.path);
  if (!n) return {Reason::kNoSuchLocation, "", a.path};
  if (n->is_scope || a.path.size() < 2) return {Reason::kBadParameter, "", a.path};
  const Path parent(a.path.begin(), a.path.end() - 1);
  const ir::Node* s = node_at(p, parent);
  const int i = a.path.back();
  const int last = static_cast<int>(s->body.size()) - 1;
  if (i != 0 && i != last) return {Reason::kBadParameter, "", a.path};

  const ir::Stmt& st = n->stmt;
  const int d = static_cast<int>(parent.size()) - 1;
  if (st.op != ir::Reduce::kNone) return {Reason::kNotInvariant, st.lhs.buffer, a.path};
  if (uses_depth_or_deeper(st.lhs, d) || expr_uses_depth_or_deeper(*st.rhs, d))
    return {Reason::kNotInvariant, st.lhs.buffer, a.path};
  thread_local BufferNames reads, other_reads, other_writes;  // storage kept between checks
  reads.clear();
  loaded_buffers(*st.rhs, reads);
  if (holds_name(reads, st.lhs.buffer)) return {Reason::kDependence, st.lhs.buffer, a.path};

  other_reads.clear();
  other_writes.clear();
  for (int j = 0; j <= last; ++j)
    if (j != i) buffers_of(*s->body[j], other_reads, other_writes);
  if (holds_name(other_writes, st.lhs.buffer)) return {Reason::kDependence, st.lhs.buffer, a.path};
  if (const std::string* b = first_common_name(reads, other_writes))
    return {Reason::kDependence, *b, a.path};
  if (i != 0 && holds_name(other_reads, st.lhs.buffer))
    return {Reason::kDependence, st.lhs.buffer, a.path};
  return {};
}

Precheck precheck_hoist(MaskSummary& sum, const MaskSite& at, std::span<const int64_t> params) {
  // A plain store, first or last in a scope, none of whose accesses uses that scope's iterator
  // or a deeper one.
  const ProgramIndex& ix = sum.index();
  const ProgramIndex::NodeInfo& n = ix.node(at.node);
  if (n.node->is_scope || n.parent < 0 || n.node->stmt.op != ir::Reduce::kNone) return {};
  if (ix.node(n.parent).first_child != at.node && n.next >= 0) return {};
  const int d = static_cast<int>(ix.path(at.node).size()) - 2;
  for (const AccessSite& x : ix.sites(n.site_begin, n.site_end))
    for (const ir::Affine& f : x.access->index)
      if (f.max_depth() >= d) return {};
  return check_all(params);
}

ir::Program apply_hoist(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_hoist, p, a, t);
  const Path parent(a.path.begin(), a.path.end() - 1);
  const ir::Node* s = node_at(p, parent);
  const int i = a.path.back();
  const ir::NodePtr moved = s->body[i];
  if (s->body.size() == 1) return replace_node(p, parent, {moved});
  std::vector<ir::NodePtr> rest = s->body;
  rest.erase(rest.begin() + i);
  ir::NodePtr shrunk = ir::Node::scope_like(*s, s->annot, std::move(rest));
  if (i == 0) return replace_node(p, parent, {moved, shrunk});
  return replace_node(p, parent, {shrunk, moved});
}

}  // namespace perfdojo::transforms
