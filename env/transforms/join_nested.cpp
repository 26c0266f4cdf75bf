#include "transforms/join_nested.h"

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

bool perfect_pair(const ir::Node* s) { return s->body.size() == 1 && s->body[0]->is_scope; }

}  // namespace

Legality check_join_nested(const ir::Program& p, const Action& a, const Target&,
                           const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = scope_location(p, a.path, &s, index); !l.ok()) return l;
  if (!perfect_pair(s)) return {Reason::kNotPerfectlyNested, "", a.path};
  const ir::Node& t = *s->body[0];
  if (s->annot != ir::Annot::kNone || t.annot != ir::Annot::kNone)
    return {Reason::kAnnotated, "", a.path};
  int d = static_cast<int>(a.path.size()) - 1;
  const Path inner = child_path(a.path, 0);
  const ChildSites body(index, p, inner, 0, static_cast<int>(t.body.size()));
  for (const auto& site : body.sites())
    for (const auto& ix : site.access->index)
      if (ix.coeff(d) != ix.coeff(d + 1) * t.extent)
        return {Reason::kIndexNotMergeable, site.access->buffer, a.path};
  return {};
}

Precheck precheck_join_nested(MaskSummary& sum, const MaskSite& at,
                              std::span<const int64_t> params) {
  // Perfectly nested, both scopes plain.
  const ir::Node& s = sum.scope(at.scope);
  if (s.body.size() != 1 || !s.body[0]->is_scope || s.annot != ir::Annot::kNone ||
      s.body[0]->annot != ir::Annot::kNone)
    return {};
  return check_all(params);
}

ir::Program apply_join_nested(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_join_nested, p, a, t);
  const ir::Node* s = node_at(p, a.path);
  const ir::Node& inner = *s->body[0];
  int d = static_cast<int>(a.path.size()) - 1;
  auto merge = [d](const ir::Affine& x) {
    ir::Affine y;
    y.constant = x.constant;
    int n = static_cast<int>(x.coeffs.size());
    y.coeffs.assign(std::max(n, d + 1), 0);
    for (int k = 0; k < n; ++k) {
      if (k < d)
        y.coeffs[k] = x.coeffs[k];
      else if (k == d + 1)
        y.coeffs[d] = x.coeffs[k];
      else if (k > d + 1)
        y.coeffs[k - 1] = x.coeffs[k];
    }
    y.normalise();
    return y;
  };
  std::vector<ir::NodePtr> body;
  for (const auto& c : inner.body) body.push_back(map_indices(c, merge));
  return replace_node(
      p, a.path,
      {ir::Node::scope(s->extent * inner.extent, "", ir::Annot::kNone, std::move(body), s->loc)});
}

}  // namespace perfdojo::transforms
