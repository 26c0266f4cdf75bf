#include "transforms/contract.h"

namespace perfdojo::transforms {
namespace {

bool is_product(const ir::Expr& e) {
  return e.kind == ir::ExprKind::kBinary && e.bin == ir::BinOp::kMul;
}

class Contractor {
 public:
  Contractor(const ir::Program& p, int& count) : p_(p), count_(count) {}

  // `e` (evaluated in `t`) with its multiply-adds fused; the same pointer when nothing changed.
  ir::ExprPtr expr(const ir::ExprPtr& e, ir::DType t) {
    if (e->kind == ir::ExprKind::kUnary &&
        (e->un == ir::UnOp::kCastF32 || e->un == ir::UnOp::kCastF64 ||
         e->un == ir::UnOp::kCastI32)) {
      // The argument computes in its own type (f64 when it has none, as the interpreter says).
      const ir::DType inner = e->un == ir::UnOp::kCastI32 ? ir::DType::kI32 : arg_type(*e->args[0]);
      auto a = expr(e->args[0], inner);
      return a == e->args[0] ? e : ir::Expr::unary(e->un, a);
    }
    if (e->kind == ir::ExprKind::kSelect) {
      // The condition stays as written (compared exactly); the branches are values.
      auto x = expr(e->args[2], t), y = expr(e->args[3], t);
      if (x == e->args[2] && y == e->args[3]) return e;
      return ir::Expr::select(e->cmp, e->args[0], e->args[1], x, y);
    }
    std::vector<ir::ExprPtr> args;
    bool changed = false;
    for (const auto& a : e->args) {
      args.push_back(expr(a, t));
      changed = changed || args.back() != a;
    }
    if (t != ir::DType::kI32 && e->kind == ir::ExprKind::kBinary &&
        (e->bin == ir::BinOp::kAdd || e->bin == ir::BinOp::kSub)) {
      const bool add = e->bin == ir::BinOp::kAdd;
      if (is_product(*args[0])) {  // x * y + z, x * y - z
        ++count_;
        ir::ExprPtr z = add ? args[1] : ir::Expr::unary(ir::UnOp::kNeg, args[1]);
        return ir::Expr::fma(args[0]->args[0], args[0]->args[1], z);
      }
      if (is_product(*args[1])) {  // z + x * y, z - x * y
        ++count_;
        ir::ExprPtr x = add ? args[1]->args[0] : ir::Expr::unary(ir::UnOp::kNeg, args[1]->args[0]);
        return ir::Expr::fma(x, args[1]->args[1], args[0]);
      }
    }
    if (!changed) return e;
    auto n = std::make_shared<ir::Expr>(*e);
    n->args = std::move(args);
    return n;
  }

  ir::NodePtr node(const ir::NodePtr& n) {
    if (n->is_scope) {
      std::vector<ir::NodePtr> body;
      bool changed = false;
      for (const auto& c : n->body) {
        body.push_back(node(c));
        changed = changed || body.back() != c;
      }
      if (!changed) return n;
      return ir::Node::scope_like(*n, n->annot, std::move(body));
    }
    const ir::BufferDecl* b = p_.find_buffer(n->stmt.lhs.buffer);
    // A narrow target computes in f32 (bf16, f16) or i32 (i8, u8): its fused update too.
    const ir::DType t = b ? ir::compute_type(b->dtype) : ir::DType::kF32;
    if (t == ir::DType::kI32) return n;
    ir::Stmt s = n->stmt;
    if (s.op == ir::Reduce::kAdd && is_product(*s.rhs)) {
      // t += x * y: the factors may hold multiply-adds of their own.
      auto x = expr(s.rhs->args[0], t), y = expr(s.rhs->args[1], t);
      s.rhs = ir::Expr::binary(ir::BinOp::kMul, x, y);
      s.fused = true;
      if (ir::fused_update(s)) {
        if (!n->stmt.fused) ++count_;
        return ir::Node::statement(std::move(s));
      }
      s = n->stmt;
    }
    auto r = expr(s.rhs, t);
    if (r == s.rhs) return n;
    s.rhs = r;
    return ir::Node::statement(std::move(s));
  }

 private:
  ir::DType arg_type(const ir::Expr& e) const {
    if (e.kind == ir::ExprKind::kLoad) {
      const ir::BufferDecl* b = p_.find_buffer(e.access.buffer);
      return b ? ir::compute_type(b->dtype) : ir::DType::kF64;
    }
    if (e.kind == ir::ExprKind::kUnary) {
      if (e.un == ir::UnOp::kCastF32) return ir::DType::kF32;
      if (e.un == ir::UnOp::kCastF64) return ir::DType::kF64;
      if (e.un == ir::UnOp::kCastI32) return ir::DType::kI32;
    }
    if (e.kind == ir::ExprKind::kSelect) return arg_type(*e.args[2]);
    for (const auto& a : e.args) {
      // The first operand with a type of its own decides, as in the interpreter.
      if (a->kind == ir::ExprKind::kConst || a->kind == ir::ExprKind::kIndex) continue;
      return arg_type(*a);
    }
    return ir::DType::kF64;
  }

  const ir::Program& p_;
  int& count_;
};

}  // namespace

ir::Program contract(const ir::Program& p, int* count) {
  int n = 0;
  Contractor c(p, n);
  ir::Program q = p;
  for (auto& node : q.body) node = c.node(node);
  if (count) *count = n;
  return q;
}

bool contracts_on(const Target& target) { return target.fma; }

}  // namespace perfdojo::transforms
