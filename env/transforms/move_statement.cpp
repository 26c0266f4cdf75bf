#include "transforms/move_statement.h"

#include "transforms/analysis.h"

namespace perfdojo::transforms {

Legality check_move_statement(const ir::Program& p, const Action& a, const Target&) {
  const ir::Node* n = node_at(p, a.path);
  if (!n) return {Reason::kNoSuchLocation, "", a.path};
  Path next = a.path;
  ++next.back();
  const ir::Node* m = node_at(p, next);
  if (!m) return {Reason::kNoNextSibling, "", a.path};
  int d = static_cast<int>(a.path.size()) - 1;
  auto outer = enclosing_extents(p, a.path);
  (void)n;
  const std::vector<ir::NodePtr>* list = &p.body;
  for (size_t k = 0; k + 1 < a.path.size(); ++k) list = &(*list)[a.path[k]]->body;
  auto sa = collect_accesses((*list)[a.path.back()], outer);
  auto sb = collect_accesses((*list)[a.path.back() + 1], outer);
  std::vector<Dir> dirs(d, Dir::kEq);
  if (auto b = find_dependence(sa, sb, dirs)) return {Reason::kDependence, *b, a.path};
  return {};
}

ir::Program apply_move_statement(const ir::Program& p, const Action& a, const Target&) {
  return replace_in_parent(p, a.path, [](const std::vector<ir::NodePtr>& list, int i) {
    std::vector<ir::NodePtr> out = list;
    std::swap(out[i], out[i + 1]);
    return out;
  });
}

}  // namespace perfdojo::transforms
