#include "ir/interp.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <unordered_map>

#include "ir/check.h"

namespace perfdojo::ir {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void mix(uint64_t& h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  splitmix64(h);
}

double round_to(DType t, double v) {
  if (is_narrow(t)) return narrow_to(t, v);
  switch (t) {
    case DType::kF32:
      return static_cast<double>(static_cast<float>(v));
    case DType::kF64:
      return v;
    case DType::kI32: {
      if (std::isnan(v)) return 0;
      // Infinities saturate: `= -inf` is the identity of an i32 max reduction.
      if (std::isinf(v)) return v < 0 ? -2147483648.0 : 2147483647.0;
      double c = std::trunc(v);
      // Wrap like two's complement so overflow is defined, not UB.
      if (c >= -2147483648.0 && c <= 2147483647.0) return c;
      auto w = static_cast<uint32_t>(static_cast<int64_t>(std::fmod(c, 4294967296.0)));
      return static_cast<double>(static_cast<int32_t>(w));
    }
  }
  return v;
}

struct Resolved {
  Tensor* tensor;
  std::vector<int64_t> strides;
  std::vector<char>* written = nullptr;  // per element, when uninitialised reads are refused
  std::vector<double>* bound = nullptr;  // per element, when error bounds are tracked
  // An indirect access's index buffers, per dimension (null where the index is affine), with
  // the range of values each declares.
  std::vector<const Tensor*> gather;
  std::vector<std::pair<double, double>> gather_range;
};

// Thrown where an indirect index reads a value outside the range its buffer declares.
struct IndexOutOfRange {
  const Gather* gather;
  int64_t offset;  // of the element read in the index buffer
  double value;
};

// The unit roundoff of a type: half its epsilon (0 for i32, whose arithmetic is exact).
double unit_roundoff(DType t) {
  const auto f = float_format(t);
  return f ? std::ldexp(1.0, -f->p) : 0;
}

// exp, log, tanh, sin and cos are within a few units in the last place, in libm (about 1) and
// in libmvec (at most 4): the bound allows 4 ulps, 8 unit roundoffs.
constexpr double kMathRoundoffs = 8;

// Thrown at the first read of a never-written element (InterpretOptions).
struct UninitialisedRead {
  const Access* access;
  int64_t offset;
};

// Thrown at the first element two iterations of one :par execution touch, one writing.
struct Race {
  const Access* access;
  int64_t offset;
  const Node* scope;
  int64_t mine, other;
  bool write;        // the access that found it writes
  bool other_wrote;  // the other iteration wrote it (else read it)
};

// Who touched an element during the current :par execution.
struct Touch {
  int64_t writer = -1, reader = -1;
  bool readers = false;  // more than one iteration read it
};

class Interpreter {
 public:
  Interpreter(const Program& p, TensorMap& mem, std::map<std::string, std::vector<char>>* written,
              TensorMap* bounds = nullptr, const InterpretOptions* options = nullptr)
      : p_(p), mem_(mem), written_(written), bounds_(bounds), options_(options) {}

  void run() { body(p_.body); }

 private:
  void body(const std::vector<NodePtr>& nodes) {
    for (const auto& n : nodes) {
      if (n->is_scope) {
        if (n->annot == Annot::kVector && options_ && options_->simd_vectors && simd(*n)) continue;
        const bool par = n->annot == Annot::kParallel && options_;
        const bool watch = par && options_->detect_races && !par_scope_;
        if (watch) {
          par_scope_ = n.get();
          par_depth_ = iters_.size();
          touched_.clear();
        }
        // A bounded scope runs over its range at the enclosing iterators' values.
        const auto [first, end] = range_of(*n);
        iters_.push_back(0);
        if (par && options_->par_order != InterpretOptions::ParOrder::kForward) {
          std::vector<int64_t> order;
          for (int64_t i = first; i < end; ++i) order.push_back(i);
          if (options_->par_order == InterpretOptions::ParOrder::kReverse) {
            std::reverse(order.begin(), order.end());
          } else {
            std::mt19937_64 rng(options_->shuffle_seed ^ (0x9e3779b97f4a7c15ull * ++shuffles_));
            std::shuffle(order.begin(), order.end(), rng);
          }
          for (int64_t i : order) {
            iters_.back() = i;
            body(n->body);
          }
        } else {
          for (int64_t i = first; i < end; ++i) {
            iters_.back() = i;
            body(n->body);
          }
        }
        iters_.pop_back();
        if (watch) {
          par_scope_ = nullptr;
          touched_.clear();
        }
      } else {
        stmt(n->stmt);
      }
    }
  }

  // Records an access of element `off` of `t` by the current iteration of the watched :par
  // scope; throws Race when another iteration wrote it, or (writing) read it.
  void touch(const Access& a, const Tensor* t, int64_t off, bool write) {
    if (!par_scope_) return;
    const int64_t me = iters_[par_depth_];
    Touch& r = touched_[{t, off}];
    if (r.writer >= 0 && r.writer != me) throw Race{&a, off, par_scope_, me, r.writer, write, true};
    if (write) {
      if (r.reader >= 0 && (r.reader != me || r.readers))
        throw Race{&a, off, par_scope_, me, r.reader != me ? r.reader : -1, true, false};
      r.writer = me;
    } else if (r.reader < 0) {
      r.reader = me;
    } else if (r.reader != me) {
      r.readers = true;
    }
  }

  // Every statement execution resolves each of its accesses: a direct-mapped front of
  // pointers (kFront slots by the access's address) answers nearly all of them without the hash
  // map's division and chain. The map's nodes never move, so the pointers stay valid.
  Resolved& resolve(const Access& a) {
    FrontSlot& slot = front_[(reinterpret_cast<uintptr_t>(&a) >> 4) % kFront];
    if (slot.key == &a) return *slot.value;
    Resolved& r = resolve_slow(a);
    slot = {&a, &r};
    return r;
  }

  Resolved& resolve_slow(const Access& a) {
    auto it = cache_.find(&a);
    if (it != cache_.end()) return it->second;
    Tensor& t = mem_.at(a.buffer);
    Resolved r{&t, std::vector<int64_t>(t.shape.size(), 1)};
    for (int i = static_cast<int>(t.shape.size()) - 2; i >= 0; --i)
      r.strides[i] = r.strides[i + 1] * t.shape[i + 1];
    if (written_) {
      auto w = written_->find(a.buffer);
      if (w != written_->end()) r.written = &w->second;
    }
    if (bounds_) r.bound = &bounds_->at(a.buffer).data;
    if (a.indirect()) {
      r.gather.assign(a.index.size(), nullptr);
      r.gather_range.resize(a.index.size());
      for (size_t d = 0; d < a.index.size(); ++d) {
        const Gather* g = a.gather_at(d);
        if (!g) continue;
        r.gather[d] = &mem_.at(g->buffer);
        r.gather_range[d] = *p_.find_buffer(g->buffer)->range;
      }
    }
    return cache_.emplace(&a, std::move(r)).first->second;
  }

  int64_t offset(const Access& a, const Resolved& r) const {
    int64_t off = 0;
    for (size_t d = 0; d < a.index.size(); ++d) {
      off += evaluate(a.index[d], iters_.data()) * r.strides[d];
    }
    if (a.indirect()) off += gathered(a, r);
    return off;
  }

  // A scope's range at the enclosing iterators' values; an indirect bound reads its index
  // buffer, whose value must lie in its declared range.
  std::pair<int64_t, int64_t> range_of(const Node& n) const {
    if (!n.bounds.indirect()) return scope_range(n.extent, n.bounds, iters_.data());
    return scope_range(n.extent, n.bounds, iters_.data(), [&](const Gather& g) {
      return index_value(g, mem_.at(g.buffer), *p_.find_buffer(g.buffer)->range);
    });
  }

  // The indirect terms' part of an access's offset.
  int64_t gathered(const Access& a, const Resolved& r) const {
    int64_t off = 0;
    for (size_t d = 0; d < a.index.size(); ++d)
      if (const Gather* g = a.gather_at(d))
        off += index_value(*g, *r.gather[d], r.gather_range[d]) * r.strides[d];
    return off;
  }

  // The element of index buffer `t` that `g` reads now. It must lie in the buffer's declared
  // `range` (the checker's proof of the access's bounds rests on it), else the run stops before
  // the read that would use it.
  int64_t index_value(const Gather& g, const Tensor& t, std::pair<double, double> range) const {
    int64_t at = 0, stride = 1;
    for (int i = static_cast<int>(g.index.size()) - 1; i >= 0; --i) {
      at += evaluate(g.index[i], iters_.data()) * stride;
      stride *= t.shape[i];
    }
    const double v = t.data[at];
    if (!(v >= range.first && v < range.second)) throw IndexOutOfRange{&g, at, v};
    return static_cast<int64_t>(v);
  }

  // The element `a` reads now.
  double element(const Access& a) {
    Resolved& r = resolve(a);
    const int64_t off = offset(a, r);
    if (r.written && !(*r.written)[off]) throw UninitialisedRead{&a, off};
    touch(a, r.tensor, off, false);
    return r.tensor->data[off];
  }

  // The type an expression computes in, or nullopt for a literal (it adapts to its context).
  std::optional<DType> type_of(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kConst:
      case ExprKind::kIndex:
        return std::nullopt;
      case ExprKind::kLoad:  // a narrow element widens to its compute type
        return compute_type(resolve(e.access).tensor->dtype);
      case ExprKind::kUnary:
        if (e.un == UnOp::kCastF32) return DType::kF32;
        if (e.un == UnOp::kCastF64) return DType::kF64;
        if (e.un == UnOp::kCastI32) return DType::kI32;
        return type_of(*e.args[0]);
      case ExprKind::kBinary: {
        auto a = type_of(*e.args[0]);
        return a ? a : type_of(*e.args[1]);
      }
      case ExprKind::kSelect: {
        auto a = type_of(*e.args[2]);
        return a ? a : type_of(*e.args[3]);
      }
      case ExprKind::kFma: {
        auto a = type_of(*e.args[0]);
        if (!a) a = type_of(*e.args[1]);
        return a ? a : type_of(*e.args[2]);
      }
    }
    return std::nullopt;
  }

  // Evaluates `e` with arithmetic in type T (float, double or int32 semantics).
  template <class T>
  T eval(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kConst:
        if constexpr (std::is_integral_v<T>)
          return static_cast<T>(round_to(DType::kI32, e.value));
        else
          return static_cast<T>(e.value);
      case ExprKind::kLoad:
        return static_cast<T>(element(e.access));
      case ExprKind::kIndex: {
        // An integer, converted as C converts int64_t (the generated code does the same).
        const int64_t v = evaluate(e.affine(), iters_.data());
        if constexpr (std::is_integral_v<T>)
          return static_cast<T>(round_to(DType::kI32, static_cast<double>(v)));
        else
          return static_cast<T>(v);
      }
      case ExprKind::kUnary: {
        if (e.un == UnOp::kCastF32 || e.un == UnOp::kCastF64 || e.un == UnOp::kCastI32) {
          double v = eval_in(type_of(*e.args[0]).value_or(DType::kF64), *e.args[0]);
          return static_cast<T>(round_to(e.un == UnOp::kCastF32   ? DType::kF32
                                         : e.un == UnOp::kCastF64 ? DType::kF64
                                                                  : DType::kI32,
                                         v));
        }
        T a = eval<T>(*e.args[0]);
        switch (e.un) {
          case UnOp::kNeg:
            if constexpr (std::is_integral_v<T>)
              return static_cast<T>(static_cast<uint32_t>(-static_cast<int64_t>(a)));
            else
              return static_cast<T>(-a);
          case UnOp::kAbs:
            if constexpr (std::is_integral_v<T>)
              return a < 0 ? static_cast<T>(static_cast<uint32_t>(-static_cast<int64_t>(a))) : a;
            else
              return a < 0 ? static_cast<T>(-a) : a;
          case UnOp::kExp:
            return static_cast<T>(std::exp(a));
          case UnOp::kLog:
            return static_cast<T>(std::log(a));
          case UnOp::kSqrt:
            return static_cast<T>(std::sqrt(a));
          case UnOp::kRsqrt:
            return static_cast<T>(T(1) / static_cast<T>(std::sqrt(a)));
          case UnOp::kTanh:
            return static_cast<T>(std::tanh(a));
          case UnOp::kSin:
            return static_cast<T>(std::sin(a));
          case UnOp::kCos:
            return static_cast<T>(std::cos(a));
          default:
            return a;
        }
      }
      case ExprKind::kBinary: {
        T a = eval<T>(*e.args[0]);
        T b = eval<T>(*e.args[1]);
        return binop<T>(e.bin, a, b);
      }
      case ExprKind::kSelect:
        return condition(e) ? eval<T>(*e.args[2]) : eval<T>(*e.args[3]);
      case ExprKind::kFma: {
        T a = eval<T>(*e.args[0]), b = eval<T>(*e.args[1]), c = eval<T>(*e.args[2]);
        return fused<T>(a, b, c);
      }
    }
    return T{};
  }

  // A select's condition; the comparison runs in its operands' own type.
  bool condition(const Expr& e) {
    auto ct = type_of(*e.args[0]);
    if (!ct) ct = type_of(*e.args[1]);
    DType cmp_t = ct.value_or(DType::kF64);
    double l = eval_in(cmp_t, *e.args[0]), r = eval_in(cmp_t, *e.args[1]);
    switch (e.cmp) {
      case CmpOp::kLt:
        return l < r;
      case CmpOp::kLe:
        return l <= r;
      case CmpOp::kGt:
        return l > r;
      case CmpOp::kGe:
        return l >= r;
      case CmpOp::kEq:
        return l == r;
      case CmpOp::kNe:
        return l != r;
    }
    return false;
  }

  // A first-order bound on the absolute rounding error of `e` evaluated in T (running error
  // analysis, as Wilkinson's and LAPACK's tests bound it): every operation adds its own
  // rounding, u |result|, to its operands' errors scaled by how much they move the result. A
  // different order of the same operations (reassociated sums, another rounding of a product)
  // stays within a small multiple of it. A select follows the branch taken (a condition that
  // flips within the error is not modelled).
  // Infinities and NaNs are exact outcomes (correct code gets the same one), so their error is
  // 0; that also keeps -inf masks (exp(-inf - m) = 0) from spreading infinite bounds.
  template <class T>
  double error(const Expr& e) {
    if (!std::isfinite(static_cast<double>(eval<T>(e)))) return 0;
    return error_of<T>(e);
  }

  template <class T>
  double error_of(const Expr& e) {
    const double u = unit_roundoff(std::is_same_v<T, float>    ? DType::kF32
                                   : std::is_same_v<T, double> ? DType::kF64
                                                               : DType::kI32);
    if (u == 0) return 0;
    auto mag = [](double x) { return std::fabs(x); };
    switch (e.kind) {
      case ExprKind::kConst:
      case ExprKind::kIndex:
        return u * mag(static_cast<double>(eval<T>(e)));
      case ExprKind::kLoad: {
        Resolved& r = resolve(e.access);
        // A value of another type is converted, which rounds it.
        const double conv = r.tensor->dtype == DType::kF64 && !std::is_same_v<T, double>
                                ? u * mag(static_cast<double>(eval<T>(e)))
                                : 0;
        return (r.bound ? (*r.bound)[offset(e.access, r)] : 0) + conv;
      }
      case ExprKind::kUnary: {
        const double f = static_cast<double>(eval<T>(e));
        if (e.un == UnOp::kCastF32 || e.un == UnOp::kCastF64 || e.un == UnOp::kCastI32) {
          const DType ti = type_of(*e.args[0]).value_or(DType::kF64);
          double ea = error_in(ti, *e.args[0]);
          if (e.un == UnOp::kCastF32 && ti != DType::kF32) ea += 0x1.0p-24 * mag(f);
          return ea;
        }
        const double a = static_cast<double>(eval<T>(*e.args[0]));
        const double ea = error<T>(*e.args[0]);
        switch (e.un) {
          case UnOp::kNeg:
          case UnOp::kAbs:
            return ea;
          case UnOp::kExp:
            return mag(f) * ea + kMathRoundoffs * u * mag(f);
          case UnOp::kLog:
            return ea / mag(a) + kMathRoundoffs * u * mag(f);
          case UnOp::kSqrt:
            return (a > 0 ? ea / (2 * std::sqrt(a)) : std::sqrt(ea)) + u * mag(f);
          case UnOp::kRsqrt:
            return (a > 0 ? ea * mag(f) / (2 * a) : INFINITY) + 2 * u * mag(f);
          case UnOp::kTanh:
            return (1 - f * f) * ea + kMathRoundoffs * u * mag(f);
          case UnOp::kSin:
          case UnOp::kCos:
            return ea + kMathRoundoffs * u;
          default:
            return ea;
        }
      }
      case ExprKind::kBinary: {
        const double a = static_cast<double>(eval<T>(*e.args[0])),
                     b = static_cast<double>(eval<T>(*e.args[1]));
        const double ea = error<T>(*e.args[0]), eb = error<T>(*e.args[1]);
        const double f = static_cast<double>(binop<T>(e.bin, static_cast<T>(a), static_cast<T>(b)));
        switch (e.bin) {
          case BinOp::kAdd:
          case BinOp::kSub:
            return ea + eb + u * mag(f);
          case BinOp::kMul:
            return mag(b) * ea + mag(a) * eb + ea * eb + u * mag(f);
          case BinOp::kDiv:
            return (ea + mag(f) * eb) / mag(b) + u * mag(f);
          case BinOp::kMax:
          case BinOp::kMin:
            return std::max(ea, eb);
        }
        return ea + eb;
      }
      case ExprKind::kSelect:
        return condition(e) ? error<T>(*e.args[2]) : error<T>(*e.args[3]);
      case ExprKind::kFma: {
        const double a = static_cast<double>(eval<T>(*e.args[0])),
                     b = static_cast<double>(eval<T>(*e.args[1]));
        return mag(b) * error<T>(*e.args[0]) + mag(a) * error<T>(*e.args[1]) +
               error<T>(*e.args[2]) + u * mag(static_cast<double>(eval<T>(e)));
      }
    }
    return 0;
  }

  double error_in(DType t, const Expr& e) {
    switch (compute_type(t)) {
      case DType::kF32:
        return error<float>(e);
      case DType::kF64:
        return error<double>(e);
      case DType::kI32:
        return 0;
      default:  // compute_type gives f32, f64 or i32
        break;
    }
    return 0;
  }

  // The bound of the value a statement stores: its right side's, combined with the target's
  // old bound as the reduction combines the values, plus the final rounding.
  double stmt_error(const Stmt& s, DType t, double old, double old_bound, double v) {
    // A narrow target: the bound in its compute type, plus the rounding of the store.
    if (is_narrow(t))
      return stmt_error(s, compute_type(t), old, old_bound, v) + unit_roundoff(t) * std::fabs(v);
    const double u = unit_roundoff(t);
    if (u == 0 || !std::isfinite(v)) return 0;
    if (fused_update(s)) {
      const double x = eval_in(t, *s.rhs->args[0]), y = eval_in(t, *s.rhs->args[1]);
      return old_bound + std::fabs(y) * error_in(t, *s.rhs->args[0]) +
             std::fabs(x) * error_in(t, *s.rhs->args[1]) + u * std::fabs(v);
    }
    const double er = error_in(t, *s.rhs);
    switch (s.op) {
      case Reduce::kNone:
        return er;  // the right side's own rounding is its last operation's
      case Reduce::kAdd:
        return old_bound + er + u * std::fabs(v);
      case Reduce::kMul: {
        const double rv = eval_in(t, *s.rhs);
        return std::fabs(rv) * old_bound + std::fabs(old) * er + old_bound * er + u * std::fabs(v);
      }
      case Reduce::kMax:
      case Reduce::kMin:
        return std::max(old_bound, er);
    }
    return er;
  }

  // a * b + c rounded once (std::fma in float and double); integers wrap as a * b then + c do.
  template <class T>
  static T fused(T a, T b, T c) {
    if constexpr (std::is_integral_v<T>)
      return binop<T>(BinOp::kAdd, binop<T>(BinOp::kMul, a, b), c);
    else
      return std::fma(a, b, c);
  }

  template <class T>
  static T binop(BinOp op, T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // Wrapping arithmetic in 64 bits, then back to 32: defined for every input.
      int64_t x = a, y = b;
      switch (op) {
        case BinOp::kAdd:
          return static_cast<T>(static_cast<uint32_t>(x + y));
        case BinOp::kSub:
          return static_cast<T>(static_cast<uint32_t>(x - y));
        case BinOp::kMul:
          return static_cast<T>(static_cast<uint32_t>(x * y));
        case BinOp::kDiv:
          return y == 0 ? 0 : static_cast<T>(static_cast<uint32_t>(x / y));
        case BinOp::kMax:
          return a > b ? a : b;
        case BinOp::kMin:
          return a < b ? a : b;
      }
    } else {
      switch (op) {
        case BinOp::kAdd:
          return a + b;
        case BinOp::kSub:
          return a - b;
        case BinOp::kMul:
          return a * b;
        case BinOp::kDiv:
          return a / b;
        case BinOp::kMax:
          return a > b ? a : b;
        case BinOp::kMin:
          return a < b ? a : b;
      }
    }
    return a;
  }

  double eval_in(DType t, const Expr& e) {
    switch (compute_type(t)) {
      case DType::kF32:
        return eval<float>(e);
      case DType::kF64:
        return eval<double>(e);
      case DType::kI32:
        return eval<int32_t>(e);
      default:  // compute_type gives f32, f64 or i32
        break;
    }
    return 0;
  }

  template <class T>
  double combine(const Stmt& s, double old_v) {
    const Reduce op = s.op;
    T o = static_cast<T>(old_v);
    if (fused_update(s))
      return static_cast<double>(fused<T>(eval<T>(*s.rhs->args[0]), eval<T>(*s.rhs->args[1]), o));
    T v = eval<T>(*s.rhs);
    switch (op) {
      case Reduce::kNone:
        return static_cast<double>(v);
      case Reduce::kAdd:
        return static_cast<double>(binop<T>(BinOp::kAdd, o, v));
      case Reduce::kMul:
        return static_cast<double>(binop<T>(BinOp::kMul, o, v));
      case Reduce::kMax:
        return static_cast<double>(binop<T>(BinOp::kMax, o, v));
      case Reduce::kMin:
        return static_cast<double>(binop<T>(BinOp::kMin, o, v));
    }
    return 0;
  }

  // One statement's store, computed but not yet made (SIMD order computes every lane first).
  struct Pending {
    const Stmt* s;
    Resolved* r;
    int64_t off;
    double v, bound;
  };

  Pending compute(const Stmt& s) {
    Resolved& r = resolve(s.lhs);
    const int64_t off = offset(s.lhs, r);
    // A reduction reads its target; a plain store does not (its right side may, checked there).
    const double old = s.op == Reduce::kNone ? 0.0 : element(s.lhs);
    DType t = r.tensor->dtype;
    double v = 0;
    switch (compute_type(t)) {
      case DType::kF32:
        v = combine<float>(s, old);
        break;
      case DType::kF64:
        v = combine<double>(s, old);
        break;
      case DType::kI32:
        v = combine<int32_t>(s, old);
        break;
      default:  // compute_type gives f32, f64 or i32
        break;
    }
    double bound = 0;
    if (r.bound) {
      const double e =
          stmt_error(s, t, old, s.op == Reduce::kNone ? 0.0 : (*r.bound)[off], round_to(t, v));
      bound = std::isnan(e) ? INFINITY : e;
    }
    return {&s, &r, off, round_to(t, v), bound};
  }

  void commit(const Pending& w) {
    if (w.r->bound) (*w.r->bound)[w.off] = w.bound;
    touch(w.s->lhs, w.r->tensor, w.off, true);
    w.r->tensor->data[w.off] = w.v;
    if (w.r->written) (*w.r->written)[w.off] = 1;
  }

  void stmt(const Stmt& s) { commit(compute(s)); }

  // A `:vec` scope of statements run as vector code runs it: statement by statement, every
  // lane's value computed before any lane stores (a lane reads what the others held before the
  // statement). A reduction into an element every lane shares runs lane by lane: the code keeps
  // per-lane partial results for it (checked against the error bound, not here).
  bool simd(const Node& n) {
    for (const auto& c : n.body)
      if (c->is_scope) return false;
    const size_t depth = iters_.size();
    const auto [first, end] = range_of(n);
    iters_.push_back(0);
    std::vector<Pending> lanes(static_cast<size_t>(n.extent));
    for (const auto& c : n.body) {
      const Stmt& s = c->stmt;
      bool shared = s.op != Reduce::kNone;
      for (const Affine& ix : s.lhs.index)
        shared = shared && ix.coeff(static_cast<int>(depth)) == 0;
      for (int64_t l = first; l < end; ++l) {
        iters_.back() = l;
        if (shared)
          stmt(s);
        else
          lanes[l] = compute(s);
      }
      if (shared) continue;
      for (int64_t l = first; l < end; ++l) {
        iters_.back() = l;
        commit(lanes[l]);
      }
    }
    iters_.pop_back();
    return true;
  }

  struct KeyHash {
    size_t operator()(const std::pair<const Tensor*, int64_t>& k) const {
      return std::hash<const void*>{}(k.first) ^
             (static_cast<size_t>(k.second) * 0x9e3779b97f4a7c15ull);
    }
  };

  const Program& p_;
  TensorMap& mem_;
  std::map<std::string, std::vector<char>>* written_;
  TensorMap* bounds_;
  const InterpretOptions* options_;
  const Node* par_scope_ = nullptr;  // the :par scope whose iterations are watched for races
  size_t par_depth_ = 0;             // its iterator's depth
  uint64_t shuffles_ = 0;
  std::unordered_map<std::pair<const Tensor*, int64_t>, Touch, KeyHash> touched_;
  std::vector<int64_t> iters_;
  std::unordered_map<const Access*, Resolved> cache_;
  struct FrontSlot {
    const Access* key = nullptr;
    Resolved* value = nullptr;
  };
  static constexpr size_t kFront = 64;
  std::array<FrontSlot, kFront> front_{};
};

}  // namespace

std::string element_text(const std::vector<int64_t>& shape, int64_t offset) {
  std::string at;
  for (size_t d = shape.size(); d-- > 0;) {
    at = std::to_string(offset % shape[d]) + (at.empty() ? "" : ",") + at;
    offset /= shape[d];
  }
  return "[" + at + "]";
}

Tensor make_input(const BufferDecl& decl, uint64_t seed) {
  uint64_t h = 0x50455246444f4a4fULL;  // "PERFDOJO"
  mix(h, seed);
  for (char c : decl.name) mix(h, static_cast<unsigned char>(c));
  mix(h, decl.shape.size());
  for (auto d : decl.shape) mix(h, static_cast<uint64_t>(d));
  mix(h, static_cast<uint64_t>(decl.dtype));
  double lo = -1, hi = 1;
  if (decl.range)
    std::tie(lo, hi) = *decl.range;
  else if (decl.dtype == DType::kI32)
    lo = -8, hi = 8;
  else if (decl.dtype == DType::kI8)  // the whole range, as quantised data spans it
    lo = -128, hi = 128;
  else if (decl.dtype == DType::kU8)
    lo = 0, hi = 256;
  const bool integral = compute_type(decl.dtype) == DType::kI32;
  Tensor t{decl.dtype, decl.shape, std::vector<double>(decl.elements())};
  uint64_t state = h;
  for (auto& v : t.data) {
    double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
    double x = lo + (hi - lo) * u;
    if (integral) x = std::floor(x);
    v = round_to(decl.dtype, x);
    if (v >= hi && !integral) v = lo;  // rounding to f32 (or bf16, f16) can reach hi
  }
  if (decl.sorted) std::sort(t.data.begin(), t.data.end());
  return t;
}

TensorMap make_inputs(const Program& p, uint64_t seed) {
  TensorMap m;
  for (const auto& b : p.buffers)
    if (b.role == Role::kInput) m.emplace(b.name, make_input(b, seed));
  return m;
}

std::string index_range_message(const BufferDecl& b, int64_t offset, double value) {
  char v[64];
  std::snprintf(v, sizeof v, "%.17g", value);
  return "index buffer '" + b.name + "' holds " + v + " at " + element_text(b.shape, offset) +
         ", outside the range [" + std::to_string(static_cast<int64_t>(b.range->first)) + ", " +
         std::to_string(static_cast<int64_t>(b.range->second)) +
         ") it declares: an indirect index there would read outside its buffer";
}

bool used_as_index(const Program& p, const std::string& name) {
  bool found = false;
  std::function<void(const Expr&)> expr = [&](const Expr& e) {
    if (e.kind == ExprKind::kLoad)
      for (const auto& g : e.access.gather) found = found || (g && g->buffer == name);
    for (const auto& a : e.args) expr(*a);
  };
  std::function<void(const std::vector<NodePtr>&)> walk = [&](const std::vector<NodePtr>& body) {
    for (const auto& n : body) {
      if (found) return;
      if (n->is_scope) {
        for (const auto* g : {&n->bounds.lo_gather, &n->bounds.hi_gather})
          found = found || (*g && (*g)->buffer == name);
        walk(n->body);
      } else {
        expr(*n->stmt.rhs);
      }
    }
  };
  walk(p.body);
  return found;
}

std::vector<Diagnostic> check_index_data(const Program& p, const TensorMap& inputs) {
  if (!any_indirect(p.body)) return {};
  for (const auto& b : p.buffers) {
    if (b.role != Role::kInput || b.dtype != DType::kI32 || !b.range) continue;
    auto it = inputs.find(b.name);
    if (it == inputs.end() || !used_as_index(p, b.name)) continue;
    const auto& d = it->second.data;
    for (size_t i = 0; i < d.size(); ++i) {
      if (!(d[i] >= b.range->first && d[i] < b.range->second))
        return {{b.loc, index_range_message(b, static_cast<int64_t>(i), d[i])}};
      if (b.sorted && i > 0 && d[i] < d[i - 1]) {
        char m[160];
        std::snprintf(m, sizeof m, "%.17g at %s is below %.17g at %s", d[i],
                      element_text(b.shape, static_cast<int64_t>(i)).c_str(), d[i - 1],
                      element_text(b.shape, static_cast<int64_t>(i) - 1).c_str());
        return {{b.loc, "index buffer '" + b.name + "' is declared sorted but holds " + m}};
      }
    }
  }
  return {};
}

Result<TensorMap> interpret(const Program& p, const TensorMap& inputs,
                            const InterpretOptions& options) {
  auto errors = check_program(p);
  if (!errors.empty()) return errors;
  if (auto e = check_index_data(p, inputs); !e.empty()) return e;
  TensorMap mem;
  for (const auto& b : p.buffers) {
    if (b.role == Role::kInput) {
      auto it = inputs.find(b.name);
      if (it == inputs.end())
        return std::vector<Diagnostic>{{b.loc, "no data given for input '" + b.name + "'"}};
      if (it->second.shape != b.shape ||
          static_cast<int64_t>(it->second.data.size()) != b.elements())
        return std::vector<Diagnostic>{
            {b.loc, "data for input '" + b.name + "' has the wrong shape"}};
      Tensor t = it->second;
      t.dtype = b.dtype;
      for (auto& v : t.data) v = round_to(b.dtype, v);
      mem.emplace(b.name, std::move(t));
    } else {
      double fill = b.init ? round_to(b.dtype, *b.init)
                           : (compute_type(b.dtype) == DType::kI32
                                  ? 0
                                  : std::numeric_limits<double>::quiet_NaN());
      mem.emplace(b.name, Tensor{b.dtype, b.shape, std::vector<double>(b.elements(), fill)});
    }
  }
  std::map<std::string, std::vector<char>> written;
  if (options.forbid_uninitialised_reads)
    for (const auto& b : p.buffers)
      if (b.role != Role::kInput && !b.init)
        written.emplace(b.name, std::vector<char>(static_cast<size_t>(b.elements()), 0));
  if (options.error_bounds) {
    options.error_bounds->clear();
    for (const auto& [name, t] : mem)
      options.error_bounds->emplace(
          name, Tensor{DType::kF64, t.shape, std::vector<double>(t.data.size(), 0.0)});
  }
  try {
    Interpreter(p, mem, options.forbid_uninitialised_reads ? &written : nullptr,
                options.error_bounds, &options)
        .run();
  } catch (const Race& race) {
    const BufferDecl* b = p.find_buffer(race.access->buffer);
    const std::string at = element_text(b->shape, race.offset);
    const std::string other =
        race.other >= 0 ? "iteration " + std::to_string(race.other) : "other iterations";
    return std::vector<Diagnostic>{
        {race.access->loc, "data race in the :par scope at line " +
                               std::to_string(race.scope->loc.line) + ": iteration " +
                               std::to_string(race.mine) + (race.write ? " writes " : " reads ") +
                               std::string(role_name(b->role)) + " '" + b->name + "' element " +
                               at + ", which " + other + (race.other_wrote ? " wrote" : " read") +
                               " in the same execution of the scope"}};
  } catch (const IndexOutOfRange& o) {
    const BufferDecl* b = p.find_buffer(o.gather->buffer);
    return std::vector<Diagnostic>{{o.gather->loc, index_range_message(*b, o.offset, o.value)}};
  } catch (const UninitialisedRead& u) {
    const BufferDecl* b = p.find_buffer(u.access->buffer);
    const std::string at = element_text(b->shape, u.offset);
    return std::vector<Diagnostic>{
        {u.access->loc, "reads " + std::string(role_name(b->role)) + " '" + b->name + "' element " +
                            at + " before anything wrote it (an uninitialised value)"}};
  }
  return mem;
}

double max_relative_error(const Tensor& a, const Tensor& b) {
  if (a.shape != b.shape || a.data.size() != b.data.size())
    return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    double x = a.data[i], y = b.data[i];
    bool nx = std::isnan(x), ny = std::isnan(y);
    if (nx || ny) {
      if (nx != ny) return std::numeric_limits<double>::infinity();
      continue;
    }
    if (x == y) continue;  // also equal infinities
    if (std::isinf(x) || std::isinf(y)) return std::numeric_limits<double>::infinity();
    double err = std::fabs(x - y) / std::max({1.0, std::fabs(x), std::fabs(y)});
    worst = std::max(worst, err);
  }
  return worst;
}

}  // namespace perfdojo::ir
