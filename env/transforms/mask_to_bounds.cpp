#include "transforms/mask_to_bounds.h"

#include <cmath>
#include <optional>

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// The integer value of an operand of a condition as an affine function of the iterators: an
// iterator value, or an integral constant; nullopt for anything else.
std::optional<ir::Affine> integer_affine(const ir::Expr& e) {
  if (e.kind == ir::ExprKind::kIndex) return e.affine();
  if (e.kind == ir::ExprKind::kConst && std::isfinite(e.value) && e.value == std::trunc(e.value) &&
      std::fabs(e.value) < 1e15)
    return ir::Affine::constant_of(static_cast<int64_t>(e.value));
  return std::nullopt;
}

ir::CmpOp negated(ir::CmpOp c) {
  switch (c) {
    case ir::CmpOp::kLt:
      return ir::CmpOp::kGe;
    case ir::CmpOp::kLe:
      return ir::CmpOp::kGt;
    case ir::CmpOp::kGt:
      return ir::CmpOp::kLe;
    case ir::CmpOp::kGe:
      return ir::CmpOp::kLt;
    case ir::CmpOp::kEq:
      return ir::CmpOp::kNe;
    case ir::CmpOp::kNe:
      return ir::CmpOp::kEq;
  }
  return c;
}

ir::CmpOp mirrored(ir::CmpOp c) {  // a CMP b  <=>  b mirrored(CMP) a
  switch (c) {
    case ir::CmpOp::kLt:
      return ir::CmpOp::kGt;
    case ir::CmpOp::kLe:
      return ir::CmpOp::kGe;
    case ir::CmpOp::kGt:
      return ir::CmpOp::kLt;
    case ir::CmpOp::kGe:
      return ir::CmpOp::kLe;
    default:
      return c;
  }
}

// The bounds on {d} under which `l CMP r` holds; nullopt when it is not a bound on {d} (another
// coefficient than +-1, an iterator of a deeper scope, `!=`).
std::optional<ir::ScopeBounds> bounds_of(const ir::Affine& l, const ir::Affine& r, ir::CmpOp cmp,
                                         int d) {
  ir::Affine diff = l;  // l - r
  if (diff.coeffs.size() < r.coeffs.size()) diff.coeffs.resize(r.coeffs.size(), 0);
  for (size_t k = 0; k < r.coeffs.size(); ++k) diff.coeffs[k] -= r.coeffs[k];
  diff.constant -= r.constant;
  diff.normalise();
  if (diff.max_depth() != d) return std::nullopt;
  const int64_t c = diff.coeff(d);
  if (c != 1 && c != -1) return std::nullopt;
  if (c == -1) {  // -{d} + g CMP 0  <=>  {d} - g mirrored(CMP) 0
    for (auto& x : diff.coeffs) x = -x;
    diff.constant = -diff.constant;
    cmp = mirrored(cmp);
  }
  // {d} + g CMP 0  <=>  {d} CMP h, h = -g
  ir::Affine h = diff;
  h.coeffs[d] = 0;
  for (auto& x : h.coeffs) x = -x;
  h.constant = -h.constant;
  h.normalise();
  ir::Affine h1 = h;
  h1.constant += 1;
  ir::ScopeBounds b;
  switch (cmp) {
    case ir::CmpOp::kLt:
      b.hi = h;
      break;
    case ir::CmpOp::kLe:
      b.hi = h1;
      break;
    case ir::CmpOp::kGt:
      b.lo = h1;
      break;
    case ir::CmpOp::kGe:
      b.lo = h;
      break;
    case ir::CmpOp::kEq:
      b.lo = h;
      b.hi = h1;
      break;
    case ir::CmpOp::kNe:
      return std::nullopt;
  }
  return b;
}

// Whether the buffer never holds -0: an integer type, or it starts at +0 and every statement
// writing it adds to it (x + y is -0 only when both are -0, so a sum from +0 never is).
bool never_negative_zero(const ir::Program& p, const std::string& buffer) {
  const ir::BufferDecl* b = p.find_buffer(buffer);
  if (!b) return false;
  if (ir::compute_type(b->dtype) == ir::DType::kI32) return true;  // i32, i8, u8
  if (!b->init || *b->init != 0 || std::signbit(*b->init)) return false;
  bool only_adds = true;
  auto walk = [&](auto&& self, const std::vector<ir::NodePtr>& body) -> void {
    for (const auto& n : body) {
      if (n->is_scope)
        self(self, n->body);
      else if (n->stmt.lhs.buffer == buffer && n->stmt.op != ir::Reduce::kAdd)
        only_adds = false;
    }
  };
  walk(walk, p.body);
  return only_adds;
}

// Whether choosing `e` as the right side makes statement `s` change nothing.
bool no_op(const ir::Program& p, const ir::Stmt& s, const ir::Expr& e) {
  const bool k = e.kind == ir::ExprKind::kConst;
  switch (s.op) {
    case ir::Reduce::kNone:
      return e.kind == ir::ExprKind::kLoad && e.access == s.lhs;
    case ir::Reduce::kAdd:
      return k && e.value == 0 && (std::signbit(e.value) || never_negative_zero(p, s.lhs.buffer));
    case ir::Reduce::kMul:
      return k && e.value == 1;
    case ir::Reduce::kMax:
      return k && e.value == -INFINITY;
    case ir::Reduce::kMin:
      return k && e.value == INFINITY;
  }
  return false;
}

// The scope's bounds after the move, in `out`: every statement's mask gives the same bound on
// {d}, merged with what the scope has. Fails with the reason on the first that does not qualify.
Legality plan_of(const ir::Program& p, const ir::Node& s, int d, const Path& path,
                 ir::ScopeBounds* out) {
  std::optional<ir::ScopeBounds> want;
  Legality bad{Reason::kIrregularAccess, "", path};
  bool ok = true, any = false;
  auto walk = [&](auto&& self, const std::vector<ir::NodePtr>& body) -> void {
    for (const auto& n : body) {
      if (!ok) return;
      if (n->is_scope) {
        self(self, n->body);
        continue;
      }
      any = true;
      const ir::Stmt& st = n->stmt;
      const ir::Expr& e = *st.rhs;
      bad.buffer = st.lhs.buffer;
      if (e.kind != ir::ExprKind::kSelect) {
        ok = false;
        return;
      }
      auto l = integer_affine(*e.args[0]), r = integer_affine(*e.args[1]);
      if (!l || !r) {
        ok = false;
        return;
      }
      ir::CmpOp cmp = e.cmp;
      if (!no_op(p, st, *e.args[3])) {
        if (!no_op(p, st, *e.args[2])) {
          ok = false;
          return;
        }
        cmp = negated(cmp);  // the true branch is the no-op: run where the condition fails
      }
      auto b = bounds_of(*l, *r, cmp, d);
      if (!b || (want && !(*b == *want))) {
        ok = false;
        return;
      }
      want = b;
    }
  };
  walk(walk, s.body);
  if (!any) return {Reason::kNothingToDo, "", path};
  if (!ok) return bad;
  // A side the scope bounds already stays as it is; the mask may not replace it.
  ir::ScopeBounds merged = s.bounds;
  for (auto [mine, theirs] : {std::pair{&merged.lo, &want->lo}, std::pair{&merged.hi, &want->hi}}) {
    if (!*theirs) continue;
    if (*mine && !(**mine == **theirs)) return {Reason::kIrregularAccess, "", path};
    *mine = *theirs;
  }
  *out = std::move(merged);
  return {};
}

// The subtree with every statement's select replaced by the branch it keeps.
ir::NodePtr unmasked(const ir::Program& p, const ir::NodePtr& n) {
  if (!n->is_scope) {
    ir::Stmt st = n->stmt;
    const ir::Expr& e = *st.rhs;
    st.rhs = no_op(p, st, *e.args[3]) ? e.args[2] : e.args[3];
    st.fused = false;  // the original added the rounded product: it keeps doing so
    return ir::Node::statement(std::move(st));
  }
  std::vector<ir::NodePtr> body;
  for (const auto& c : n->body) body.push_back(unmasked(p, c));
  return ir::Node::scope_like(*n, n->annot, std::move(body));
}

}  // namespace

Legality check_mask_to_bounds(const ir::Program& p, const Action& a, const Target&,
                              const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = scope_location(p, a.path, &s, index); !l.ok()) return l;
  if (s->annot != ir::Annot::kNone) return {Reason::kAnnotated, "", a.path};
  ir::ScopeBounds bounds;
  return plan_of(p, *s, static_cast<int>(a.path.size()) - 1, a.path, &bounds);
}

Precheck precheck_mask_to_bounds(MaskSummary& sum, const MaskSite& at,
                                 std::span<const int64_t> params) {
  if (sum.scope(at.scope).annot != ir::Annot::kNone) return {};  // annotated: refused
  return check_all(params);                                      // the masks are read by the check
}

ir::Program apply_mask_to_bounds(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_mask_to_bounds, p, a, t);
  const ir::Node* s = node_at(p, a.path);
  ir::ScopeBounds bounds;
  plan_of(p, *s, static_cast<int>(a.path.size()) - 1, a.path, &bounds);
  std::vector<ir::NodePtr> body;
  for (const auto& c : s->body) body.push_back(unmasked(p, c));
  return replace_node(p, a.path,
                      {ir::Node::scope(s->extent, s->extent_name, s->annot, std::move(body), s->loc,
                                       std::move(bounds))});
}

}  // namespace perfdojo::transforms
