#include "ir/interp.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
  switch (t) {
    case DType::kF32: return static_cast<double>(static_cast<float>(v));
    case DType::kF64: return v;
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
};

// Thrown at the first read of a never-written element (InterpretOptions).
struct UninitialisedRead {
  const Access* access;
  int64_t offset;
};

class Interpreter {
 public:
  Interpreter(const Program& p, TensorMap& mem, std::map<std::string, std::vector<char>>* written)
      : p_(p), mem_(mem), written_(written) {}

  void run() { body(p_.body); }

 private:
  void body(const std::vector<NodePtr>& nodes) {
    for (const auto& n : nodes) {
      if (n->is_scope) {
        iters_.push_back(0);
        for (int64_t i = 0; i < n->extent; ++i) {
          iters_.back() = i;
          body(n->body);
        }
        iters_.pop_back();
      } else {
        stmt(n->stmt);
      }
    }
  }

  Resolved& resolve(const Access& a) {
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
    return cache_.emplace(&a, std::move(r)).first->second;
  }

  int64_t offset(const Access& a, const Resolved& r) const {
    int64_t off = 0;
    for (size_t d = 0; d < a.index.size(); ++d) {
      const Affine& ix = a.index[d];
      int64_t v = ix.constant;
      for (size_t k = 0; k < ix.coeffs.size(); ++k) v += ix.coeffs[k] * iters_[k];
      off += v * r.strides[d];
    }
    return off;
  }

  // The element `a` reads now.
  double element(const Access& a) {
    Resolved& r = resolve(a);
    const int64_t off = offset(a, r);
    if (r.written && !(*r.written)[off]) throw UninitialisedRead{&a, off};
    return r.tensor->data[off];
  }

  // The type an expression computes in, or nullopt for a literal (it adapts to its context).
  std::optional<DType> type_of(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kConst:
      case ExprKind::kIndex: return std::nullopt;
      case ExprKind::kLoad: return resolve(e.access).tensor->dtype;
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
    }
    return std::nullopt;
  }

  // Evaluates `e` with arithmetic in type T (float, double or int32 semantics).
  template <class T>
  T eval(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kConst:
        if constexpr (std::is_integral_v<T>) return static_cast<T>(round_to(DType::kI32, e.value));
        else return static_cast<T>(e.value);
      case ExprKind::kLoad: return static_cast<T>(element(e.access));
      case ExprKind::kIndex: {
        // An integer, converted as C converts int64_t (the generated code does the same).
        const Affine& f = e.affine();
        int64_t v = f.constant;
        for (size_t k = 0; k < f.coeffs.size(); ++k) v += f.coeffs[k] * iters_[k];
        if constexpr (std::is_integral_v<T>) return static_cast<T>(round_to(DType::kI32, static_cast<double>(v)));
        else return static_cast<T>(v);
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
            if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<uint32_t>(-static_cast<int64_t>(a)));
            else return static_cast<T>(-a);
          case UnOp::kAbs:
            if constexpr (std::is_integral_v<T>) return a < 0 ? static_cast<T>(static_cast<uint32_t>(-static_cast<int64_t>(a))) : a;
            else return a < 0 ? static_cast<T>(-a) : a;
          case UnOp::kExp: return static_cast<T>(std::exp(a));
          case UnOp::kLog: return static_cast<T>(std::log(a));
          case UnOp::kSqrt: return static_cast<T>(std::sqrt(a));
          case UnOp::kRsqrt: return static_cast<T>(T(1) / static_cast<T>(std::sqrt(a)));
          case UnOp::kTanh: return static_cast<T>(std::tanh(a));
          case UnOp::kSin: return static_cast<T>(std::sin(a));
          case UnOp::kCos: return static_cast<T>(std::cos(a));
          default: return a;
        }
      }
      case ExprKind::kBinary: {
        T a = eval<T>(*e.args[0]);
        T b = eval<T>(*e.args[1]);
        return binop<T>(e.bin, a, b);
      }
      case ExprKind::kSelect: {
        // The comparison runs in its operands' own type.
        auto ct = type_of(*e.args[0]);
        if (!ct) ct = type_of(*e.args[1]);
        DType cmp_t = ct.value_or(DType::kF64);
        double l = eval_in(cmp_t, *e.args[0]), r = eval_in(cmp_t, *e.args[1]);
        bool c = false;
        switch (e.cmp) {
          case CmpOp::kLt: c = l < r; break;
          case CmpOp::kLe: c = l <= r; break;
          case CmpOp::kGt: c = l > r; break;
          case CmpOp::kGe: c = l >= r; break;
          case CmpOp::kEq: c = l == r; break;
          case CmpOp::kNe: c = l != r; break;
        }
        return c ? eval<T>(*e.args[2]) : eval<T>(*e.args[3]);
      }
    }
    return T{};
  }

  template <class T>
  static T binop(BinOp op, T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // Wrapping arithmetic in 64 bits, then back to 32: defined for every input.
      int64_t x = a, y = b;
      switch (op) {
        case BinOp::kAdd: return static_cast<T>(static_cast<uint32_t>(x + y));
        case BinOp::kSub: return static_cast<T>(static_cast<uint32_t>(x - y));
        case BinOp::kMul: return static_cast<T>(static_cast<uint32_t>(x * y));
        case BinOp::kDiv: return y == 0 ? 0 : static_cast<T>(static_cast<uint32_t>(x / y));
        case BinOp::kMax: return a > b ? a : b;
        case BinOp::kMin: return a < b ? a : b;
      }
    } else {
      switch (op) {
        case BinOp::kAdd: return a + b;
        case BinOp::kSub: return a - b;
        case BinOp::kMul: return a * b;
        case BinOp::kDiv: return a / b;
        case BinOp::kMax: return a > b ? a : b;
        case BinOp::kMin: return a < b ? a : b;
      }
    }
    return a;
  }

  double eval_in(DType t, const Expr& e) {
    switch (t) {
      case DType::kF32: return eval<float>(e);
      case DType::kF64: return eval<double>(e);
      case DType::kI32: return eval<int32_t>(e);
    }
    return 0;
  }

  template <class T>
  double combine(Reduce op, double old_v, const Expr& rhs) {
    T v = eval<T>(rhs);
    T o = static_cast<T>(old_v);
    switch (op) {
      case Reduce::kNone: return static_cast<double>(v);
      case Reduce::kAdd: return static_cast<double>(binop<T>(BinOp::kAdd, o, v));
      case Reduce::kMul: return static_cast<double>(binop<T>(BinOp::kMul, o, v));
      case Reduce::kMax: return static_cast<double>(binop<T>(BinOp::kMax, o, v));
      case Reduce::kMin: return static_cast<double>(binop<T>(BinOp::kMin, o, v));
    }
    return 0;
  }

  void stmt(const Stmt& s) {
    Resolved& r = resolve(s.lhs);
    const int64_t off = offset(s.lhs, r);
    // A reduction reads its target; a plain store does not (its right side may, checked there).
    const double old = s.op == Reduce::kNone ? 0.0 : element(s.lhs);
    DType t = r.tensor->dtype;
    double v = 0;
    switch (t) {
      case DType::kF32: v = combine<float>(s.op, old, *s.rhs); break;
      case DType::kF64: v = combine<double>(s.op, old, *s.rhs); break;
      case DType::kI32: v = combine<int32_t>(s.op, old, *s.rhs); break;
    }
    r.tensor->data[off] = round_to(t, v);
    if (r.written) (*r.written)[off] = 1;
  }

  const Program& p_;
  TensorMap& mem_;
  std::map<std::string, std::vector<char>>* written_;
  std::vector<int64_t> iters_;
  std::unordered_map<const Access*, Resolved> cache_;
};

}  // namespace

Tensor make_input(const BufferDecl& decl, uint64_t seed) {
  uint64_t h = 0x50455246444f4a4fULL;  // "PERFDOJO"
  mix(h, seed);
  for (char c : decl.name) mix(h, static_cast<unsigned char>(c));
  mix(h, decl.shape.size());
  for (auto d : decl.shape) mix(h, static_cast<uint64_t>(d));
  mix(h, static_cast<uint64_t>(decl.dtype));
  double lo = -1, hi = 1;
  if (decl.range) std::tie(lo, hi) = *decl.range;
  else if (decl.dtype == DType::kI32) lo = -8, hi = 8;
  Tensor t{decl.dtype, decl.shape, std::vector<double>(decl.elements())};
  uint64_t state = h;
  for (auto& v : t.data) {
    double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
    double x = lo + (hi - lo) * u;
    if (decl.dtype == DType::kI32) x = std::floor(x);
    v = round_to(decl.dtype, x);
    if (v >= hi && decl.dtype != DType::kI32) v = lo;  // rounding to f32 can reach hi
  }
  return t;
}

TensorMap make_inputs(const Program& p, uint64_t seed) {
  TensorMap m;
  for (const auto& b : p.buffers)
    if (b.role == Role::kInput) m.emplace(b.name, make_input(b, seed));
  return m;
}

Result<TensorMap> interpret(const Program& p, const TensorMap& inputs,
                            const InterpretOptions& options) {
  auto errors = check_program(p);
  if (!errors.empty()) return errors;
  TensorMap mem;
  for (const auto& b : p.buffers) {
    if (b.role == Role::kInput) {
      auto it = inputs.find(b.name);
      if (it == inputs.end())
        return std::vector<Diagnostic>{{b.loc, "no data given for input '" + b.name + "'"}};
      if (it->second.shape != b.shape ||
          static_cast<int64_t>(it->second.data.size()) != b.elements())
        return std::vector<Diagnostic>{{b.loc, "data for input '" + b.name + "' has the wrong shape"}};
      Tensor t = it->second;
      t.dtype = b.dtype;
      for (auto& v : t.data) v = round_to(b.dtype, v);
      mem.emplace(b.name, std::move(t));
    } else {
      double fill = b.init ? round_to(b.dtype, *b.init)
                           : (b.dtype == DType::kI32 ? 0 : std::numeric_limits<double>::quiet_NaN());
      mem.emplace(b.name, Tensor{b.dtype, b.shape, std::vector<double>(b.elements(), fill)});
    }
  }
  std::map<std::string, std::vector<char>> written;
  if (options.forbid_uninitialised_reads)
    for (const auto& b : p.buffers)
      if (b.role != Role::kInput && !b.init)
        written.emplace(b.name, std::vector<char>(static_cast<size_t>(b.elements()), 0));
  try {
    Interpreter(p, mem, options.forbid_uninitialised_reads ? &written : nullptr).run();
  } catch (const UninitialisedRead& u) {
    const BufferDecl* b = p.find_buffer(u.access->buffer);
    std::string at;
    int64_t rest = u.offset;
    for (size_t d = b->shape.size(); d-- > 0;) {
      at = std::to_string(rest % b->shape[d]) + (at.empty() ? "" : ",") + at;
      rest /= b->shape[d];
    }
    return std::vector<Diagnostic>{
        {u.access->loc, "reads " + std::string(role_name(b->role)) + " '" + b->name + "' element [" +
                            at + "] before anything wrote it (an uninitialised value)"}};
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
