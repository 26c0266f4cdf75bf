#include "transforms/move_statement.h"

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {

Legality check_move_statement(const ir::Program& p, const Action& a, const Target&,
                              const ProgramIndex* index) {
  if (index && !a.path.empty()) {
    // The node and its next sibling straight from the index: their sites are its two slices.
    const int n = index->find(a.path);
    if (n < 0) return {Reason::kNoSuchLocation, "", a.path};
    const int m = index->node(n).next;
    if (m < 0) return {Reason::kNoNextSibling, "", a.path};
    const DirList dirs(static_cast<int>(a.path.size()) - 1, Dir::kEq);
    const auto& x = index->node(n);
    const auto& y = index->node(m);
    if (auto b = find_dependence(index->sites(x.site_begin, x.site_end),
                                 index->sites(y.site_begin, y.site_end), dirs))
      return {Reason::kDependence, *b, a.path};
    return {};
  }
  const ir::Node* n = node_at(p, a.path);
  if (!n) return {Reason::kNoSuchLocation, "", a.path};
  Path next = a.path;
  ++next.back();
  const ir::Node* m = node_at(p, next);
  if (!m) return {Reason::kNoNextSibling, "", a.path};
  int d = static_cast<int>(a.path.size()) - 1;
  (void)n;
  const Path parent(a.path.begin(), a.path.end() - 1);
  const int i = a.path.back();
  const ChildSites sa(index, p, parent, i, i + 1);
  const ChildSites sb(index, p, parent, i + 1, i + 2);
  const DirList dirs(d, Dir::kEq);
  if (auto b = find_dependence(sa.sites(), sb.sites(), dirs))
    return {Reason::kDependence, *b, a.path};
  return {};
}

Precheck precheck_move_statement(MaskSummary& sum, const MaskSite& at,
                                 std::span<const int64_t> params) {
  if (sum.index().node(at.node).next < 0) return {};
  return check_all(params);
}

ir::Program apply_move_statement(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_move_statement, p, a, t);
  return replace_in_parent(p, a.path, [](const std::vector<ir::NodePtr>& list, int i) {
    std::vector<ir::NodePtr> out = list;
    std::swap(out[i], out[i + 1]);
    return out;
  });
}

}  // namespace perfdojo::transforms
