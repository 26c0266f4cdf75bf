#include "transforms/split_range.h"

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// The verdict from the scope alone (what both the check and the precheck read).
Reason verdict(const ir::Node& s, int64_t f) {
  if (s.annot != ir::Annot::kNone) return Reason::kAnnotated;
  if (f < 2 || f >= s.extent) return Reason::kBadParameter;
  if (s.extent % f == 0) return Reason::kNothingToDo;
  return Reason::kOk;
}

}  // namespace

Legality check_split_range(const ir::Program& p, const Action& a, const Target&,
                           const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = scope_location(p, a.path, &s, index); !l.ok()) return l;
  if (Reason r = verdict(*s, a.param); r != Reason::kOk) return {r, "", a.path};
  return {};
}

Precheck precheck_split_range(MaskSummary& sum, const MaskSite& at,
                              std::span<const int64_t> params) {
  // The whole check: it reads the scope's annotation and extent only.
  const ir::Node& s = sum.scope(at.scope);
  Precheck out;
  for (size_t i = 0; i < params.size(); ++i)
    if (verdict(s, params[i]) == Reason::kOk) out.legal |= uint64_t{1} << i;
  return out;
}

ir::Program apply_split_range(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_split_range, p, a, t);
  const ir::Node* s = node_at(p, a.path);
  const int d = static_cast<int>(a.path.size()) - 1;
  const int64_t head = s->extent / a.param * a.param;
  // The remainder's body: iterator d shifted by `head` in every index.
  std::vector<ir::NodePtr> tail;
  for (const auto& c : s->body)
    tail.push_back(map_accesses(c, [&](const ir::Access& x) -> std::optional<ir::Access> {
      bool uses = false;
      for (const ir::Affine& f : x.index) uses |= f.coeff(d) != 0;
      if (!uses) return std::nullopt;
      ir::Access y = x;
      for (ir::Affine& f : y.index) f.constant += f.coeff(d) * head;
      return y;
    }));
  return replace_node(p, a.path,
                      {ir::Node::scope(head, "", s->annot, s->body, s->loc),
                       ir::Node::scope(s->extent - head, "", s->annot, std::move(tail), s->loc)});
}

}  // namespace perfdojo::transforms
