#include "transforms/swap_scopes.h"

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {

Legality check_swap_scopes(const ir::Program& p, const Action& a, const Target&,
                           const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = scope_location(p, a.path, &s, index); !l.ok()) return l;
  if (s->body.size() != 1 || !s->body[0]->is_scope)
    return {Reason::kNotPerfectlyNested, "", a.path};
  const ir::Node& t = *s->body[0];
  // Vector scopes must stay innermost; other annotations travel with their scope.
  if (s->annot == ir::Annot::kVector || t.annot == ir::Annot::kVector)
    return {Reason::kAnnotated, "", a.path};
  int d = static_cast<int>(a.path.size()) - 1;
  const Path inner = child_path(a.path, 0);
  const ChildSites body(index, p, inner, 0, static_cast<int>(t.body.size()));
  const auto sites = body.sites();
  const DirList dirs = eq_dirs(d, {Dir::kLt, Dir::kGt});
  if (auto b = find_dependence(sites, sites, dirs)) return {Reason::kDependence, *b, a.path};
  // A parallel scope must stay free of carried dependences at its new depth.
  if (t.annot == ir::Annot::kParallel) {  // moves out: it must not carry any dependence
    const DirList out_dirs = eq_dirs(d, {Dir::kAny, Dir::kLt});
    if (auto b = find_dependence(sites, sites, out_dirs)) return {Reason::kDependence, *b, a.path};
  }
  if (s->annot == ir::Annot::kParallel) {  // moves in: none carried within one outer iteration
    const DirList in_dirs = eq_dirs(d, {Dir::kLt, Dir::kEq});
    if (auto b = find_dependence(sites, sites, in_dirs)) return {Reason::kDependence, *b, a.path};
  }
  return {};
}

Precheck precheck_swap_scopes(MaskSummary& sum, const MaskSite& at,
                              std::span<const int64_t> params) {
  // Perfectly nested, neither scope vectorised.
  const ir::Node& s = sum.scope(at.scope);
  if (s.body.size() != 1 || !s.body[0]->is_scope || s.annot == ir::Annot::kVector ||
      s.body[0]->annot == ir::Annot::kVector)
    return {};
  return check_all(params);
}

ir::Program apply_swap_scopes(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_swap_scopes, p, a, t);
  const ir::Node* s = node_at(p, a.path);
  const ir::Node& child = *s->body[0];
  int d = static_cast<int>(a.path.size()) - 1;
  auto swap = [d](const ir::Affine& x) {
    ir::Affine y = x;
    if (static_cast<int>(y.coeffs.size()) < d + 2) y.coeffs.resize(d + 2, 0);
    std::swap(y.coeffs[d], y.coeffs[d + 1]);
    return y;
  };
  std::vector<ir::NodePtr> body;
  for (const auto& c : child.body) body.push_back(map_indices(c, swap));
  auto inner = ir::Node::scope(s->extent, s->extent_name, s->annot, std::move(body), s->loc);
  return replace_node(
      p, a.path,
      {ir::Node::scope(child.extent, child.extent_name, child.annot, {inner}, child.loc)});
}

}  // namespace perfdojo::transforms
