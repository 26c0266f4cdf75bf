#include "transforms/split_scope.h"

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {

Legality check_split_scope(const ir::Program& p, const Action& a, const Target&,
                           const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = scope_location(p, a.path, &s, index); !l.ok()) return l;
  if (s->body.size() < 2) return {Reason::kNothingToDo, "", a.path};
  if (a.param < 1 || a.param >= static_cast<int64_t>(s->body.size()))
    return {Reason::kBadParameter, "", a.path};
  int d = static_cast<int>(a.path.size()) - 1;
  const int n = static_cast<int>(s->body.size()), i = static_cast<int>(a.param);
  const ChildSites first(index, p, a.path, 0, i);
  const ChildSites second(index, p, a.path, i, n);
  // Before fission the tail of iteration y ran before the head of iteration x > y.
  const DirList dirs = eq_dirs(d, {Dir::kGt});
  if (auto b = find_dependence(first.sites(), second.sites(), dirs))
    return {Reason::kDependence, *b, a.path};
  return {};
}

Precheck precheck_split_scope(MaskSummary& sum, const MaskSite& at,
                              std::span<const int64_t> params) {
  const auto children = static_cast<int64_t>(sum.scope(at.scope).body.size());
  Precheck out;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i] >= 1 && params[i] < children) out.check |= uint64_t{1} << i;
  return out;
}

ir::Program apply_split_scope(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_split_scope, p, a, t);
  const ir::Node* s = node_at(p, a.path);
  std::vector<ir::NodePtr> head(s->body.begin(), s->body.begin() + a.param);
  std::vector<ir::NodePtr> tail(s->body.begin() + a.param, s->body.end());
  return replace_node(p, a.path,
                      {ir::Node::scope_like(*s, s->annot, std::move(head)),
                       ir::Node::scope_like(*s, s->annot, std::move(tail))});
}

}  // namespace perfdojo::transforms
