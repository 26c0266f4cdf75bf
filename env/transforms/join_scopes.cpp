#include "transforms/join_scopes.h"

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {

Legality check_join_scopes(const ir::Program& p, const Action& a, const Target&,
                           const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = scope_location(p, a.path, &s, index); !l.ok()) return l;
  Path next = a.path;
  ++next.back();
  const ir::Node* s2 = node_at(p, next);
  if (!s2 || !s2->is_scope) return {Reason::kNoNextSibling, "", a.path};
  if (s->extent != s2->extent) return {Reason::kExtentMismatch, "", a.path};
  if (s->annot != s2->annot) return {Reason::kAnnotated, "", a.path};
  int d = static_cast<int>(a.path.size()) - 1;
  const ChildSites first(index, p, a.path, 0, static_cast<int>(s->body.size()));
  const ChildSites second(index, p, next, 0, static_cast<int>(s2->body.size()));
  // After fusion, iteration y of the second runs before iteration x > y of the first.
  DirList dirs = eq_dirs(d, {Dir::kGt});
  if (auto b = find_dependence(first.sites(), second.sites(), dirs))
    return {Reason::kDependence, *b, a.path};
  // Two parallel scopes fuse into one parallel scope: it must not carry a dependence from the
  // first body to the second either (iteration x of the first feeding iteration y > x).
  if (s->annot == ir::Annot::kParallel) {
    dirs.back() = Dir::kLt;
    if (auto b = find_dependence(first.sites(), second.sites(), dirs))
      return {Reason::kDependence, *b, a.path};
  }
  return {};
}

Precheck precheck_join_scopes(MaskSummary& sum, const MaskSite& at,
                              std::span<const int64_t> params) {
  // The next sibling is a scope of the same extent and annotation.
  const ProgramIndex& ix = sum.index();
  const int next = ix.node(at.node).next;
  if (next < 0) return {};
  const ir::Node& s = sum.scope(at.scope);
  const ir::Node& t = *ix.node(next).node;
  if (!t.is_scope || t.extent != s.extent || t.annot != s.annot) return {};
  return check_all(params);
}

ir::Program apply_join_scopes(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_join_scopes, p, a, t);
  return replace_in_parent(p, a.path, [](const std::vector<ir::NodePtr>& list, int i) {
    const ir::Node& s = *list[i];
    const ir::Node& s2 = *list[i + 1];
    std::vector<ir::NodePtr> body = s.body;
    body.insert(body.end(), s2.body.begin(), s2.body.end());
    std::vector<ir::NodePtr> out(list.begin(), list.begin() + i);
    out.push_back(ir::Node::scope_like(s, s.annot, std::move(body)));
    out.insert(out.end(), list.begin() + i + 2, list.end());
    return out;
  });
}

}  // namespace perfdojo::transforms
