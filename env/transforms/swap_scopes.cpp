#include "transforms/swap_scopes.h"

#include <algorithm>
#include <optional>

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// Bounds after interchanging the scope at depth d (iterator i, rectangular) with its bounded
// child (iterator j), Fourier-Motzkin style: each bound of j that uses i with coefficient +-1
// becomes a bound of i in terms of j, and one that does not use i stays on j. After the swap j is
// {d} and i {d+1}. {outer, inner} bounds; nullopt when a coefficient of i is not +-1 or two
// constraints bound i on one side (one affine bound a side).
struct Interchanged {
  ir::ScopeBounds outer, inner;
};

std::optional<Interchanged> interchanged_bounds(const ir::ScopeBounds& child, int d) {
  Interchanged out;
  // g: x without its {d} term; j: the iterator {d} after the swap.
  auto rest = [d](const ir::Affine& x) {
    ir::Affine g = x;
    if (static_cast<int>(g.coeffs.size()) > d) g.coeffs[d] = 0;
    g.normalise();
    return g;
  };
  // j_coeff * {d} + g_scale * g + k, as an affine over the post-swap depths.
  auto make = [d](int64_t j_coeff, const ir::Affine& g, int64_t g_scale, int64_t k) {
    ir::Affine y;
    y.coeffs.assign(std::max<size_t>(g.coeffs.size(), d + 1), 0);
    for (size_t q = 0; q < g.coeffs.size(); ++q) y.coeffs[q] = g_scale * g.coeffs[q];
    y.coeffs[d] += j_coeff;
    y.constant = g_scale * g.constant + k;
    y.normalise();
    return y;
  };
  auto set = [](std::optional<ir::Affine>& side, ir::Affine v) {
    if (side) return false;
    side = std::move(v);
    return true;
  };
  if (child.lo) {  // j >= a i + g
    const int64_t a = child.lo->coeff(d);
    const ir::Affine g = rest(*child.lo);
    if (a == 0) {
      out.outer.lo = g;
    } else if (a == 1) {  // i <= j - g: i < j - g + 1
      if (!set(out.inner.hi, make(1, g, -1, 1))) return std::nullopt;
    } else if (a == -1) {  // i >= g - j
      if (!set(out.inner.lo, make(-1, g, 1, 0))) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  if (child.hi) {  // j < b i + h
    const int64_t b = child.hi->coeff(d);
    const ir::Affine h = rest(*child.hi);
    if (b == 0) {
      out.outer.hi = h;
    } else if (b == 1) {  // i > j - h: i >= j - h + 1
      if (!set(out.inner.lo, make(1, h, -1, 1))) return std::nullopt;
    } else if (b == -1) {  // i < h - j
      if (!set(out.inner.hi, make(-1, h, 1, 0))) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace

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
  // Bounded scopes (docs/actions.md): the outer scope must be rectangular; a bounded child is
  // interchanged with its bounds rewritten exactly; bounded scopes deeper down are renamed.
  if (s->bounds.any() || (t.bounds.any() && !interchanged_bounds(t.bounds, d)))
    return {Reason::kNonRectangular, "", a.path};
  // A bound read from a buffer (a CSR row's range) has no interchanged form.
  if (t.bounds.indirect()) return {Reason::kIndirect, "", a.path};
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
  Interchanged b;
  if (child.bounds.any()) b = *interchanged_bounds(child.bounds, d);
  auto inner = ir::Node::scope(s->extent, s->extent_name, s->annot, std::move(body), s->loc,
                               std::move(b.inner));
  return replace_node(p, a.path,
                      {ir::Node::scope(child.extent, child.extent_name, child.annot, {inner},
                                       child.loc, std::move(b.outer))});
}

}  // namespace perfdojo::transforms
