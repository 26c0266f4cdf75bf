#include "transforms/unroll.h"

#include "transforms/analysis.h"

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

ir::Program apply_unroll(const ir::Program& p, const Action& a, const Target&) {
  const ir::Node* s = node_at(p, a.path);
  int d = static_cast<int>(a.path.size()) - 1;
  if (s->extent == a.param)
    return replace_node(p, a.path, {ir::Node::scope(s->extent, s->extent_name, ir::Annot::kUnroll, s->body, s->loc)});
  return replace_node(p, a.path, {tile_node(*s, d, a.param, ir::Annot::kUnroll)});
}

}  // namespace perfdojo::transforms
