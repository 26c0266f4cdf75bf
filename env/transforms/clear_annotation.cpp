#include "transforms/clear_annotation.h"

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {

Legality check_clear_annotation(const ir::Program& p, const Action& a, const Target&,
                                const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = scope_location(p, a.path, &s, index); !l.ok()) return l;
  if (s->annot == ir::Annot::kNone) return {Reason::kNothingToDo, "", a.path};
  return {};
}

Precheck precheck_clear_annotation(MaskSummary& sum, const MaskSite& at,
                                   std::span<const int64_t> params) {
  // The whole check.
  if (sum.scope(at.scope).annot == ir::Annot::kNone) return {};
  return {low_bits(static_cast<int>(params.size())), 0};
}

ir::Program apply_clear_annotation(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_clear_annotation, p, a, t);
  const ir::Node* s = node_at(p, a.path);
  return replace_node(p, a.path, {ir::Node::scope_like(*s, ir::Annot::kNone, s->body)});
}

}  // namespace perfdojo::transforms
