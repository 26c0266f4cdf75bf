#include "transforms/vectorize.h"

#include <algorithm>

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

bool invariant_in(const ir::Access& a, int d) {
  for (const auto& ix : a.index)
    if (ix.coeff(d) != 0) return false;
  return true;
}

}  // namespace

Legality check_vectorize(const ir::Program& p, const Action& a, const Target& t,
                         const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = lanes_location(p, a, t, &s, index); !l.ok()) return l;
  for (const auto& c : s->body)
    if (c->is_scope) return {Reason::kNotInnermost, "", a.path};
  if (s->extent % a.param != 0) return {Reason::kNotDivisible, "", a.path};
  int d = static_cast<int>(a.path.size()) - 1;
  const ChildSites body(index, p, a.path, 0, static_cast<int>(s->body.size()));
  const auto sites = body.sites();
  for (const auto& site : sites) {
    if (site.access->buffer.empty()) continue;  // an iterator value: an iota of any stride
    const auto& ix = site.access->index;
    for (size_t k = 0; k + 1 < ix.size(); ++k)
      if (ix[k].coeff(d) != 0) return {Reason::kNonContiguous, site.access->buffer, a.path};
    int64_t c = ix.back().coeff(d);
    if (c != 0 && c != 1) return {Reason::kNonContiguous, site.access->buffer, a.path};
    // An indirect term that varies by lane would gather; one the lanes share moves the whole
    // vector (docs/ir.md, "Indirect indices").
    for (const auto& g : site.access->gather)
      if (g)
        for (const auto& gi : g->index)
          if (gi.coeff(d) != 0) return {Reason::kIndirect, site.access->buffer, a.path};
  }
  const DirList dirs = eq_dirs(d, {Dir::kLt});
  for (const auto& x : sites) {
    for (const auto& y : sites) {
      if (!may_depend(x, y, dirs)) continue;
      // A reduction into a target invariant in the lanes is a horizontal reduction: allowed
      // (it reassociates), provided nothing else in the scope touches the target.
      bool own_reduction =
          x.stmt == y.stmt && x.access == y.access && x.reduction && invariant_in(*x.access, d);
      if (!own_reduction) return {Reason::kDependence, x.access->buffer, a.path};
    }
  }
  return {};
}

Precheck precheck_vectorize(MaskSummary& sum, const MaskSite& at, std::span<const int64_t> params) {
  const ir::Node& s = sum.scope(at.scope);
  if (s.annot != ir::Annot::kNone || !sum.innermost(at.scope)) return {};
  return check_dividing_widths(s.extent, params);
}

ir::Program apply_vectorize(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_vectorize, p, a, t);
  return annotate_lanes(p, a.path, a.param);
}

}  // namespace perfdojo::transforms
