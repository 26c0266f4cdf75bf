#include "ir/check.h"

#include <cmath>
#include <optional>
#include <set>

#include "ir/print.h"

namespace perfdojo::ir {
namespace {

// Largest buffer the tools accept: keeps element counts and offsets far from overflow.
constexpr int64_t kMaxElements = int64_t{1} << 34;

}  // namespace

// The rules, fed piece by piece: check_program walks a tree into it, StreamChecker a parse.
class StreamChecker::Impl {
 public:
  void declarations(const Program& p) {
    p_ = &p;
    std::set<std::string> names;
    for (const auto& s : p.sizes) {
      if (!names.insert(s.name).second) error(s.loc, "'" + s.name + "' is declared twice");
      if (s.value <= 0) error(s.loc, "size '" + s.name + "' must be positive");
    }
    for (const auto& b : p.buffers) {
      if (!names.insert(b.name).second) error(b.loc, "'" + b.name + "' is declared twice");
      if (b.shape.empty()) error(b.loc, "buffer '" + b.name + "' needs at least one dimension");
      int64_t elements = 1;
      bool too_large = false;
      for (auto d : b.shape) {
        if (d <= 0) error(b.loc, "buffer '" + b.name + "' has a non-positive dimension");
        if (d > 0 && (d > kMaxElements || elements > kMaxElements / d))
          too_large = true;
        else if (d > 0)
          elements *= d;
      }
      if (too_large) error(b.loc, "buffer '" + b.name + "' is too large (more than 2^34 elements)");
      if (b.role == Role::kInput && b.init)
        error(b.loc, "input '" + b.name + "' cannot have an initial value");
    }
  }

  void open_scope(int64_t extent, const SourceLoc& loc, const ScopeBounds& bounds = {}) {
    child();
    if (extent <= 0) error(loc, "scope extent must be positive");
    const int depth = static_cast<int>(extents_.size());
    for (const auto* b : {&bounds.lo, &bounds.hi})
      if (*b && (*b)->max_depth() >= depth)
        error(loc, std::string("the ") + (b == &bounds.lo ? "lower" : "upper") +
                       " bound of the scope at depth " + std::to_string(depth) + " uses {" +
                       std::to_string((*b)->max_depth()) +
                       "}: a bound may use only the iterators of the scopes around it");
    // A bound's indirect term reads an i32 input that declares its range, in bounds (its value
    // needs no range of its own: the clamp to the extent keeps the iterator inside).
    for (const auto* g : {&bounds.lo_gather, &bounds.hi_gather}) {
      if (!*g) continue;
      Access bound;
      bound.buffer =
          "the scope's " + std::string(g == &bounds.lo_gather ? "lower" : "upper") + " bound";
      bound.loc = loc;
      int64_t lo = 0, hi = 0;
      gather(**g, bound, &lo, &hi);
    }
    extents_.push_back(extent);
    open_.push_back({loc, false});
  }

  void close_scope() {
    if (!open_.back().second) error(open_.back().first, "scope has an empty body");
    extents_.pop_back();
    open_.pop_back();
  }

  void statement(const Stmt& s) {
    child();
    stmt(s);
  }

  std::vector<Diagnostic> finish() {
    if (!any_) error({}, "the kernel has no statements");
    return std::move(errors_);
  }

  // check_program's walk: the same calls a parse of the printed program would make.
  void body(const std::vector<NodePtr>& nodes) {
    for (const auto& n : nodes) {
      if (!n->is_scope) {
        statement(n->stmt);
        continue;
      }
      open_scope(n->extent, n->loc, n->bounds);
      body(n->body);
      close_scope();
    }
  }

 private:
  void error(const SourceLoc& loc, std::string msg) { errors_.push_back({loc, std::move(msg)}); }
  void child() {
    if (open_.empty())
      any_ = true;
    else
      open_.back().second = true;
  }

  // Checks an access; returns its buffer's declaration when it exists.
  const BufferDecl* access(const Access& a) {
    const BufferDecl* b = p_->find_buffer(a.buffer);
    if (!b) {
      if (p_->find_size(a.buffer))
        error(a.loc, "'" + a.buffer + "' is a size, not a buffer");
      else
        error(a.loc, "undeclared buffer '" + a.buffer + "'");
      return nullptr;
    }
    if (a.index.size() != b->shape.size()) {
      error(a.loc, "'" + a.buffer + "' has rank " + std::to_string(b->shape.size()) +
                       " but is indexed with " + std::to_string(a.index.size()) + " index(es)");
      return b;
    }
    for (size_t i = 0; i < a.index.size(); ++i) {
      int64_t lo = 0, hi = 0;
      if (!affine_range(a.index[i], i, a, &lo, &hi)) continue;
      if (const Gather* g = a.gather_at(i)) {
        int64_t glo = 0, ghi = 0;
        if (!gather(*g, a, &glo, &ghi)) continue;
        if (__builtin_add_overflow(lo, glo, &lo) || __builtin_add_overflow(hi, ghi, &hi)) {
          error(a.loc, "index " + std::to_string(i) + " of '" + print_access(a) + "' overflows");
          continue;
        }
      }
      if (lo < 0 || hi >= b->shape[i]) {
        error(a.loc, "index " + std::to_string(i) + " of '" + print_access(a) + "' ranges over [" +
                         std::to_string(lo) + ", " + std::to_string(hi) +
                         "] but the dimension has extent " + std::to_string(b->shape[i]) +
                         " (valid 0.." + std::to_string(b->shape[i] - 1) +
                         (a.gather_at(i) ? std::string("; its indirect term over the range '") +
                                               a.gather_at(i)->buffer + "' declares"
                                         : std::string()) +
                         ")");
      }
    }
    return b;
  }

  // The range [*lo, *hi] of index `ix` (dimension `i` of `a`) over the enclosing scopes'
  // extents; false (after the error) when it names an iterator outside them or overflows.
  bool affine_range(const Affine& ix, size_t i, const Access& a, int64_t* lo, int64_t* hi) {
    *lo = *hi = ix.constant;
    for (int k = 0; k < static_cast<int>(ix.coeffs.size()); ++k) {
      int64_t c = ix.coeffs[k];
      if (c == 0) continue;
      if (k >= static_cast<int>(extents_.size())) {
        error(a.loc, "iterator {" + std::to_string(k) + "} in '" + print_access(a) +
                         "' is out of range: the statement is inside " +
                         std::to_string(extents_.size()) + " scope(s)");
        return false;
      }
      int64_t span = 0;
      if (__builtin_mul_overflow(c, extents_[k] - 1, &span) ||
          __builtin_add_overflow(span < 0 ? *lo : *hi, span, span < 0 ? lo : hi)) {
        error(a.loc, "index " + std::to_string(i) + " of '" + print_access(a) + "' overflows");
        return false;
      }
    }
    return true;
  }

  // An indirect term of `a` (docs/ir.md, "Indirect indices"): it reads an i32 input that
  // declares its values' range, in bounds; [*lo, *hi] is that range. False after an error.
  bool gather(const Gather& g, const Access& a, int64_t* lo, int64_t* hi) {
    const BufferDecl* b = p_->find_buffer(g.buffer);
    const std::string where = "the indirect index '" + g.buffer + "[...]' of '" + a.buffer + "'";
    if (!b) {
      error(g.loc, p_->find_size(g.buffer) ? "'" + g.buffer + "' is a size, not a buffer"
                                           : "undeclared buffer '" + g.buffer + "'");
      return false;
    }
    if (b->role != Role::kInput || b->dtype != DType::kI32) {
      error(g.loc, where + " must read an i32 input ('" + g.buffer + "' is " +
                       (b->role == Role::kInput ? "an " : "a ") + role_name(b->role) + " of " +
                       dtype_name(b->dtype) + ")");
      return false;
    }
    if (!b->range || b->range->first != std::floor(b->range->first) ||
        b->range->second != std::floor(b->range->second)) {
      error(g.loc, where + ": input '" + g.buffer +
                       "' must declare the integer range of its values, 'in [LO, HI)'");
      return false;
    }
    // As index arithmetic, within +-2^40: far from overflow in every offset computed from it.
    constexpr double kMaxIndexValue = 1099511627776.0;
    if (std::fabs(b->range->first) > kMaxIndexValue ||
        std::fabs(b->range->second) > kMaxIndexValue) {
      error(g.loc, where + ": the range of input '" + g.buffer +
                       "' reaches past 2^40 in magnitude, beyond any index");
      return false;
    }
    if (g.index.size() != b->shape.size()) {
      error(g.loc, "'" + g.buffer + "' has rank " + std::to_string(b->shape.size()) +
                       " but is indexed with " + std::to_string(g.index.size()) + " index(es)");
      return false;
    }
    Access inner;
    inner.buffer = g.buffer;
    inner.index = g.index;
    inner.loc = g.loc;
    for (size_t i = 0; i < g.index.size(); ++i) {
      int64_t l = 0, h = 0;
      if (!affine_range(g.index[i], i, inner, &l, &h)) return false;
      if (l < 0 || h >= b->shape[i]) {
        error(g.loc, "index " + std::to_string(i) + " of '" + print_access(inner) +
                         "' ranges over [" + std::to_string(l) + ", " + std::to_string(h) +
                         "] but the dimension has extent " + std::to_string(b->shape[i]));
        return false;
      }
    }
    *lo = static_cast<int64_t>(b->range->first);
    *hi = static_cast<int64_t>(b->range->second) - 1;
    return true;
  }

  // The element type of `e`, or nullopt for a bare literal (which adapts to its context).
  std::optional<DType> type_of(const Expr& e, const SourceLoc& where) {
    switch (e.kind) {
      case ExprKind::kConst:
      case ExprKind::kIndex:
        return std::nullopt;  // adapts to its context, as a literal does
      case ExprKind::kLoad: {
        const BufferDecl* b = access(e.access);
        if (b) return compute_type(b->dtype);  // a bf16, f16, i8 or u8 element widens
        return std::nullopt;
      }
      case ExprKind::kUnary: {
        auto t = type_of(*e.args[0], where);
        switch (e.un) {
          case UnOp::kCastF32:
            return DType::kF32;
          case UnOp::kCastF64:
            return DType::kF64;
          case UnOp::kCastI32:
            return DType::kI32;
          case UnOp::kNeg:
          case UnOp::kAbs:
            return t;
          default:
            if (t == DType::kI32)
              error(where, "'" + print_expr(e) +
                               "' applies a floating-point function to i32; "
                               "convert first with f32(...)");
            return t;
        }
      }
      case ExprKind::kBinary: {
        auto a = type_of(*e.args[0], where), b = type_of(*e.args[1], where);
        return unify(a, b, e, where);
      }
      case ExprKind::kSelect: {
        auto l = type_of(*e.args[0], where), r = type_of(*e.args[1], where);
        unify(l, r, e, where);
        auto t = type_of(*e.args[2], where), f = type_of(*e.args[3], where);
        return unify(t, f, e, where);
      }
      case ExprKind::kFma: {
        auto a = type_of(*e.args[0], where), b = type_of(*e.args[1], where);
        auto c = type_of(*e.args[2], where);
        return unify(unify(a, b, e, where), c, e, where);
      }
    }
    return std::nullopt;
  }

  std::optional<DType> unify(std::optional<DType> a, std::optional<DType> b, const Expr& e,
                             const SourceLoc& where) {
    if (a && b && *a != *b) {
      error(where, std::string("type mismatch in '") + print_expr(e) + "': " + dtype_name(*a) +
                       " and " + dtype_name(*b) + "; convert explicitly with f32/f64/i32(...)");
    }
    return a ? a : b;
  }

  // A temporary without an initial value holds garbage until a statement writes it (the
  // interpreter fills it with NaN, generated code leaves it as it is): a statement that reads it
  // before any statement earlier in program order has written it reads memory never written.
  // i32 temporaries are the exception: they start at 0 in both.
  void unwritten_reads(const Expr& e) {
    if (e.kind == ExprKind::kLoad) read_of(e.access);
    for (const auto& a : e.args) unwritten_reads(*a);
  }
  void read_of(const Access& a) {
    const BufferDecl* b = p_->find_buffer(a.buffer);
    if (!b || b->role != Role::kTemp || b->init || b->dtype == DType::kI32) return;
    if (written_.count(a.buffer) || !reported_.insert(a.buffer).second) return;
    error(a.loc, "temporary '" + a.buffer +
                     "' is read here before any statement writes it (it "
                     "has no initial value): '" +
                     print_access(a) + "' would read memory never written");
  }

  // Indirect reads are of inputs: nothing the kernel writes is read through an index it cannot
  // analyse, so every dependence the moves test stays exact.
  void indirect_reads(const Expr& e) {
    if (e.kind == ExprKind::kLoad && e.access.indirect()) {
      const BufferDecl* b = p_->find_buffer(e.access.buffer);
      if (b && b->role != Role::kInput)
        error(e.access.loc, "'" + print_access(e.access) + "' reads " + role_name(b->role) + " '" +
                                b->name +
                                "' through an indirect index: only inputs may be read that way");
    }
    for (const auto& a : e.args) indirect_reads(*a);
  }

  void stmt(const Stmt& s) {
    unwritten_reads(*s.rhs);
    if (s.op != Reduce::kNone) read_of(s.lhs);
    written_.insert(s.lhs.buffer);
    const BufferDecl* target = access(s.lhs);
    if (target && target->role == Role::kInput)
      error(s.lhs.loc, "cannot write to input '" + target->name + "'");
    if (s.lhs.indirect())
      error(s.lhs.loc, "'" + print_access(s.lhs) +
                           "' writes through an indirect index (a scatter): not supported yet; "
                           "indirect indices may stand in reads only");
    indirect_reads(*s.rhs);
    auto t = type_of(*s.rhs, s.loc);
    // A narrow target (bf16, f16, i8, u8) takes a value of its compute type, narrowed as stored.
    const DType want = target ? compute_type(target->dtype) : DType::kF32;
    if (target && t && *t != want) {
      error(s.loc,
            std::string("type mismatch: '") + target->name + "' is " + dtype_name(target->dtype) +
                (want != target->dtype ? std::string(" (computed in ") + dtype_name(want) + ")"
                                       : std::string()) +
                " but the value is " + dtype_name(*t) + "; convert explicitly with " +
                dtype_name(want) + "(...)");
    }
  }

  const Program* p_ = nullptr;
  std::set<std::string> written_, reported_;
  std::vector<int64_t> extents_;
  std::vector<std::pair<SourceLoc, bool>>
      open_;          ///< each open scope: where, and whether it has a child
  bool any_ = false;  ///< the top level has a scope or statement
  std::vector<Diagnostic> errors_;
};

std::vector<Diagnostic> check_program(const Program& p) {
  StreamChecker::Impl c;
  c.declarations(p);
  c.body(p.body);
  return c.finish();
}

StreamChecker::StreamChecker() : impl_(std::make_unique<Impl>()) {}
StreamChecker::~StreamChecker() = default;
void StreamChecker::declarations(const Program& header) { impl_->declarations(header); }
void StreamChecker::open_scope(int64_t extent, std::string, Annot, SourceLoc loc,
                               ScopeBounds bounds) {
  impl_->open_scope(extent, loc, bounds);
}
void StreamChecker::close_scope() { impl_->close_scope(); }
void StreamChecker::statement(Stmt s) { impl_->statement(s); }
std::vector<Diagnostic> StreamChecker::finish() { return impl_->finish(); }

void CheckedStream::declarations(const Program& header) {
  checker.declarations(header);
  hasher.declarations(header);
}

void CheckedStream::open_scope(int64_t extent, std::string extent_name, Annot annot, SourceLoc loc,
                               ScopeBounds bounds) {
  ++scopes;
  hasher.open_scope(extent, extent_name, annot, loc, bounds);
  checker.open_scope(extent, std::move(extent_name), annot, std::move(loc), std::move(bounds));
}

void CheckedStream::close_scope() {
  hasher.close_scope();
  checker.close_scope();
}

void CheckedStream::statement(Stmt s) {
  ++statements;
  hasher.statement(s);
  checker.statement(std::move(s));
}

}  // namespace perfdojo::ir
