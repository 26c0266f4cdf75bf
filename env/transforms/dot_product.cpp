#include "transforms/dot_product.h"

#include <algorithm>

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// The coefficients of the lane iterator (depth d) and of q (depth d + 1) in `a`'s offset:
// B4[k/4, j, q] and B[k/4, 4 j + q] both give {4, 1}.
std::pair<int64_t, int64_t> flat_coeffs(const ir::Program& p, const ir::Access& a, int d) {
  return {element_stride(p, a, d), element_stride(p, a, d + 1)};
}

std::optional<ir::DType> dtype_of(const ir::Program& p, const std::string& buffer) {
  const ir::BufferDecl* b = p.find_buffer(buffer);
  return b ? std::optional<ir::DType>(b->dtype) : std::nullopt;
}

}  // namespace

int64_t element_stride(const ir::Program& p, const ir::Access& a, int d) {
  const ir::BufferDecl* b = p.find_buffer(a.buffer);
  int64_t c = 0, stride = 1;
  for (size_t k = a.index.size(); k-- > 0;) {
    c += a.index[k].coeff(d) * stride;
    if (b && k < b->shape.size()) stride *= b->shape[k];
  }
  return c;
}

std::optional<DotForm> dot_form(const ir::Program& p, const ir::Node& s, int d, Legality* why) {
  auto refuse = [&](Reason r, const std::string& buffer = "") -> std::optional<DotForm> {
    if (why) *why = {r, buffer, {}};
    return std::nullopt;
  };
  if (s.body.size() != 1 || !s.body[0]->is_scope) return refuse(Reason::kIrregularAccess);
  const ir::Node& q = *s.body[0];
  if (q.annot != ir::Annot::kNone || q.bounds.any() || q.extent != 4 || q.body.size() != 1 ||
      q.body[0]->is_scope)
    return refuse(Reason::kIrregularAccess);
  const ir::Stmt& st = q.body[0]->stmt;
  if (st.op != ir::Reduce::kAdd || dtype_of(p, st.lhs.buffer) != ir::DType::kI32)
    return refuse(Reason::kIrregularAccess, st.lhs.buffer);
  const ir::Expr& e = *st.rhs;
  if (e.kind != ir::ExprKind::kBinary || e.bin != ir::BinOp::kMul ||
      e.args[0]->kind != ir::ExprKind::kLoad || e.args[1]->kind != ir::ExprKind::kLoad)
    return refuse(Reason::kIrregularAccess, st.lhs.buffer);
  const ir::Access* x = &e.args[0]->access;
  const ir::Access* y = &e.args[1]->access;
  const auto tx = dtype_of(p, x->buffer), ty = dtype_of(p, y->buffer);
  DotForm f;
  f.stmt = &st;
  if (tx == ir::DType::kU8 && ty == ir::DType::kI8) {
    f.unsigned_operand = x;
    f.signed_operand = y;
  } else if (tx == ir::DType::kI8 && ty == ir::DType::kU8) {
    f.unsigned_operand = y;
    f.signed_operand = x;
  } else {
    return refuse(Reason::kIrregularAccess, x->buffer);
  }
  using Coeffs = std::pair<int64_t, int64_t>;
  if (flat_coeffs(p, st.lhs, d) != Coeffs{1, 0})
    return refuse(Reason::kNonContiguous, st.lhs.buffer);
  const bool u_broadcast = flat_coeffs(p, *f.unsigned_operand, d) == Coeffs{0, 1};
  const bool s_broadcast = flat_coeffs(p, *f.signed_operand, d) == Coeffs{0, 1};
  const ir::Access* packed = u_broadcast ? f.signed_operand : f.unsigned_operand;
  if (u_broadcast == s_broadcast)
    return refuse(Reason::kNonContiguous, (u_broadcast ? f.signed_operand : packed)->buffer);
  if (flat_coeffs(p, *packed, d) != Coeffs{4, 1})
    return refuse(Reason::kNonContiguous, packed->buffer);
  f.unsigned_broadcast = u_broadcast;
  return f;
}

Legality check_dot_product(const ir::Program& p, const Action& a, const Target& t,
                           const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = lanes_location(p, a, t, &s, index); !l.ok()) return l;
  if (s->extent % a.param != 0) return {Reason::kNotDivisible, "", a.path};
  Legality why;
  if (!dot_form(p, *s, static_cast<int>(a.path.size()) - 1, &why)) {
    why.where = a.path;
    return why;
  }
  // One statement, whose target (i32) is neither operand (u8, i8): every lane updates its own
  // element and reads only buffers nothing in the scope writes.
  return {};
}

Precheck precheck_dot_product(MaskSummary& sum, const MaskSite& at,
                              std::span<const int64_t> params) {
  const ir::Node& s = sum.scope(at.scope);
  if (s.annot != ir::Annot::kNone || sum.innermost(at.scope)) return {};
  return check_dividing_widths(s.extent, params);
}

ir::Program apply_dot_product(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_dot_product, p, a, t);
  return annotate_lanes(p, a.path, a.param);
}

}  // namespace perfdojo::transforms
