#include "transforms/unroll.h"

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {

Legality check_unroll(const ir::Program& p, const Action& a, const Target&,
                      const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = scope_location(p, a.path, &s, index); !l.ok()) return l;
  if (s->annot != ir::Annot::kNone) return {Reason::kAnnotated, "", a.path};
  if (a.param < 2 || a.param > kMaxUnroll || a.param > s->extent)
    return {Reason::kBadParameter, "", a.path};
  if (s->extent % a.param != 0) return {Reason::kNotDivisible, "", a.path};
  return {};
}

Precheck precheck_unroll(MaskSummary& sum, const MaskSite& at, std::span<const int64_t> params) {
  // The whole check.
  const ir::Node& s = sum.scope(at.scope);
  Precheck out;
  if (s.annot != ir::Annot::kNone) return out;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t f = params[i];
    if (f > 1 && f <= kMaxUnroll && f <= s.extent && s.extent % f == 0)
      out.legal |= uint64_t{1} << i;
  }
  return out;
}

ir::Program apply_unroll(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_unroll, p, a, t);
  const ir::Node* s = node_at(p, a.path);
  int d = static_cast<int>(a.path.size()) - 1;
  if (s->extent == a.param)
    return replace_node(p, a.path, {ir::Node::scope_like(*s, ir::Annot::kUnroll, s->body)});
  return replace_node(p, a.path, {tile_node(*s, d, a.param, ir::Annot::kUnroll)});
}

}  // namespace perfdojo::transforms
