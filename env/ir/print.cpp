#include "ir/print.h"

#include <charconv>
#include <cmath>

namespace perfdojo::ir {
namespace {

// Precedence levels, loosest first; a subexpression is parenthesised when it binds looser than
// its position requires.
constexpr int kPrecSelect = 0;
constexpr int kPrecSum = 1;
constexpr int kPrecProduct = 2;
constexpr int kPrecUnary = 3;

const char* unary_name(UnOp op) {
  switch (op) {
    case UnOp::kNeg:
      return "-";
    case UnOp::kExp:
      return "exp";
    case UnOp::kLog:
      return "log";
    case UnOp::kSqrt:
      return "sqrt";
    case UnOp::kRsqrt:
      return "rsqrt";
    case UnOp::kTanh:
      return "tanh";
    case UnOp::kSin:
      return "sin";
    case UnOp::kCos:
      return "cos";
    case UnOp::kAbs:
      return "abs";
    case UnOp::kCastF32:
      return "f32";
    case UnOp::kCastF64:
      return "f64";
    case UnOp::kCastI32:
      return "i32";
  }
  return "?";
}

const char* cmp_name(CmpOp op) {
  switch (op) {
    case CmpOp::kLt:
      return "<";
    case CmpOp::kLe:
      return "<=";
    case CmpOp::kGt:
      return ">";
    case CmpOp::kGe:
      return ">=";
    case CmpOp::kEq:
      return "==";
    case CmpOp::kNe:
      return "!=";
  }
  return "?";
}

void print_expr_to(const Expr& e, int min_prec, std::string& out) {
  int prec = 4;
  std::string s;
  switch (e.kind) {
    case ExprKind::kConst:
      s = print_number(e.value);
      prec = kPrecUnary;
      break;
    case ExprKind::kLoad:
      s = print_access(e.access);
      break;
    case ExprKind::kIndex: {
      // Printed as in an index; it parses back to one node because the IR folds integer
      // arithmetic on iterator values (Expr::binary).
      const Affine& f = e.affine();
      int terms = f.constant != 0, unit = 0;
      for (int64_t c : f.coeffs) terms += c != 0, unit += c == 1 || c == -1;
      s = print_affine(f);
      prec = terms > 1 ? kPrecSum : unit == 0 ? kPrecProduct : s[0] == '-' ? kPrecUnary : 4;
      break;
    }
    case ExprKind::kUnary:
      if (e.un == UnOp::kNeg) {
        s = "-";
        print_expr_to(*e.args[0], kPrecUnary, s);
        prec = kPrecUnary;
      } else {
        s = std::string(unary_name(e.un)) + "(";
        print_expr_to(*e.args[0], kPrecSelect, s);
        s += ")";
      }
      break;
    case ExprKind::kBinary:
      if (e.bin == BinOp::kMax || e.bin == BinOp::kMin) {
        s = e.bin == BinOp::kMax ? "max(" : "min(";
        print_expr_to(*e.args[0], kPrecSelect, s);
        s += ", ";
        print_expr_to(*e.args[1], kPrecSelect, s);
        s += ")";
      } else {
        bool sum = e.bin == BinOp::kAdd || e.bin == BinOp::kSub;
        prec = sum ? kPrecSum : kPrecProduct;
        const char* op = e.bin == BinOp::kAdd   ? " + "
                         : e.bin == BinOp::kSub ? " - "
                         : e.bin == BinOp::kMul ? " * "
                                                : " / ";
        print_expr_to(*e.args[0], prec, s);
        s += op;
        print_expr_to(*e.args[1], prec + 1, s);
      }
      break;
    case ExprKind::kSelect:
      prec = kPrecSelect;
      print_expr_to(*e.args[0], kPrecSum, s);
      s += std::string(" ") + cmp_name(e.cmp) + " ";
      print_expr_to(*e.args[1], kPrecSum, s);
      s += " ? ";
      print_expr_to(*e.args[2], kPrecSelect, s);
      s += " : ";
      print_expr_to(*e.args[3], kPrecSelect, s);
      break;
    case ExprKind::kFma:
      s = "fma(";
      for (size_t i = 0; i < 3; ++i) {
        if (i) s += ", ";
        print_expr_to(*e.args[i], kPrecSelect, s);
      }
      s += ")";
      break;
  }
  if (prec < min_prec) {
    out += "(" + s + ")";
  } else {
    out += s;
  }
}

namespace {
std::string print_indices(const std::vector<Affine>& index) {
  std::string s;
  for (size_t i = 0; i < index.size(); ++i) {
    if (i) s += ",";
    s += print_affine(index[i]);
  }
  return s;
}

// An index or bound with an indirect term: the term first, then the affine rest when there is
// one (idx[{0}]+{1}, rowptr[{0}]).
std::string print_indirect(const Gather& g, const Affine& rest) {
  std::string s = g.buffer + "[" + print_indices(g.index) + "]";
  if (rest.max_depth() < 0 && rest.constant == 0) return s;
  const std::string r = print_affine(rest);
  return s + (r[0] == '-' ? r : "+" + r);
}
}  // namespace

std::string scope_token(int64_t extent, const std::string& extent_name, Annot annot,
                        const ScopeBounds& bounds) {
  std::string s = extent_name.empty() ? std::to_string(extent) : extent_name;
  if (bounds.any()) {
    s += "(";
    if (bounds.lo)
      s += bounds.lo_gather ? print_indirect(*bounds.lo_gather, *bounds.lo)
                            : print_affine(*bounds.lo);
    s += "..";
    if (bounds.hi)
      s += bounds.hi_gather ? print_indirect(*bounds.hi_gather, *bounds.hi)
                            : print_affine(*bounds.hi);
    s += ")";
  }
  if (annot != Annot::kNone) s += std::string(":") + annot_name(annot);
  return s;
}

// A statement's line: bars for the scopes it continues, then the scopes it opens.
void print_line(size_t depth, const std::vector<std::string>& pending, const Stmt& st,
                std::string& out) {
  for (size_t i = pending.size(); i < depth; ++i) out += "| ";
  for (const auto& tok : pending) out += tok + " ";
  out += print_stmt(st);
  out += "\n";
}

// Prints `body` whose enclosing scopes number `depth`; the first line also opens `pending`
// (scopes not yet written on any line).
void print_body(const std::vector<NodePtr>& body, int depth, std::vector<std::string> pending,
                std::string& out) {
  for (const auto& child : body) {
    if (child->is_scope) {
      auto inner = pending;
      inner.push_back(scope_token(child->extent, child->extent_name, child->annot, child->bounds));
      print_body(child->body, depth + 1, std::move(inner), out);
    } else {
      print_line(static_cast<size_t>(depth), pending, child->stmt, out);
    }
    pending.clear();
  }
}

std::string dims(const BufferDecl& b) {
  std::string s = "[";
  for (size_t i = 0; i < b.shape.size(); ++i) {
    if (i) s += ", ";
    s += b.shape_names[i].empty() ? std::to_string(b.shape[i]) : b.shape_names[i];
  }
  return s + "]";
}

}  // namespace

std::string print_number(double v) {
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (std::isnan(v)) return "nan";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string print_affine(const Affine& a) {
  std::string s;
  for (int k = 0; k < static_cast<int>(a.coeffs.size()); ++k) {
    int64_t c = a.coeffs[k];
    if (c == 0) continue;
    if (c < 0) {
      s += "-";
    } else if (!s.empty()) {
      s += "+";
    }
    s += "{" + std::to_string(k) + "}";
    if (c != 1 && c != -1) s += "*" + std::to_string(c < 0 ? -c : c);
  }
  if (a.constant != 0 || s.empty()) {
    if (a.constant >= 0 && !s.empty()) s += "+";
    s += std::to_string(a.constant);
  }
  return s;
}

std::string print_access(const Access& a) {
  std::string s = a.buffer + "[";
  for (size_t i = 0; i < a.index.size(); ++i) {
    if (i) s += ",";
    if (const Gather* g = a.gather_at(i)) {
      s += print_indirect(*g, a.index[i]);
      continue;
    }
    s += print_affine(a.index[i]);
  }
  return s + "]";
}

std::string print_expr(const Expr& e) {
  std::string s;
  print_expr_to(e, kPrecSelect, s);
  return s;
}

std::string print_stmt(const Stmt& st) {
  std::string s = print_access(st.lhs);
  if (fused_update(st)) {
    std::string t = s + " = fma(";
    print_expr_to(*st.rhs->args[0], kPrecSelect, t);
    t += ", ";
    print_expr_to(*st.rhs->args[1], kPrecSelect, t);
    return t + ", " + s + ")";
  }
  switch (st.op) {
    case Reduce::kNone:
      return s + " = " + print_expr(*st.rhs);
    case Reduce::kAdd:
      return s + " += " + print_expr(*st.rhs);
    case Reduce::kMul:
      return s + " *= " + print_expr(*st.rhs);
    case Reduce::kMax:
      return s + " = max(" + print_expr(*st.rhs) + ")";
    case Reduce::kMin:
      return s + " = min(" + print_expr(*st.rhs) + ")";
  }
  return s;
}

std::string print_declarations(const Program& p) {
  std::string out;
  if (!p.doc.empty()) {
    size_t start = 0;
    while (start <= p.doc.size()) {
      size_t end = p.doc.find('\n', start);
      if (end == std::string::npos) end = p.doc.size();
      std::string line = p.doc.substr(start, end - start);
      out += line.empty() ? "#\n" : "# " + line + "\n";
      start = end + 1;
    }
  }
  for (const auto& s : p.sizes) out += s.name + " = " + std::to_string(s.value) + "\n";
  for (const auto& b : p.buffers) {
    out += std::string(role_name(b.role)) + " " + b.name + ": " + dtype_name(b.dtype) + dims(b);
    if (b.init) out += " = " + print_number(*b.init);
    if (b.range) {
      auto bound = [](const std::string& name, double v) {
        return name.empty() ? print_number(v) : name;
      };
      out += " in [" + bound(b.range_names.first, b.range->first) + ", " +
             bound(b.range_names.second, b.range->second) + "]";
    }
    if (b.sorted) out += " sorted";
    if (b.stream) out += " stream";
    out += "\n";
  }
  out += "\n";
  return out;
}

std::string print_program(const Program& p) {
  std::string out = print_declarations(p);
  print_body(p.body, 0, {}, out);
  return out;
}

void StreamPrinter::declarations(const Program& header) { out_ << print_declarations(header); }

void StreamPrinter::open_scope(int64_t extent, std::string extent_name, Annot annot, SourceLoc,
                               ScopeBounds bounds) {
  pending_.push_back(scope_token(extent, extent_name, annot, bounds));
  ++depth_;
}

void StreamPrinter::close_scope() {
  --depth_;
  pending_
      .clear();  // a scope closed before any line wrote it was empty: print_program drops it too
}

void StreamPrinter::statement(Stmt s) {
  line_.clear();
  print_line(depth_, pending_, s, line_);
  pending_.clear();
  out_ << line_;
}

}  // namespace perfdojo::ir
