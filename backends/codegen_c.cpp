#include "backends/codegen_c.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "ir/liveness.h"
#include "ir/print.h"

namespace perfdojo::backends {
namespace {

using ir::DType;
using Path = std::vector<int>;

// ---------------------------------------------------------------------------------------------
// Names and literals

const char* ctype(DType t) {
  switch (t) {
    case DType::kF32:
      return "float";
    case DType::kF64:
      return "double";
    case DType::kI32:
      return "int32_t";
    case DType::kBF16:  // the bits; pd_bf16_to_f32 and pd_f32_to_bf16 convert
    case DType::kF16:
      return "uint16_t";
    case DType::kI8:
      return "int8_t";
    case DType::kU8:
      return "uint8_t";
  }
  return "float";
}

// Suffix of the scalar helpers: pd_maxf (f32), pd_maxd (f64), pd_maxi (i32).
const char* sfx(DType t) {
  switch (ir::compute_type(t)) {
    case DType::kF32:
      return "f";
    case DType::kF64:
      return "d";
    case DType::kI32:
      return "i";
    default:
      break;
  }
  return "f";
}

std::string vtype(DType t, int64_t w) {
  return (t == DType::kF32 ? "f32x" : "f64x") + std::to_string(w);
}
std::string mtype(DType t, int64_t w) {
  return (t == DType::kF32 ? "m32x" : "m64x") + std::to_string(w);
}

bool is_c_reserved(const std::string& n) {
  static const std::set<std::string> kWords = {
      "auto",     "break",    "case",      "char",    "const",   "continue",
      "default",  "do",       "double",    "else",    "enum",    "extern",
      "float",    "for",      "goto",      "if",      "inline",  "int",
      "long",     "register", "restrict",  "return",  "short",   "signed",
      "sizeof",   "static",   "struct",    "switch",  "typedef", "union",
      "unsigned", "void",     "volatile",  "while",   "asm",     "typeof",
      "bool",     "true",     "false",     "int32_t", "int64_t", "uint32_t",
      "uint64_t", "size_t",   "uintptr_t", "memcpy",  "malloc",  "expf",
      "exp",      "logf",     "log",       "sqrtf",   "sqrt",    "tanhf",
      "tanh",     "trunc",    "fmod",      "errno",   "kernel",  "perfdojo_entry",
      "sin",      "sinf",     "cos",       "cosf",    "bufs",    "main",
      "I",        "NULL"};
  if (kWords.count(n) || n[0] == '_') return true;
  if (n.rfind("pd_", 0) == 0 || n.rfind("acc", 0) == 0) return true;
  // Iterators i0, i1, ... and the vector type names f32x16, m64x8, ...
  auto digits_after = [&](size_t k) {
    return n.size() > k && n.find_first_not_of("0123456789", k) == std::string::npos;
  };
  if (n[0] == 'i' && digits_after(1)) return true;
  for (const char* p : {"f32x", "f64x", "m32x", "m64x"})
    if (n.rfind(p, 0) == 0 && digits_after(4)) return true;
  // Upper-case names of three letters or more may be macros of the standard headers
  // (INFINITY, NAN, M_PI, INT32_MAX, EOF...).
  if (n.size() >= 3 &&
      n.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == std::string::npos)
    return true;
  return false;
}

// A C literal of type t holding static_cast<T>(v), as the interpreter converts constants.
std::string literal(double v, DType t) {
  if (ir::is_narrow(t)) {  // the stored bits of the narrowed value
    char buf[48];
    if (ir::compute_type(t) == DType::kI32)  // i8, u8: the saturated integer
      std::snprintf(buf, sizeof buf, "((%s)%d)", ctype(t), static_cast<int>(ir::narrow_to(t, v)));
    else
      std::snprintf(buf, sizeof buf, "((uint16_t)0x%04x)", ir::narrow_bits(t, v));
    return buf;
  }
  if (t == DType::kI32) {  // the interpreter's conversion: NaN 0, infinities saturate, wrap
    if (std::isnan(v)) return "0";
    if (std::isinf(v)) return v < 0 ? "INT32_MIN" : "INT32_MAX";
    double c = std::trunc(v);
    if (c < -2147483648.0 || c > 2147483647.0)
      c = static_cast<int32_t>(
          static_cast<uint32_t>(static_cast<int64_t>(std::fmod(c, 4294967296.0))));
    if (c == -2147483648.0) return "INT32_MIN";
    return std::to_string(static_cast<int64_t>(c));
  }
  if (std::isnan(v)) return t == DType::kF32 ? "NAN" : "((double)NAN)";
  if (std::isinf(v)) {
    std::string s = t == DType::kF32 ? "INFINITY" : "((double)INFINITY)";
    return v < 0 ? "(-" + s + ")" : s;
  }
  std::string s = ir::print_number(v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  if (t == DType::kF64) return s;
  // A float literal converts the decimal text directly; keep it only when that equals
  // (float)(double)v, else convert explicitly (double rounding is rare but real).
  if (std::strtof(s.c_str(), nullptr) == static_cast<float>(v)) return s + "f";
  return "((float)" + s + ")";
}

// Strips one pair of parentheses enclosing the whole text.
std::string unparen(const std::string& s) {
  if (s.size() < 2 || s.front() != '(' || s.back() != ')') return s;
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    if (s[i] == ')' && --depth == 0 && i + 1 != s.size()) return s;
  }
  return s.substr(1, s.size() - 2);
}

std::string comment_text(const std::string& s) {
  // A comment must not end the C comment early nor continue onto the next line.
  std::string out;
  // A backslash ending a // line would splice the next line into the comment.
  for (char c : s) out += (c == '\n' || c == '\r') ? ' ' : c == '\\' ? '/' : c;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Flattened accesses: offset = sum_k c[k] * i_k + k0, row-major.

struct Flat {
  std::vector<int64_t> c;
  int64_t k0 = 0;
  /// An indirect access's terms read from its index buffers (" + pd_idx(...) * 128"), as C; the
  /// vectorize check keeps them the same in every lane of a `:vec` scope.
  std::string gathered;
  int64_t coeff(int d) const { return d < static_cast<int>(c.size()) ? c[d] : 0; }
  bool operator==(const Flat& o) const {
    size_t n = std::max(c.size(), o.c.size());
    for (size_t d = 0; d < n; ++d)
      if (coeff(static_cast<int>(d)) != o.coeff(static_cast<int>(d))) return false;
    return k0 == o.k0 && gathered == o.gathered;
  }
};

// Whether an indirect term of `a` reads a different index element for each value of the
// iterator at depth d (a gather across a `:vec` scope's lanes).
bool gathers_along(const ir::Access& a, int d) {
  for (const auto& g : a.gather)
    if (g)
      for (const auto& ix : g->index)
        if (ix.coeff(d) != 0) return true;
  return false;
}

std::optional<DType> type_of(const ir::Program& p, const ir::Expr& e) {
  switch (e.kind) {
    case ir::ExprKind::kConst:
    case ir::ExprKind::kIndex:
      return std::nullopt;
    case ir::ExprKind::kLoad: {  // a narrow element widens to its compute type
      const ir::BufferDecl* b = p.find_buffer(e.access.buffer);
      return b ? std::optional<DType>(ir::compute_type(b->dtype)) : std::nullopt;
    }
    case ir::ExprKind::kUnary:
      if (e.un == ir::UnOp::kCastF32) return DType::kF32;
      if (e.un == ir::UnOp::kCastF64) return DType::kF64;
      if (e.un == ir::UnOp::kCastI32) return DType::kI32;
      return type_of(p, *e.args[0]);
    case ir::ExprKind::kBinary: {
      auto a = type_of(p, *e.args[0]);
      return a ? a : type_of(p, *e.args[1]);
    }
    case ir::ExprKind::kSelect: {
      auto a = type_of(p, *e.args[2]);
      return a ? a : type_of(p, *e.args[3]);
    }
    case ir::ExprKind::kFma: {
      auto a = type_of(p, *e.args[0]);
      if (!a) a = type_of(p, *e.args[1]);
      return a ? a : type_of(p, *e.args[2]);
    }
  }
  return std::nullopt;
}

bool is_cast(ir::UnOp u) {
  return u == ir::UnOp::kCastF32 || u == ir::UnOp::kCastF64 || u == ir::UnOp::kCastI32;
}

DType cast_type(ir::UnOp u) {
  return u == ir::UnOp::kCastF32   ? DType::kF32
         : u == ir::UnOp::kCastF64 ? DType::kF64
                                   : DType::kI32;
}

const char* cmp_text(ir::CmpOp c) {
  switch (c) {
    case ir::CmpOp::kLt:
      return "<";
    case ir::CmpOp::kLe:
      return "<=";
    case ir::CmpOp::kGt:
      return ">";
    case ir::CmpOp::kGe:
      return ">=";
    case ir::CmpOp::kEq:
      return "==";
    case ir::CmpOp::kNe:
      return "!=";
  }
  return "<";
}

const char* binop_text(ir::BinOp b) {
  switch (b) {
    case ir::BinOp::kAdd:
      return "+";
    case ir::BinOp::kSub:
      return "-";
    case ir::BinOp::kMul:
      return "*";
    case ir::BinOp::kDiv:
      return "/";
    default:
      return "?";
  }
}

// Every access (lhs and loads) of one statement, lhs first.
void collect_loads(const ir::Expr& e, std::vector<const ir::Access*>& out) {
  if (e.kind == ir::ExprKind::kLoad) out.push_back(&e.access);
  for (const auto& a : e.args) collect_loads(*a, out);
}

int count_accesses(const std::vector<ir::NodePtr>& body, const std::string& buf) {
  int n = 0;
  for (const auto& c : body) {
    if (c->is_scope) {
      n += count_accesses(c->body, buf);
      continue;
    }
    std::vector<const ir::Access*> loads;
    collect_loads(*c->stmt.rhs, loads);
    n += c->stmt.lhs.buffer == buf;
    for (const auto* a : loads) n += a->buffer == buf;
  }
  return n;
}

// ---------------------------------------------------------------------------------------------
// Helper functions the printed code calls; static inline, so unused ones cost nothing.

// V_fma(a, b, c): a * b + c with one rounding per lane, as the IR's fma and fused updates say.
// x86 with FMA: one vfmadd (the intrinsics of the vector's width); elsewhere fma per lane, which
// the compiler turns into the target's vector FMA where it has one (-ffp-contract=off never
// splits an explicit fma, and never makes one of a * b + c).
std::string fma_helper(DType t, int64_t w) {
  const std::string V = vtype(t, w), S = ctype(t);
  const int64_t bytes = w * (t == DType::kF32 ? 4 : 8);
  const std::string ps = t == DType::kF32 ? "ps" : "pd", f = t == DType::kF32 ? "f" : "";
  std::string s = "PD_INLINE " + V + " " + V + "_fma(" + V + " a, " + V + " b, " + V + " c) {\n";
  std::string x86;
  if (bytes == 64) x86 = "defined(__AVX512F__)";
  if (bytes == 32) x86 = "defined(__FMA__)";
  if (bytes == 16) x86 = "defined(__FMA__)";
  if (!x86.empty()) {
    const std::string pre = bytes == 64 ? "_mm512" : bytes == 32 ? "_mm256" : "_mm";
    const std::string reg = (bytes == 64   ? "__m512"
                             : bytes == 32 ? "__m256"
                                           : "__m128") +
                            std::string(t == DType::kF32 ? "" : "d");
    s += "#if defined(__x86_64__) && " + x86 + "\n  return (" + V + ")" + pre + "_fmadd_" + ps +
         "((" + reg + ")a, (" + reg + ")b, (" + reg + ")c);\n#else\n";
  }
  s += "  " + V + " r;\n  for (int l = 0; l < " + std::to_string(w) +
       "; ++l) r[l] = __builtin_fma" + f + "(a[l], b[l], c[l]);\n  return r;\n";
  if (!x86.empty()) s += "#endif\n";
  return s + "}\n";
}

// An indirect index's value (docs/ir.md, "Indirect indices"). The data is checked against the
// declared range before a kernel runs on it; a build with PERFDOJO_CHECK_INDICES also checks
// every read, reporting the buffer and the value before stopping the process.
const char* kIndexHelpers = R"(#if defined(PERFDOJO_CHECK_INDICES) && !defined(__CUDACC__)
#include <stdio.h>
PD_INLINE int64_t pd_idx(int32_t v, int64_t lo, int64_t hi, const char* name) {
  if (v < lo || v >= hi) {
    fprintf(stderr, "perfdojo: index buffer '%s' holds %d, outside the range [%lld, %lld) it declares\n",
            name, (int)v, (long long)lo, (long long)hi);
    abort();
  }
  return v;
}
#else
#define pd_idx(v, lo, hi, name) ((int64_t)(v))
#endif
)";

const char* kScalarHelpers = R"(#define PD_INLINE static inline __attribute__((always_inline))
/* max/min follow the IR: a > b ? a : b, a < b ? a : b; abs is a < 0 ? -a : a. */
PD_INLINE float pd_maxf(float a, float b) { return a > b ? a : b; }
PD_INLINE float pd_minf(float a, float b) { return a < b ? a : b; }
PD_INLINE float pd_absf(float a) { return a < 0 ? -a : a; }
PD_INLINE double pd_maxd(double a, double b) { return a > b ? a : b; }
PD_INLINE double pd_mind(double a, double b) { return a < b ? a : b; }
PD_INLINE double pd_absd(double a) { return a < 0 ? -a : a; }
/* i32 arithmetic wraps (two's complement) and x / 0 is 0, as in the interpreter. */
PD_INLINE int32_t pd_addi(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
PD_INLINE int32_t pd_subi(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
PD_INLINE int32_t pd_muli(int32_t a, int32_t b) { return (int32_t)((uint32_t)a * (uint32_t)b); }
PD_INLINE int32_t pd_divi(int32_t a, int32_t b) { return b == 0 ? 0 : (int32_t)(uint32_t)((int64_t)a / b); }
PD_INLINE int32_t pd_negi(int32_t a) { return (int32_t)(0u - (uint32_t)a); }
PD_INLINE int32_t pd_maxi(int32_t a, int32_t b) { return a > b ? a : b; }
PD_INLINE int32_t pd_mini(int32_t a, int32_t b) { return a < b ? a : b; }
PD_INLINE int32_t pd_absi(int32_t a) { return a < 0 ? pd_negi(a) : a; }
/* Conversion to i32: NaN is 0, infinities saturate, truncation toward zero, wrap-around
   outside the range (as the interpreter's round_to). */
PD_INLINE int32_t pd_to_i32(double v) {
  if (v != v) return 0;
  if (v == INFINITY) return INT32_MAX;
  if (v == -INFINITY) return INT32_MIN;
  double c = trunc(v);
  if (c >= -2147483648.0 && c <= 2147483647.0) return (int32_t)c;
  return (int32_t)(uint32_t)(int64_t)fmod(c, 4294967296.0);
}
/* Narrow types (docs/ir.md): bf16 and f16 elements are their bits in a uint16_t, widened
   exactly to float when read and rounded to nearest even when stored; i8 and u8 are read as
   int32_t and stored saturated. */
PD_INLINE float pd_bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16; float f; memcpy(&f, &x, 4); return f;
}
PD_INLINE uint16_t pd_f32_to_bf16(float f) {
  uint32_t x; memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* NaN stays NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}
PD_INLINE float pd_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  float f;
  if (e == 0x1fu) x = sign | 0x7f800000u | (m << 13);
  else if (e) x = sign | ((e + 112u) << 23) | (m << 13);
  else { f = (float)m * 0x1p-24f; memcpy(&x, &f, 4); x |= sign; }
  memcpy(&f, &x, 4);
  return f;
}
PD_INLINE uint16_t pd_f32_to_f16(float f) {
  uint32_t x; memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up: infinity */
  if (ax >= 0x38800000u) { /* a normal f16 */
    uint32_t r = ax - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }
  uint32_t e = ax >> 23;
  if (e < 102u) return (uint16_t)sign; /* below half the smallest subnormal */
  uint32_t m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e, r = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (r & 1u))) ++r;
  return (uint16_t)(sign | r);
}
PD_INLINE int8_t pd_to_i8(int32_t v) { return (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v); }
PD_INLINE uint8_t pd_to_u8(int32_t v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }
)";

// Vector helpers for one (element type, lanes) pair, GCC vector extensions (clang accepts them).
std::string vector_helpers(DType t, int64_t w, bool libmvec, bool guard_exp) {
  const std::string V = vtype(t, w), M = mtype(t, w), S = ctype(t), W = std::to_string(w);
  const std::string I = t == DType::kF32 ? "int32_t" : "int64_t";
  const std::string f = t == DType::kF32 ? "f" : "";  // libm suffix
  const std::string zero = t == DType::kF32 ? "0.0f" : "0.0";
  std::string splat;
  for (int64_t l = 0; l < w; ++l) splat += (l ? ", x" : "x");
  std::string s;
  s += "typedef " + S + " " + V + " __attribute__((vector_size(" +
       std::to_string(w * (t == DType::kF32 ? 4 : 8)) + ")));\n";
  s += "typedef " + I + " " + M + " __attribute__((vector_size(" +
       std::to_string(w * (t == DType::kF32 ? 4 : 8)) + ")));\n";
  // Unaligned, aliasing-safe loads and stores, as the intrinsics headers define _mm256_loadu_ps.
  s += "typedef " + S + " " + V + "u __attribute__((vector_size(" +
       std::to_string(w * (t == DType::kF32 ? 4 : 8)) + "), aligned(" +
       (t == DType::kF32 ? "4" : "8") + "), may_alias));\n";
  s += "PD_INLINE " + V + " " + V + "_load(const " + S + "* p) { return *(const " + V + "u*)p; }\n";
  s += "PD_INLINE void " + V + "_store(" + S + "* p, " + V + " v) { *(" + V + "u*)p = v; }\n";
  s += "PD_INLINE " + V + " " + V + "_splat(" + S + " x) { return (" + V + "){" + splat + "}; }\n";
  if (t == DType::kF32) {
    // w bf16 elements widened exactly: each one's bits are the top half of its f32's.
    s += "typedef uint16_t " + V + "h __attribute__((vector_size(" + std::to_string(2 * w) +
         "), aligned(2), may_alias));\n";
    s += "typedef uint32_t " + V + "w __attribute__((vector_size(" + std::to_string(4 * w) +
         ")));\n";
    s += "PD_INLINE " + V + " " + V + "_ldbf16(const uint16_t* p) { return (" + V +
         ")(__builtin_convertvector(*(const " + V + "h*)p, " + V + "w) << 16); }\n";
    // w i32 elements converted to f32 as a cast does (rounded to nearest): a dequantisation.
    s += "typedef int32_t " + V + "i __attribute__((vector_size(" + std::to_string(4 * w) +
         "), aligned(4), may_alias));\n";
    s += "PD_INLINE " + V + " " + V +
         "_cvti32(const int32_t* p) { return __builtin_convertvector(*(const " + V + "i*)p, " + V +
         "); }\n";
  }
  // Lanes b, b+s, b+2s, ...: integers converted as scalars are (exact, whatever their size).
  std::string iota;
  for (int64_t l = 0; l < w; ++l) iota += (l ? ", b + s * " : "b + s * ") + std::to_string(l);
  s += "PD_INLINE " + V + " " + V +
       "_iota(int64_t b, int64_t s) { typedef int64_t L __attribute__((vector_size(" +
       std::to_string(w * 8) + "))); return __builtin_convertvector((L){" + iota + "}, " + V +
       "); }\n";
  // Integer lanes of the mask's width: positions compared exactly (vexpr's integer selects).
  std::string isplat;
  for (int64_t l = 0; l < w; ++l) isplat += (l ? ", (" : "(") + I + ")x";
  // Iotas as a splat plus a constant ramp (one broadcast and one add once inlined, where lane
  // by lane construction cost an insert per lane).
  std::string ramp;
  for (int64_t l = 0; l < w; ++l) ramp += (l ? ", " : "") + std::to_string(l);
  s += "PD_INLINE " + M + " " + M + "_isplat(int64_t x) { return (" + M + "){" + isplat + "}; }\n";
  s += "PD_INLINE " + M + " " + M + "_iiota(int64_t b, int64_t s) { return " + M + "_isplat(b) + " +
       M + "_isplat(s) * (" + M + "){" + ramp + "}; }\n";
  // The same in the element type, for values known to stay below 2^24 (f32) or 2^53 (f64) in
  // magnitude: every lane an integer the type holds exactly, as converting it would give.
  s += "PD_INLINE " + V + " " + V + "_iotas(int64_t b, int64_t s) { return " + V + "_splat((" + S +
       ")b) + " + V + "_splat((" + S + ")s) * (" + V + "){" + ramp + "}; }\n";
  s += "PD_INLINE " + V + " " + V + "_sel(" + M + " m, " + V + " a, " + V + " b) { return (" + V +
       ")((m & (" + M + ")a) | (~m & (" + M + ")b)); }\n";
  s += "PD_INLINE " + V + " " + V + "_max(" + V + " a, " + V + " b) { return " + V +
       "_sel(a > b, a, b); }\n";
  s += "PD_INLINE " + V + " " + V + "_min(" + V + " a, " + V + " b) { return " + V +
       "_sel(a < b, a, b); }\n";
  s += "PD_INLINE " + V + " " + V + "_abs(" + V + " a) { return " + V + "_sel(a < " + V +
       "_splat(" + zero + "), -a, a); }\n";
  s += fma_helper(t, w);
  // exp, log, tanh, sin, cos: glibc's vector math library (libmvec, <= 4 ulp) for register-sized
  // vectors, named by the x86-64 vector function ABI (b: 16 bytes, d: 32 bytes AVX2, e: 64 bytes
  // AVX-512); otherwise one libm call per lane. sqrt per lane compiles to one instruction.
  const int64_t bytes = w * (t == DType::kF32 ? 4 : 8);
  const char* abi = bytes == 16 ? "b" : bytes == 32 ? "d" : bytes == 64 ? "e" : nullptr;
  for (const char* fn : {"exp", "log", "sqrt", "tanh", "sin", "cos"}) {
    if (libmvec && abi && std::string(fn) != "sqrt") {
      std::string vfn = std::string("_ZGV") + abi + "N" + W + "v_" + fn + f;
      s += V + " " + vfn + "(" + V + ");\n";
      if (std::string(fn) == "exp" && guard_exp) {
        // libmvec's exp sends a lane outside its fast range (results below the smallest normal or
        // above the largest finite value, infinities, NaN) to scalar code, ten times slower per
        // element: a masked softmax's exp(-inf) lanes took 3 ns each. So: a vector wholly inside
        // the range goes straight to libmvec (two compares and a branch more), one wholly below
        // ln(2^-150) (the result rounds to 0: -inf, masked scores) is 0, and a mixed one goes
        // through the edge function: 0 below, libm's scalar exp for the rest outside the range.
        const bool f32 = t == DType::kF32;
        const std::string lo = f32 ? "-87.0f" : "-708.0", hi = f32 ? "87.0f" : "708.0";
        const std::string under = f32 ? "-104.0f" : "-746.0";  // below ln(2^-150), ln(2^-1075)
        const std::string ps = f32 ? "ps" : "pd";
        const std::string lanes_mask = "0x" + std::string(w == 16  ? "FFFF"
                                                          : w == 8 ? "FF"
                                                          : w == 4 ? "F"
                                                                   : "3");
        const std::string mv = std::string(bytes == 64   ? "__m512"
                                           : bytes == 32 ? "__m256"
                                                         : "__m128") +
                               (f32 ? "" : "d");
        // A C expression: every lane of a compares so with x (AVX-512 mask compare; AVX or SSE
        // compare and movemask).
        auto all = [&](const std::string& x, const char* avx_op, const char* sse_op) {
          if (bytes == 64)
            return "(_mm512_cmp_" + ps + "_mask((" + mv + ")a, _mm512_set1_" + ps + "(" + x +
                   "), " + avx_op + ") == " + lanes_mask + ")";
          if (bytes == 32)
            return "(_mm256_movemask_" + ps + "(_mm256_cmp_" + ps + "((" + mv + ")a, _mm256_set1_" +
                   ps + "(" + x + "), " + avx_op + ")) == " + lanes_mask + ")";
          return "(_mm_movemask_" + ps + "(_mm_" + sse_op + "_" + ps + "((" + mv + ")a, _mm_set1_" +
                 ps + "(" + x + "))) == " + lanes_mask + ")";
        };
        const std::string all_ge = all(lo, "_CMP_GE_OQ", "cmpge"),
                          all_le = all(hi, "_CMP_LE_OQ", "cmple"),
                          all_lt = all(under, "_CMP_LT_OQ", "cmplt");
        s += "#include <immintrin.h>\n";
        // The edge function: lanes from ln(2^-150) up to the range's bottom (denormal results:
        // ALiBi's distant scores, masked scores minus a large max) are exp(a + 64 ln 2) * 2^-64,
        // in range and exact but for the final rounding to the denormal; only NaN and lanes above
        // the range take libm one by one.
        const std::string shift = f32 ? "44.361419555836500f" : "44.361419555836500";  // 64 ln 2
        const std::string scale = f32 ? "0x1p-64f" : "0x1p-64";
        s += "static __attribute__((noinline)) " + V + " " + V + "_exp_edge(" + V + " a) { " + M +
             " ok = (a >= " + V + "_splat(" + lo + ")) & (a <= " + V + "_splat(" + hi + ")); " + M +
             " z = a < " + V + "_splat(" + under + "); " + M + " low = ~ok & ~z & (a < " + V +
             "_splat(" + lo + ")); " + V + " r = " + vfn + "(" + V + "_sel(ok, a, " + V +
             "_sel(low, a + " + V + "_splat(" + shift + "), " + V + "_splat(" + zero +
             ")))); r = " + V + "_sel(low, r * " + V + "_splat(" + scale + "), " + V + "_sel(z, " +
             V + "_splat(" + zero + "), r)); for (int l = 0; l < " + W +
             "; ++l) if (!(ok[l] | z[l] | low[l])) r[l] = exp" + f + "(a[l]); return r; }\n";
        s += "PD_INLINE " + V + " " + V + "_exp(" + V + " a) { if (__builtin_expect(" + all_ge +
             " && " + all_le + ", 1)) return " + vfn + "(a); if (" + all_lt + ") return " + V +
             "_splat(" + zero + "); return " + V + "_exp_edge(a); }\n";
        continue;
      }
      s += "PD_INLINE " + V + " " + V + "_" + fn + "(" + V + " a) { return " + vfn + "(a); }\n";
      continue;
    }
    s += "PD_INLINE " + V + " " + V + "_" + fn + "(" + V + " a) { " + V +
         " r; for (int l = 0; l < " + W + "; ++l) r[l] = " + fn + f + "(a[l]); return r; }\n";
  }
  const std::string sx = sfx(t);
  s += "PD_INLINE " + S + " " + V + "_hadd(" + V + " v) { " + S +
       " s = v[0]; for (int l = 1; l < " + W + "; ++l) s += v[l]; return s; }\n";
  s += "PD_INLINE " + S + " " + V + "_hmul(" + V + " v) { " + S +
       " s = v[0]; for (int l = 1; l < " + W + "; ++l) s *= v[l]; return s; }\n";
  s += "PD_INLINE " + S + " " + V + "_hmax(" + V + " v) { " + S +
       " s = v[0]; for (int l = 1; l < " + W + "; ++l) s = pd_max" + sx +
       "(s, v[l]); return s; }\n";
  s += "PD_INLINE " + S + " " + V + "_hmin(" + V + " v) { " + S +
       " s = v[0]; for (int l = 1; l < " + W + "; ++l) s = pd_min" + sx +
       "(s, v[l]); return s; }\n";
  return s;
}

// ---------------------------------------------------------------------------------------------
// The printer

class Printer {
 public:
  Printer(const ir::Program& p, const CodegenOptions& o)
      : p_(p), o_(o), max_extent_(max_extent(p)) {}

  GeneratedC run() {
    name_buffers();
    Path path;
    analyse(p_.body, path, 0);
    std::string body = o_.cuda ? print_cuda() : print_kernel();
    GeneratedC g;
    g.vector_scopes = static_cast<int>(vectorised_.size());
    g.scalar_fallbacks = static_cast<int>(fallback_why_.size());
    g.streamed_stores = streams_printed_;
    g.prefetched_tiles = prefetch_blocks_;
    bool reassociates = false;
    for (const auto& [pth, acc] : acc_of_)
      reassociates =
          reassociates || acc.stmt->op == ir::Reduce::kAdd || acc.stmt->op == ir::Reduce::kMul;
    g.exact = !o_.cuda && !reassociates && !vector_math_;
    g.fuses = fuses_;
    for (const auto& [pth, why] : fallback_why_) g.notes.push_back(path_text(pth) + ": " + why);
    g.source = o_.cuda ? cuda_preamble() + body + cuda_epilogue() : preamble() + body;
    return g;
  }

 private:
  // The temporaries that are each iteration's own copy in a `:par` scope (ir::iteration_slices),
  // by the scope's path: one slice, declared inside its loop (one per thread), its first index
  // dropped (stride 0).
  std::map<Path, std::vector<std::string>> private_at_;
  std::set<std::string> sliced_;

  // Elements the kernel declares for temporary `b`: one slice of an iteration's own copy.
  int64_t declared_elements(const ir::BufferDecl& b) const {
    return sliced_.count(b.name) ? b.elements() / b.shape[0] : b.elements();
  }

  // The declaration of temporary `b`: small ones are locals the compiler may keep in
  // registers; larger ones static at the kernel's top, or on the thread's stack where each
  // thread has its own (`per_thread`; past kMaxStackTemp bytes, thread-local storage).
  static constexpr int64_t kMaxStackTemp = 256 << 10;
  void declare_temp(const ir::BufferDecl& b, bool per_thread) {
    const int64_t elements = declared_elements(b);
    const std::string decl = std::string(ctype(b.dtype)) + " " + cname_.at(b.name) + "[" +
                             std::to_string(elements) + "] __attribute__((aligned(64)));";
    const std::string what = "// temp " + b.name + ": " + ir::dtype_name(b.dtype);
    const int64_t bytes = elements * ir::dtype_bytes(b.dtype);
    if (elements <= o_.small_temp_elements)
      line(decl + "  " + what + " (small: a local the compiler may keep in registers)");
    else if (!per_thread)
      line("static " + decl + "  " + what);
    else if (bytes <= kMaxStackTemp || o_.cuda)
      line(decl + "  " + what + ", this thread's slice (each iteration's own)");
    else
      line("static __thread " + decl + "  " + what +
           ", this thread's slice (each iteration's own)");
  }

  // A vector exp, log, tanh, sin or cos was printed (libmvec or its per-lane fallback, whose
  // last bit may differ from the interpreter's libm call).
  bool vector_math_ = false;
  mutable bool fuses_ = false;  // an fma (scalar or vector) was printed

  // A vector accumulator: `chunks` registers of `lanes` lanes (acc<id>_<k>), times `copies`
  // where an unrolled scope at depth `rotate_depth` repeats its update: copy v of that scope
  // updates set v % copies, so the updates do not wait on one another's latency (an FMA or a max
  // takes 4 cycles, two issue per cycle) and the sets are combined once, after the scope.
  struct Acc {
    int id = 0;
    const ir::Stmt* stmt = nullptr;
    DType t = DType::kF32;
    int64_t lanes = 0;
    int64_t chunks = 1;
    int rotate_depth = -1;
    int64_t copies = 1;
    // Unrolled scopes between the `:vec` scope and the accumulator's block whose iterators index
    // the target (a register tile: 2 rows x 4 batches of partial sums kept across the k loop):
    // one register set per combination of their values, each summed into its own element after
    // the block. Their depths, outermost first, and extents.
    std::vector<int> tile_depths;
    std::vector<int64_t> tile_extents;
    int64_t tiles() const {
      int64_t n = 1;
      for (int64_t e : tile_extents) n *= e;
      return n;
    }
  };

  // Some statement computes an infinity from a literal (a mask's -inf): then exp meets arguments
  // outside libmvec's fast range often enough to pay for the range check (12% of a vector exp
  // otherwise: softmax's exp(s - max) never needs it). Correct either way; libmvec alone is
  // only slower on such lanes.
  static bool computes_infinity(const ir::Program& p) {
    std::function<bool(const ir::Expr&)> inf = [&](const ir::Expr& e) {
      if (e.kind == ir::ExprKind::kConst && std::isinf(e.value)) return true;
      for (const auto& a : e.args)
        if (inf(*a)) return true;
      return false;
    };
    std::function<bool(const std::vector<ir::NodePtr>&)> walk =
        [&](const std::vector<ir::NodePtr>& body) {
          for (const auto& n : body)
            if (n->is_scope ? walk(n->body) : inf(*n->stmt.rhs)) return true;
          return false;
        };
    return walk(p.body);
  }

  // Largest scope extent of the program: every iterator value lies below it.
  static int64_t max_extent(const ir::Program& p) {
    int64_t m = 1;
    std::function<void(const std::vector<ir::NodePtr>&)> walk =
        [&](const std::vector<ir::NodePtr>& body) {
          for (const auto& n : body)
            if (n->is_scope) {
              m = std::max(m, n->extent);
              walk(n->body);
            }
        };
    walk(p.body);
    return m;
  }

  // A bound on |e| when e is an integer built from iterator values and integral literals by +,
  // - and *; nullopt otherwise.
  static std::optional<double> int_bound(const ir::Expr& e, int64_t extent) {
    switch (e.kind) {
      case ir::ExprKind::kConst:
        if (e.value != std::floor(e.value) || std::abs(e.value) > 1e9) return std::nullopt;
        return std::abs(e.value);
      case ir::ExprKind::kIndex: {
        double b = std::abs(static_cast<double>(e.affine().constant));
        for (int64_t c : e.affine().coeffs)
          b += std::abs(static_cast<double>(c)) * static_cast<double>(extent);
        return b;
      }
      case ir::ExprKind::kUnary:
        if (e.un != ir::UnOp::kNeg) return std::nullopt;
        return int_bound(*e.args[0], extent);
      case ir::ExprKind::kBinary: {
        if (e.bin != ir::BinOp::kAdd && e.bin != ir::BinOp::kSub && e.bin != ir::BinOp::kMul)
          return std::nullopt;
        auto a = int_bound(*e.args[0], extent), b = int_bound(*e.args[1], extent);
        if (!a || !b) return std::nullopt;
        return e.bin == ir::BinOp::kMul ? *a * *b : *a + *b;
      }
      default:
        return std::nullopt;
    }
  }

  // A select comparing two such integers, every intermediate value below 2^30 in magnitude:
  // exact in 32-bit integer lanes, as it is in the f64 the interpreter and the scalar code use.
  bool int_comparable(const ir::Expr& e) const {
    if (e.kind != ir::ExprKind::kSelect) return false;
    auto a = int_bound(*e.args[0], max_extent_), b = int_bound(*e.args[1], max_extent_);
    return a && b && *a < 1073741824.0 && *b < 1073741824.0;
  }

  int widest_bytes(const ir::Program& p, const ir::Expr& e, int w) const {
    if (e.kind == ir::ExprKind::kLoad) {
      if (const auto* b = p.find_buffer(e.access.buffer))
        w = std::max(w, ir::dtype_bytes(b->dtype));
    }
    if (e.kind == ir::ExprKind::kUnary && is_cast(e.un)) {
      w = std::max(w, ir::dtype_bytes(cast_type(e.un)));
      // A cast's argument computes in its own type: f64 when it has none (literals, iterators).
      w = std::max(w, ir::dtype_bytes(type_of(p, *e.args[0]).value_or(DType::kF64)));
    }
    // A comparison of untyped operands runs in f64 (vexpr's select), unless both sides are
    // small integers (iterator positions): then in 32-bit lanes, or the result's width.
    if (e.kind == ir::ExprKind::kSelect && !type_of(p, *e.args[0]) && !type_of(p, *e.args[1]) &&
        !int_comparable(e))
      w = std::max(w, 8);
    for (const auto& a : e.args) w = widest_bytes(p, *a, w);
    return w;
  }

  // Lanes per native register for a statement of a `w`-lane scope: wider generic vectors are
  // lowered badly by the compiler (spills through the stack), so wide scopes print in chunks.
  int64_t chunk_lanes(const ir::Stmt& s, int64_t w) const {
    int bytes = widest_bytes(p_, *s.rhs, ir::dtype_bytes(dtype_.at(s.lhs.buffer)));
    int64_t native = std::max<int64_t>(2, o_.native_vector_bytes / bytes);
    return std::min(w, native);
  }

  static std::string path_text(const Path& p) {
    std::string s;
    for (size_t i = 0; i < p.size(); ++i) s += (i ? "." : "") + std::to_string(p[i]);
    return s;
  }

  void name_buffers() {
    std::set<std::string> used;
    for (const auto& b : p_.buffers) used.insert(b.name);
    for (const auto& b : p_.buffers) {
      std::string n = b.name;
      if (is_c_reserved(n)) {
        // A trailing underscore leaves the reserved forms (no keyword, macro or printer name
        // ends in one); repeat only to step past another buffer's name.
        do n += "_";
        while (used.count(n));
        used.insert(n);
      }
      cname_[b.name] = n;
      std::vector<int64_t> st(b.shape.size(), 1);
      for (int i = static_cast<int>(b.shape.size()) - 2; i >= 0; --i)
        st[i] = st[i + 1] * b.shape[i + 1];
      strides_[b.name] = st;
      dtype_[b.name] = b.dtype;
    }
  }

  // The row-major offset of `index` in a buffer of `strides`, affine part only.
  static Flat flat_index(const std::vector<ir::Affine>& index, const std::vector<int64_t>& st) {
    Flat f;
    for (size_t d = 0; d < index.size() && d < st.size(); ++d) {
      const ir::Affine& ix = index[d];
      f.k0 += ix.constant * st[d];
      if (f.c.size() < ix.coeffs.size()) f.c.resize(ix.coeffs.size(), 0);
      for (size_t k = 0; k < ix.coeffs.size(); ++k) f.c[k] += ix.coeffs[k] * st[d];
    }
    return f;
  }

  Flat flat(const ir::Access& a) const {
    const auto& st = strides_.at(a.buffer);
    Flat f = flat_index(a.index, st);
    for (size_t d = 0; d < a.gather.size() && d < st.size(); ++d) {
      if (const ir::Gather* g = a.gather_at(d)) {
        f.gathered += " + " + gather_value(*g);
        if (st[d] != 1) f.gathered += " * " + std::to_string(st[d]);
      }
    }
    return f;
  }

  // The offset of an indirect term's element in its index buffer.
  Flat gather_offset(const ir::Gather& g) const {
    return flat_index(g.index, strides_.at(g.buffer));
  }

  // An indirect term's value read at `pos` in its index buffer (its element's offset when ""):
  // checked against the range the buffer declares in builds with PERFDOJO_CHECK_INDICES.
  std::string gather_value(const ir::Gather& g, const std::string& pos = "") const {
    const ir::BufferDecl* b = p_.find_buffer(g.buffer);
    return "pd_idx(" + cname_.at(g.buffer) + "[" +
           (pos.empty() ? flat_text(gather_offset(g)) : pos) + "], " +
           std::to_string(static_cast<int64_t>(b->range->first)) + ", " +
           std::to_string(static_cast<int64_t>(b->range->second)) + ", \"" + g.buffer + "\")";
  }

  // "i0 * 1024 + i2 + 3"; the iterator at `drop` (a vector scope's lanes) is left out and `add`
  // added (the first lane of a chunk).
  std::string offset(const ir::Access& a, int drop = -1, int64_t add = 0) const {
    Flat f = flat(a);
    f.k0 += add;
    return flat_text(f, drop);
  }

  // An iterator value's affine function as C (int64_t arithmetic on the loop variables).
  static Flat flat_of(const ir::Affine& x, int64_t add = 0) {
    return Flat{x.coeffs, x.constant + add};
  }

  static std::string flat_text(const Flat& f, int drop = -1) {
    std::string s;
    for (size_t k = 0; k < f.c.size(); ++k) {
      int64_t c = f.c[k];
      if (c == 0 || static_cast<int>(k) == drop) continue;
      std::string term = "i" + std::to_string(k);
      int64_t m = c < 0 ? -c : c;
      if (m != 1) term += " * " + std::to_string(m);
      if (s.empty())
        s = c < 0 ? "-" + term : term;
      else
        s += (c < 0 ? " - " : " + ") + term;
    }
    if (f.k0 != 0 || s.empty()) {
      if (s.empty())
        s = std::to_string(f.k0);
      else
        s += (f.k0 < 0 ? " - " : " + ") + std::to_string(f.k0 < 0 ? -f.k0 : f.k0);
    }
    if (!f.gathered.empty()) s = s == "0" ? f.gathered.substr(3) : s + f.gathered;
    return s;
  }

  std::string access(const ir::Access& a, int drop = -1, int64_t add = 0) const {
    return cname_.at(a.buffer) + "[" + offset(a, drop, add) + "]";
  }

  // ----- scalar expressions, computed in type t exactly as the interpreter's eval<T>

  // An element of `t` as a value of its compute type: bf16 and f16 bits to float, i8 and u8 to
  // int32_t (exact); other types as they are.
  static std::string widen(const std::string& s, DType t) {
    switch (t) {
      case DType::kBF16:
        return "pd_bf16_to_f32(" + s + ")";
      case DType::kF16:
        return "pd_f16_to_f32(" + s + ")";
      case DType::kI8:
      case DType::kU8:
        return "((int32_t)" + s + ")";
      default:
        return s;
    }
  }
  // A value of compute_type(t) as stored in an element of `t`: rounded or saturated.
  static std::string narrow(const std::string& v, DType t) {
    switch (t) {
      case DType::kBF16:
        return "pd_f32_to_bf16(" + unparen(v) + ")";
      case DType::kF16:
        return "pd_f32_to_f16(" + unparen(v) + ")";
      case DType::kI8:
        return "pd_to_i8(" + unparen(v) + ")";
      case DType::kU8:
        return "pd_to_u8(" + unparen(v) + ")";
      default:
        return v;
    }
  }

  static std::string convert(const std::string& s, DType from, DType to) {
    if (from == to) return s;
    if (to == DType::kI32) return "pd_to_i32(" + unparen(s) + ")";
    return std::string("(") + ctype(to) + ")" + s;
  }

  std::string sfn(const char* fn, const std::string& a, DType t) const {
    std::string arg = unparen(a);
    switch (t) {
      case DType::kF32:
        return std::string(fn) + "f(" + arg + ")";
      case DType::kF64:
        return std::string(fn) + "(" + arg + ")";
      case DType::kI32:
        return std::string("pd_to_i32(") + fn + "((double)" + a + "))";
    }
    return arg;
  }

  std::string sexpr(const ir::Expr& e, DType t) const {
    switch (e.kind) {
      case ir::ExprKind::kConst:
        return literal(e.value, t);
      case ir::ExprKind::kLoad: {
        const DType bt = dtype_.at(e.access.buffer);
        return convert(widen(access(e.access), bt), ir::compute_type(bt), t);
      }
      case ir::ExprKind::kIndex: {  // int64_t converted as the interpreter converts it
        const std::string v = "(" + flat_text(flat_of(e.affine())) + ")";
        return t == DType::kI32 ? "pd_to_i32((double)" + v + ")"
                                : std::string("(") + ctype(t) + ")" + v;
      }
      case ir::ExprKind::kUnary: {
        if (is_cast(e.un)) {
          DType ti = type_of(p_, *e.args[0]).value_or(DType::kF64);
          DType tc = cast_type(e.un);
          return convert(convert(sexpr(*e.args[0], ti), ti, tc), tc, t);
        }
        std::string a = sexpr(*e.args[0], t);
        switch (e.un) {
          case ir::UnOp::kNeg:  // "- -1.0f", never "--1.0f" (the decrement operator)
            return t == DType::kI32 ? "pd_negi(" + unparen(a) + ")"
                                    : std::string("(-") + (a[0] == '-' ? " " : "") + a + ")";
          case ir::UnOp::kAbs:
            return std::string("pd_abs") + sfx(t) + "(" + unparen(a) + ")";
          case ir::UnOp::kExp:
            return sfn("exp", a, t);
          case ir::UnOp::kLog:
            return sfn("log", a, t);
          case ir::UnOp::kSqrt:
            return sfn("sqrt", a, t);
          case ir::UnOp::kTanh:
            return sfn("tanh", a, t);
          case ir::UnOp::kSin:
            return sfn("sin", a, t);
          case ir::UnOp::kCos:
            return sfn("cos", a, t);
          case ir::UnOp::kRsqrt:
            if (t == DType::kI32) return "pd_divi(1, " + sfn("sqrt", a, t) + ")";
            return "(" + literal(1, t) + " / " + sfn("sqrt", a, t) + ")";
          default:
            return a;
        }
      }
      case ir::ExprKind::kBinary: {
        std::string a = sexpr(*e.args[0], t), b = sexpr(*e.args[1], t);
        if (e.bin == ir::BinOp::kMax || e.bin == ir::BinOp::kMin)
          return std::string(e.bin == ir::BinOp::kMax ? "pd_max" : "pd_min") + sfx(t) + "(" +
                 unparen(a) + ", " + unparen(b) + ")";
        if (t == DType::kI32) {
          const char* fn = e.bin == ir::BinOp::kAdd   ? "pd_addi"
                           : e.bin == ir::BinOp::kSub ? "pd_subi"
                           : e.bin == ir::BinOp::kMul ? "pd_muli"
                                                      : "pd_divi";
          return std::string(fn) + "(" + unparen(a) + ", " + unparen(b) + ")";
        }
        return "(" + a + " " + binop_text(e.bin) + " " + b + ")";
      }
      case ir::ExprKind::kSelect: {
        auto ct = type_of(p_, *e.args[0]);
        if (!ct) ct = type_of(p_, *e.args[1]);
        DType tc = ct.value_or(DType::kF64);
        return "(" + sexpr(*e.args[0], tc) + " " + cmp_text(e.cmp) + " " + sexpr(*e.args[1], tc) +
               " ? " + sexpr(*e.args[2], t) + " : " + sexpr(*e.args[3], t) + ")";
      }
      case ir::ExprKind::kFma:
        return scalar_fma(sexpr(*e.args[0], t), sexpr(*e.args[1], t), sexpr(*e.args[2], t), t);
    }
    return "0";
  }

  // ----- vector expressions: lanes lane0 .. lane0 + lanes - 1 of the iterator at depth d;
  // nullopt when unsupported

  // An integer expression (int_bound accepts it) in the 32-bit lanes of t's mask type.
  std::optional<std::string> iexpr(const ir::Expr& e, DType t, int d, int64_t lanes,
                                   int64_t lane0) {
    const std::string M = mtype(t, lanes);
    switch (e.kind) {
      case ir::ExprKind::kConst:
        return M + "_isplat(" + std::to_string(static_cast<int64_t>(e.value)) + ")";
      case ir::ExprKind::kIndex: {
        const int64_t c = e.affine().coeff(d);
        const Flat f = flat_of(e.affine(), c * lane0);
        if (c == 0) return M + "_isplat(" + flat_text(f) + ")";
        return M + "_iiota(" + flat_text(f, d) + ", " + std::to_string(c) + ")";
      }
      case ir::ExprKind::kUnary: {
        auto a = iexpr(*e.args[0], t, d, lanes, lane0);
        if (!a) return std::nullopt;
        return "(-" + *a + ")";
      }
      case ir::ExprKind::kBinary: {
        auto a = iexpr(*e.args[0], t, d, lanes, lane0), b = iexpr(*e.args[1], t, d, lanes, lane0);
        if (!a || !b) return std::nullopt;
        return "(" + *a + " " + binop_text(e.bin) + " " + *b + ")";
      }
      default:
        return std::nullopt;
    }
  }

  std::optional<std::string> vexpr(const ir::Expr& e, DType t, int d, int64_t lanes,
                                   int64_t lane0 = 0) {
    if (t == DType::kI32) return std::nullopt;
    vtypes_.insert({t, lanes});
    const std::string V = vtype(t, lanes);
    switch (e.kind) {
      case ir::ExprKind::kConst:
        return V + "_splat(" + literal(e.value, t) + ")";
      case ir::ExprKind::kIndex: {
        // Invariant in the lanes: one value; else an iota of stride c from the chunk's first lane.
        const int64_t c = e.affine().coeff(d);
        const Flat f = flat_of(e.affine(), c * lane0);
        if (c == 0) return V + "_splat((" + ctype(t) + ")(" + flat_text(f) + "))";
        if (const auto b = int_bound(e, max_extent_);
            b && *b < (t == DType::kF32 ? 16777216.0 : 9e15))
          return V + "_iotas(" + flat_text(f, d) + ", " + std::to_string(c) + ")";
        return V + "_iota(" + flat_text(f, d) + ", " + std::to_string(c) + ")";
      }
      case ir::ExprKind::kLoad: {
        const DType bt = dtype_.at(e.access.buffer);
        int64_t c = flat(e.access).coeff(d);
        if (ir::is_narrow(bt) && ir::compute_type(bt) == t) {
          // bf16 widens lane by lane exactly (its bits are the f32's top half); f16 and the
          // integers only as one widened scalar splat.
          if (c == 0) return V + "_splat(" + widen(access(e.access), bt) + ")";
          if (c == 1 && bt == DType::kBF16)
            return V + "_ldbf16(&" + access(e.access, d, lane0) + ")";
          return std::nullopt;
        }
        if (bt != t) return std::nullopt;
        if (c == 1) return V + "_load(&" + access(e.access, d, lane0) + ")";
        if (c == 0) return V + "_splat(" + access(e.access) + ")";
        return std::nullopt;
      }
      case ir::ExprKind::kUnary: {
        if (is_cast(e.un)) {
          DType ti = type_of(p_, *e.args[0]).value_or(DType::kF64);
          DType tc = cast_type(e.un);
          // f32(acc[...]) of an i32 element: converted lane by lane, or one broadcast.
          const ir::Expr& arg = *e.args[0];
          if (ti == DType::kI32 && tc == DType::kF32 && t == DType::kF32 &&
              arg.kind == ir::ExprKind::kLoad && dtype_.at(arg.access.buffer) == DType::kI32) {
            const int64_t c = flat(arg.access).coeff(d);
            if (c == 0) return V + "_splat((float)" + access(arg.access) + ")";
            if (c == 1) return V + "_cvti32(&" + access(arg.access, d, lane0) + ")";
            return std::nullopt;
          }
          if (ti == DType::kI32 || tc == DType::kI32) return std::nullopt;
          auto a = vexpr(*e.args[0], ti, d, lanes, lane0);
          if (!a) return std::nullopt;
          std::string v = *a;
          vtypes_.insert({tc, lanes});
          if (ti != tc) v = "__builtin_convertvector(" + unparen(v) + ", " + vtype(tc, lanes) + ")";
          if (tc != t) v = "__builtin_convertvector(" + unparen(v) + ", " + V + ")";
          return v;
        }
        auto a = vexpr(*e.args[0], t, d, lanes, lane0);
        if (!a) return std::nullopt;
        switch (e.un) {
          case ir::UnOp::kNeg:
            return "(-" + *a + ")";
          case ir::UnOp::kAbs:
            return V + "_abs(" + unparen(*a) + ")";
          case ir::UnOp::kExp:
            vector_math_ = true;
            return V + "_exp(" + unparen(*a) + ")";
          case ir::UnOp::kLog:
            vector_math_ = true;
            return V + "_log(" + unparen(*a) + ")";
          case ir::UnOp::kSqrt:
            return V + "_sqrt(" + unparen(*a) + ")";
          case ir::UnOp::kTanh:
            vector_math_ = true;
            return V + "_tanh(" + unparen(*a) + ")";
          case ir::UnOp::kSin:
            vector_math_ = true;
            return V + "_sin(" + unparen(*a) + ")";
          case ir::UnOp::kCos:
            vector_math_ = true;
            return V + "_cos(" + unparen(*a) + ")";
          case ir::UnOp::kRsqrt:
            return "(" + V + "_splat(" + literal(1, t) + ") / " + V + "_sqrt(" + unparen(*a) + "))";
          default:
            return std::nullopt;
        }
      }
      case ir::ExprKind::kBinary: {
        auto a = vexpr(*e.args[0], t, d, lanes, lane0), b = vexpr(*e.args[1], t, d, lanes, lane0);
        if (!a || !b) return std::nullopt;
        if (e.bin == ir::BinOp::kMax || e.bin == ir::BinOp::kMin)
          return V + (e.bin == ir::BinOp::kMax ? "_max(" : "_min(") + unparen(*a) + ", " +
                 unparen(*b) + ")";
        return "(" + *a + " " + binop_text(e.bin) + " " + *b + ")";
      }
      case ir::ExprKind::kSelect: {
        auto ct = type_of(p_, *e.args[0]);
        if (!ct) ct = type_of(p_, *e.args[1]);
        // Untyped operands (literals, iterator values) compare in f64, as in the interpreter;
        // the mask is then narrowed to the result's width.
        const bool untyped = !ct;
        if (untyped && ir::dtype_bytes(t) == 4 && int_comparable(e)) {
          // Positions compared in 32-bit integer lanes: the mask comes out at the result's width.
          auto l = iexpr(*e.args[0], t, d, lanes, lane0), r = iexpr(*e.args[1], t, d, lanes, lane0);
          auto x = vexpr(*e.args[2], t, d, lanes, lane0), y = vexpr(*e.args[3], t, d, lanes, lane0);
          if (!l || !r || !x || !y) return std::nullopt;
          return V + "_sel(" + *l + " " + cmp_text(e.cmp) + " " + *r + ", " + unparen(*x) + ", " +
                 unparen(*y) + ")";
        }
        if (untyped) ct = DType::kF64;
        // A comparison's mask has its operands' element width; it must match the result's.
        if (*ct == DType::kI32 || (!untyped && ir::dtype_bytes(*ct) != ir::dtype_bytes(t)))
          return std::nullopt;
        auto l = vexpr(*e.args[0], *ct, d, lanes, lane0),
             r = vexpr(*e.args[1], *ct, d, lanes, lane0);
        auto x = vexpr(*e.args[2], t, d, lanes, lane0), y = vexpr(*e.args[3], t, d, lanes, lane0);
        if (!l || !r || !x || !y) return std::nullopt;
        std::string mask = *l + " " + cmp_text(e.cmp) + " " + *r;
        if (*ct != t) mask = "__builtin_convertvector(" + mask + ", " + mtype(t, lanes) + ")";
        return V + "_sel(" + mask + ", " + unparen(*x) + ", " + unparen(*y) + ")";
      }
      case ir::ExprKind::kFma: {
        auto a = vexpr(*e.args[0], t, d, lanes, lane0), b = vexpr(*e.args[1], t, d, lanes, lane0),
             c = vexpr(*e.args[2], t, d, lanes, lane0);
        if (!a || !b || !c) return std::nullopt;
        fuses_ = true;
        return V + "_fma(" + unparen(*a) + ", " + unparen(*b) + ", " + unparen(*c) + ")";
      }
    }
    return std::nullopt;
  }

  // ----- analysis of `:vec` scopes (before printing: accumulators are declared outside them)

  void analyse(const std::vector<ir::NodePtr>& body, Path& path, int depth) {
    for (size_t i = 0; i < body.size(); ++i) {
      const ir::Node& n = *body[i];
      path.push_back(static_cast<int>(i));
      if (n.is_scope) {
        // An iteration's own copy of a temporary (parallelize's): one per thread, declared in
        // the loop, its first index dropped.
        if (n.annot == ir::Annot::kParallel)
          if (auto own = ir::iteration_slices(p_, path); !own.empty()) {
            for (const auto& b : own) {
              sliced_.insert(b);
              strides_.at(b)[0] = 0;
            }
            private_at_[path] = std::move(own);
          }
        if (n.annot == ir::Annot::kVector && o_.vectorize) {
          std::string why = vectorisable(n, depth);
          if (why.empty()) {
            vectorised_.insert(path);
            if (!dots_.count(&n)) plan_accumulators(n, path, depth);
          } else {
            fallback_why_[path] = why;
          }
        }
        ancestors_.push_back(&n);
        analyse(n.body, path, depth + 1);
        ancestors_.pop_back();
      }
      path.pop_back();
    }
  }

  // Whether a statement stores into or reads a bf16, f16, i8 or u8 buffer.
  bool touches_narrow(const ir::Stmt& s) const {
    if (ir::is_narrow(dtype_.at(s.lhs.buffer))) return true;
    std::vector<const ir::Access*> loads;
    collect_loads(*s.rhs, loads);
    for (const auto* a : loads)
      if (ir::is_narrow(dtype_.at(a->buffer))) return true;
    return false;
  }

  // "" when the scope can be printed as vector code, else the reason it stays a loop.
  std::string vectorisable(const ir::Node& v, int d) {
    // A bounded scope prints its whole tiles as vector code and its partial ones as the loop
    // (print_bounded_vector): the loop writes memory, so no lane-invariant accumulator may hold
    // a value in registers across them.
    const bool bounded = v.bounds.any();
    int64_t w = v.extent;
    if (w < 2 || w > 64 || (w & (w - 1)) != 0)
      return "extent " + std::to_string(w) + " is not a power of two in [2, 64]";
    struct Site {
      const ir::Access* a;
      bool write;
      bool reduce;
    };
    std::vector<Site> sites;
    if (!v.body.empty() && v.body[0]->is_scope)
      return bounded ? "a bounded scope of dot products stays a loop" : dot_product_why(v, d);
    for (const auto& c : v.body) {
      if (c->is_scope) return "the body holds a nested scope";
      const ir::Stmt& s = c->stmt;
      if (dtype_.at(s.lhs.buffer) == DType::kI32) return "i32 statements stay scalar";
      if (ir::is_narrow(dtype_.at(s.lhs.buffer)))
        return "stores to bf16, f16, i8 or u8 buffers stay scalar (no vector narrowing yet)";
      sites.push_back({&s.lhs, true, s.op != ir::Reduce::kNone});
      std::vector<const ir::Access*> loads;
      collect_loads(*s.rhs, loads);
      for (const auto* a : loads) sites.push_back({a, false, false});
    }
    for (const auto& s : sites) {
      int64_t c = flat(*s.a).coeff(d);
      if (c != 0 && c != 1)
        return "access to " + s.a->buffer + " is neither unit-stride nor invariant in the lanes";
      if (gathers_along(*s.a, d))
        return "access to " + s.a->buffer +
               " reads its index buffer at a different element in "
               "each lane (a gather)";
    }
    // Lanes run each statement for all lanes before the next statement: equivalent when every
    // lane touches its own element of each written buffer, or the write is a reduction into one
    // element nothing else in the scope touches (a horizontal reduction, which reassociates).
    // Two unit-stride accesses whose offsets differ by at least the scope's extent touch
    // disjoint elements over all its lanes (y[i] and y[i+256] in one 16-lane scope).
    auto disjoint = [&](const Flat& a, const Flat& b) {
      if (a.coeff(d) != 1 || b.coeff(d) != 1) return false;
      const size_t n = std::max(a.c.size(), b.c.size());
      for (size_t k = 0; k < n; ++k)
        if (a.coeff(static_cast<int>(k)) != b.coeff(static_cast<int>(k))) return false;
      return a.k0 - b.k0 >= w || b.k0 - a.k0 >= w;
    };
    for (const auto& s : sites) {
      if (!s.write) continue;
      Flat f = flat(*s.a);
      int same_buffer = 0;
      for (const auto& o : sites) {
        if (o.a->buffer != s.a->buffer) continue;
        ++same_buffer;
        const Flat g = flat(*o.a);
        if (!(g == f) && !disjoint(f, g))
          return "buffer " + s.a->buffer + " is accessed at different elements in one lane";
      }
      if (f.coeff(d) == 0 && (!s.reduce || same_buffer != 1))
        return "every lane writes the same element of " + s.a->buffer;
      if (f.coeff(d) == 0 && bounded)
        return "a bounded scope's reduction into one element of " + s.a->buffer +
               " stays a loop (its partial tiles would bypass the vector accumulator)";
    }
    for (const auto& c : v.body) {
      DType t = dtype_.at(c->stmt.lhs.buffer);
      if (!vexpr(*c->stmt.rhs, t, d, chunk_lanes(c->stmt, w)))
        return touches_narrow(c->stmt) ? "a narrow load has no vector form (only bf16 loads "
                                         "widen lane by lane, the others as broadcasts)"
                                       : "an expression has no vector form (i32, gather or "
                                         "mixed widths)";
    }
    return "";
  }

  // A `:vec` scope of 4-term dot products (transforms/dot_product.h), checked again on the
  // flattened offsets the code uses: one scope of 4 (depth d + 1) holding `C += U * S`, C an i32
  // element per lane, U and S one u8 and one i8 operand, one broadcast (4 consecutive bytes at
  // q) and one packed (its own 4 at 4 lane + q). "" when it prints as vpdpbusd, else why not.
  std::string dot_product_why(const ir::Node& v, int d) {
    const char* shape = "the body holds a nested scope (not a 4-term u8 x i8 dot product)";
    if (v.body.size() != 1) return shape;
    const ir::Node& q = *v.body[0];
    if (q.annot != ir::Annot::kNone || q.bounds.any() || q.extent != 4 || q.body.size() != 1 ||
        q.body[0]->is_scope)
      return shape;
    const ir::Stmt& s = q.body[0]->stmt;
    const ir::Expr& e = *s.rhs;
    if (s.op != ir::Reduce::kAdd || dtype_.at(s.lhs.buffer) != DType::kI32 ||
        e.kind != ir::ExprKind::kBinary || e.bin != ir::BinOp::kMul ||
        e.args[0]->kind != ir::ExprKind::kLoad || e.args[1]->kind != ir::ExprKind::kLoad)
      return shape;
    const ir::Access* u = &e.args[0]->access;
    const ir::Access* i = &e.args[1]->access;
    if (dtype_.at(u->buffer) == DType::kI8) std::swap(u, i);
    if (dtype_.at(u->buffer) != DType::kU8 || dtype_.at(i->buffer) != DType::kI8) return shape;
    auto is = [&](const ir::Access& a, int64_t lane, int64_t step) {
      const Flat f = flat(a);
      return f.coeff(d) == lane && f.coeff(d + 1) == step;
    };
    const bool u_broadcast = is(*u, 0, 1) && is(*i, 4, 1);
    if (!is(s.lhs, 1, 0) || !(u_broadcast || (is(*i, 0, 1) && is(*u, 4, 1))))
      return "a dot-product scope's accesses are not one element per lane, 4 broadcast bytes and "
             "4 packed bytes per lane";
    const int64_t bytes = v.extent * 4;
    if (bytes != 16 && bytes != 32 && bytes != 64)
      return "a dot-product scope needs 4, 8 or 16 lanes";
    if (bytes == 16 && !o_.arm_usdot)
      return "a dot-product scope of 4 lanes needs AArch64's usdot (i8mm), which this target lacks";
    if (bytes != 16 && o_.vnni_bytes < bytes)
      return std::string("u8 x i8 dot products need ") +
             (bytes == 64 ? "AVX-512 VNNI" : "AVX-512 VNNI or AVX-VNNI") +
             " (vpdpbusd), which this target lacks";
    dots_[&v] = Dot{&s, u_broadcast ? i : u, u_broadcast ? u : i, u_broadcast};
    return "";
  }

  // Whether the `:unroll` ancestor at depth j is printed as copies (print_scope's rules: within
  // the unroll limit and the budget of nested copies).
  bool printed_unrolled(int j) const {
    if (!o_.unroll) return false;
    int64_t copies = 1;
    for (int k = 0; k <= j; ++k) {
      const ir::Node* a = ancestors_[k];
      if (a->annot != ir::Annot::kUnroll) continue;
      const bool unrolled =
          copies * a->extent <= o_.max_unrolled_copies && a->extent <= o_.max_unroll;
      if (k == j) return unrolled;
      if (unrolled) copies *= a->extent;
    }
    return false;
  }

  // A reduction into an element invariant in the lanes accumulates in a vector register, summed
  // across lanes once. The accumulator lives around the outermost enclosing scope over which the
  // element stays the same and which touches the buffer nowhere else (not past a parallel scope).
  void plan_accumulators(const ir::Node& v, const Path& path, int d) {
    int64_t accumulators = 0;  // they share kAccumulatorRegisters
    for (const auto& n : v.body)
      if (flat(n->stmt.lhs).coeff(d) == 0) ++accumulators;
    for (size_t k = 0; k < v.body.size(); ++k) {
      const ir::Stmt& s = v.body[k]->stmt;
      Flat f = flat(s.lhs);
      if (f.coeff(d) != 0) continue;
      const int64_t lanes = chunk_lanes(s, v.extent), chunks = v.extent / lanes;
      // Up over the scopes that keep the element (reductions), and over unrolled copies that
      // change it while their register sets fit: the block is the outermost reduction scope
      // reached, the tile the unrolled scopes crossed below it.
      Path lift = path;
      std::vector<int> crossed, tile;
      int64_t sets = 1;
      for (int j = d - 1; j >= 0; --j) {
        const ir::Node* a = ancestors_[j];
        if (a->annot == ir::Annot::kParallel || a->annot == ir::Annot::kGpuBlock ||
            a->annot == ir::Annot::kGpuThread)
          break;
        if (count_accesses(a->body, s.lhs.buffer) != 1) break;
        if (f.coeff(j) != 0) {
          if (o_.cuda || a->annot != ir::Annot::kUnroll || !printed_unrolled(j) ||
              sets * a->extent * chunks * accumulators > kAccumulatorRegisters)
            break;
          sets *= a->extent;
          crossed.insert(crossed.begin(), j);
          continue;
        }
        lift.resize(j + 1);
        tile = crossed;
      }
      Acc acc;
      acc.id = next_acc_++;
      acc.stmt = &s;
      acc.t = dtype_.at(s.lhs.buffer);
      acc.lanes = lanes;
      acc.chunks = chunks;
      for (int j : tile) {
        acc.tile_depths.push_back(j);
        acc.tile_extents.push_back(ancestors_[j]->extent);
      }
      // An unrolled scope right around the update, inside the accumulator's block: its copies
      // rotate over sets of registers (reassociating the reduction, as the lanes already do;
      // exact for max and min). The cost model counts the same chains.
      const int64_t rotations = kAccumulatorRegisters / (acc.chunks * accumulators);
      if (!o_.cuda && o_.unroll && tile.empty() && rotations >= 2 && d >= 1 &&
          static_cast<int>(lift.size()) - 1 <= d - 1) {
        const ir::Node* a = ancestors_[d - 1];
        if (a->annot == ir::Annot::kUnroll && a->extent >= 2 && a->extent <= o_.max_unroll) {
          acc.rotate_depth = d - 1;
          acc.copies = std::min(a->extent, rotations);
        }
      }
      Path sp = path;
      sp.push_back(static_cast<int>(k));
      acc_of_[sp] = acc;
      accs_at_[lift].push_back(acc);
    }
  }

  // ----- printing

  void line(const std::string& s) { out_ += std::string(indent_ * 2, ' ') + s + "\n"; }

  std::string print_kernel() {
    std::string sig;
    for (const auto* b : kernel_parameters(p_)) {
      if (!sig.empty()) sig += ", ";
      sig += std::string(b->role == ir::Role::kInput ? "const " : "") + ctype(b->dtype) +
             "* restrict " + cname_.at(b->name);
    }
    // Dot-product instructions: the kernel is compiled for them whatever -march says (the
    // code compiles anywhere; it runs where the backend found the feature).
    if (!dots_.empty())
      line(o_.arm_usdot ? "__attribute__((target(\"+i8mm\")))"
           : o_.vnni_bytes >= 64
               ? "__attribute__((target(\"avx512f,avx512bw,avx512vl,avx512vnni\")))"
               : "__attribute__((target(\"avx2,avxvnni\")))");
    line("void kernel(" + sig + ") {");
    ++indent_;
    for (const auto& b : p_.buffers)
      if (b.role == ir::Role::kTemp && !sliced_.count(b.name)) declare_temp(b, false);
    if (o_.inject == "segv")
      line("*(volatile float*)(uintptr_t)16 = 1.0f;  // test hook inject=segv: crash");
    if (o_.inject == "hang")
      line("for (;;) __asm__ volatile(\"\");  // test hook inject=hang: never return");
    if (o_.inject == "alloc")
      line(
          "for (;;) { volatile char* pd_p = (volatile char*)malloc((size_t)1 << 28); pd_p[0] = 1; "
          "}  // test hook inject=alloc");
    for (const auto& b : p_.buffers) {
      // (an iteration's own slice is written before it is read: its initial value is never seen)
      if (b.role == ir::Role::kInput || ir::initial_value_dead(p_, b) || sliced_.count(b.name))
        continue;
      std::optional<double> v = b.init;
      if (!v && b.role == ir::Role::kTemp && b.dtype == DType::kI32)
        v = 0;  // the interpreter's fill
      if (!v) continue;
      line("for (int64_t pd_n = 0; pd_n < " + std::to_string(b.elements()) + "; ++pd_n) " +
           cname_.at(b.name) + "[pd_n] = " + literal(*v, b.dtype) + ";  // " + b.name + " = " +
           ir::print_number(*v));
    }
    Path path;
    print_body(p_.body, path, 0);
    if (o_.inject == "wrong" || o_.inject == "uninit") {
      for (const auto* b : kernel_parameters(p_)) {
        if (b->role != ir::Role::kOutput) continue;
        if (o_.inject == "wrong")
          line(cname_.at(b->name) + "[0] += " + literal(1, b->dtype) +
               ";  // test hook inject=wrong");
        else
          line("{ " + std::string(ctype(b->dtype)) + "* pd_u = malloc(64); " + cname_.at(b->name) +
               "[0] += pd_u[3]; free(pd_u); }  // test hook inject=uninit: reads memory never "
               "written");
        break;
      }
    }
    if (streams_printed_ > 0)
      line("_mm_sfence();  // streaming stores drain before the kernel returns");
    --indent_;
    line("}");
    line("");
    std::string args;
    auto params = kernel_parameters(p_);
    for (size_t i = 0; i < params.size(); ++i) {
      if (i) args += ", ";
      args += std::string("(") + (params[i]->role == ir::Role::kInput ? "const " : "") +
              ctype(params[i]->dtype) + "*)bufs[" + std::to_string(i) + "]";
    }
    line("void perfdojo_entry(void* const* bufs) { kernel(" + args + "); }");
    return out_;
  }

  void print_body(const std::vector<ir::NodePtr>& body, Path& path, int depth) {
    for (size_t i = 0; i < body.size(); ++i) {
      path.push_back(static_cast<int>(i));
      print_node(*body[i], path, depth);
      path.pop_back();
    }
  }

  static const char* reduce_name(ir::Reduce r) {
    switch (r) {
      case ir::Reduce::kAdd:
        return "hadd";
      case ir::Reduce::kMul:
        return "hmul";
      case ir::Reduce::kMax:
        return "hmax";
      case ir::Reduce::kMin:
        return "hmin";
      default:
        return "";
    }
  }

  static std::string identity(ir::Reduce r, DType t) {
    switch (r) {
      case ir::Reduce::kMul:
        return literal(1, t);
      case ir::Reduce::kMax:
        return literal(-INFINITY, t);
      case ir::Reduce::kMin:
        return literal(INFINITY, t);
      default:
        return literal(0, t);
    }
  }

  void print_node(const ir::Node& n, Path& path, int depth) {
    if (!n.is_scope) {
      print_scalar_stmt(n.stmt);
      return;
    }
    auto accs = accs_at_.find(path);
    if (accs != accs_at_.end()) {
      line("{");
      ++indent_;
      for (const auto& a : accs->second) {
        std::string V = vtype(a.t, a.lanes), decl;
        for (int64_t k = 0; k < a.chunks * a.copies * a.tiles(); ++k)
          decl += (k ? ", " : "") + acc_name(a.id, k) + " = " + V + "_splat(" +
                  identity(a.stmt->op, a.t) + ")";
        line(V + " " + decl + ";  // lanes of " + comment_text(ir::print_stmt(*a.stmt)));
      }
    }
    print_scope(n, path, depth);
    if (accs != accs_at_.end()) {
      for (const auto& a : accs->second) {
        const std::string lhs = access(a.stmt->lhs), V = vtype(a.t, a.lanes);
        const int64_t per_tile = a.chunks * a.copies;
        for (int64_t t = 0; t < a.tiles(); ++t) {
          std::string all = acc_name(a.id, t * per_tile);
          for (int64_t k = 1; k < per_tile; ++k)
            all = unparen(combine_vector(a.stmt->op, V, all, acc_name(a.id, t * per_tile + k)));
          const std::string h = V + "_" + reduce_name(a.stmt->op) + "(" + all + ")";
          if (a.tile_depths.empty()) {
            line(combine_scalar(a.stmt->op, a.t, lhs, h) + "  // sum across lanes");
            continue;
          }
          // The tile's element: its unrolled iterators at this register set's values.
          std::string values;
          for (int64_t m = static_cast<int64_t>(a.tile_depths.size()) - 1, rest = t; m >= 0; --m) {
            values = "const int64_t i" + std::to_string(a.tile_depths[m]) + " = " +
                     std::to_string(rest % a.tile_extents[m]) + "; " + values;
            rest /= a.tile_extents[m];
          }
          line("{ " + values + combine_scalar(a.stmt->op, a.t, lhs, h) + " }  // sum across lanes");
        }
      }
      --indent_;
      line("}");
    }
  }

  // The reduction `op` of the old value `old` with `v`, as an expression in type t.
  static std::string combined(ir::Reduce op, DType t, const std::string& old,
                              const std::string& v) {
    switch (op) {
      case ir::Reduce::kNone:
        return v;
      case ir::Reduce::kAdd:
        return t == DType::kI32 ? "pd_addi(" + old + ", " + v + ")" : "(" + old + " + " + v + ")";
      case ir::Reduce::kMul:
        return t == DType::kI32 ? "pd_muli(" + old + ", " + v + ")" : "(" + old + " * " + v + ")";
      case ir::Reduce::kMax:
        return std::string("pd_max") + sfx(t) + "(" + old + ", " + v + ")";
      case ir::Reduce::kMin:
        return std::string("pd_min") + sfx(t) + "(" + old + ", " + v + ")";
    }
    return v;
  }

  // The statement updating `lhs` by `op` with `v` (floats keep C's += and *=, the same sums).
  static std::string combine_scalar(ir::Reduce op, DType t, const std::string& lhs,
                                    const std::string& v) {
    if (t != DType::kI32 && op == ir::Reduce::kAdd) return lhs + " += " + v + ";";
    if (t != DType::kI32 && op == ir::Reduce::kMul) return lhs + " *= " + v + ";";
    return lhs + " = " + combined(op, t, lhs, v) + ";";
  }

  void print_scalar_stmt(const ir::Stmt& s) {
    DType t = dtype_.at(s.lhs.buffer);
    line("// " + comment_text(ir::print_stmt(s)));
    if (ir::is_narrow(t)) {
      // Computed in the compute type from the widened old value, narrowed once as stored.
      const DType ct = ir::compute_type(t);
      const std::string lhs = access(s.lhs), old = widen(lhs, t);
      std::string v;
      if (ir::fused_update(s)) {
        v = scalar_fma(sexpr(*s.rhs->args[0], ct), sexpr(*s.rhs->args[1], ct), old, ct);
      } else {
        v = combined(s.op, ct, old, unparen(sexpr(*s.rhs, ct)));
      }
      line(lhs + " = " + narrow(v, t) + ";");
      return;
    }
    if (ir::fused_update(s)) {
      const std::string lhs = access(s.lhs);
      line(lhs + " = " + scalar_fma(sexpr(*s.rhs->args[0], t), sexpr(*s.rhs->args[1], t), lhs, t) +
           ";");
      return;
    }
    line(combine_scalar(s.op, t, access(s.lhs), unparen(sexpr(*s.rhs, t))));
  }

  // a * b + c with one rounding (C's fma); i32 wraps as the product and sum do.
  std::string scalar_fma(const std::string& a, const std::string& b, const std::string& c,
                         DType t) const {
    fuses_ = true;
    if (t == DType::kI32)
      return "pd_addi(pd_muli(" + unparen(a) + ", " + unparen(b) + "), " + unparen(c) + ")";
    return std::string(t == DType::kF32 ? "fmaf(" : "fma(") + unparen(a) + ", " + unparen(b) +
           ", " + unparen(c) + ")";
  }

  // A temporary the kernel declares as a local (registers, once its indices are constants).
  bool local_temp(const std::string& name) const {
    const ir::BufferDecl* b = p_.find_buffer(name);
    return b && b->role == ir::Role::kTemp && declared_elements(*b) <= o_.small_temp_elements;
  }

  // Each statement instance of a fully unrolled nest (every scope `:unroll` or `:vec`):
  // `fn(stmt, values)` with values[k] the value of the nest's k-th scope's iterator. False when
  // the nest has another scope or more instances than `left` allows.
  template <class Fn>
  static bool each_unrolled(const ir::Node& n, std::vector<int64_t>& values, int64_t& left,
                            Fn&& fn) {
    if (!n.is_scope) {
      if (--left < 0) return false;
      fn(n.stmt, values);
      return true;
    }
    if (n.annot != ir::Annot::kUnroll && n.annot != ir::Annot::kVector) return false;
    if (n.bounds.any()) return false;
    for (int64_t v = 0; v < n.extent; ++v) {
      values.push_back(v);
      for (const auto& c : n.body)
        if (!each_unrolled(*c, values, left, fn)) return false;
      values.pop_back();
    }
    return true;
  }

  // Inside the loop `loop` (iterator i<depth>): when `copy` fills a register tile (a local
  // temporary) from another buffer in a fully unrolled nest and a loop follows it (the tile's
  // updates), prints prefetches of the lines that copy reads in the loop's next iteration, so
  // that they arrive while this iteration's updates run, as BLIS's micro-kernels prefetch the
  // next tile of C. A hint only: nothing is read, and only lines the next iteration reads.
  void prefetch_next_tile(const ir::Node& loop, int depth, const ir::Node& copy,
                          const ir::Node& next) {
    if (!o_.prefetch_tiles || o_.cuda || !o_.unroll || loop.extent < 2 || loop.bounds.any() ||
        !copy.is_scope || !next.is_scope || next.annot != ir::Annot::kNone)
      return;
    // Byte offsets of every element the copy reads in the next iteration, from the part of the
    // address the enclosing loops give, per buffer and that part.
    struct Reads {
      const ir::Access* access;  // one access of the group: its enclosing-loop part
      std::set<int64_t> offsets;
    };
    std::map<std::pair<std::string, std::string>, Reads> groups;
    bool ok = true;
    std::vector<int64_t> values;
    int64_t left = 1024;
    const bool full =
        each_unrolled(copy, values, left, [&](const ir::Stmt& st, const std::vector<int64_t>& v) {
          if (!ok) return;
          if (st.op != ir::Reduce::kNone || st.rhs->kind != ir::ExprKind::kLoad ||
              !local_temp(st.lhs.buffer) || local_temp(st.rhs->access.buffer)) {
            ok = false;
            return;
          }
          const ir::Access& a = st.rhs->access;
          Flat f = flat(a);
          if (a.indirect() || static_cast<int>(f.c.size()) <= depth || f.c[depth] == 0) {
            ok = false;  // the next iteration reads the same elements: nothing to fetch
            return;
          }
          int64_t k0 = f.k0 + f.c[depth];
          for (size_t k = 0; k < v.size(); ++k)
            if (depth + 1 + static_cast<int>(k) < static_cast<int>(f.c.size()))
              k0 += f.c[depth + 1 + k] * v[k];
          f.c.resize(depth + 1);
          f.k0 = 0;
          auto& group = groups.try_emplace({a.buffer, flat_text(f)}, Reads{&a, {}}).first->second;
          group.offsets.insert(k0 * ir::dtype_bytes(dtype_.at(a.buffer)));
        });
    if (!full || !ok || groups.empty()) return;
    std::vector<std::string> out;
    for (const auto& [key, group] : groups) {
      const int64_t esz = ir::dtype_bytes(dtype_.at(key.first));
      const int write = p_.find_buffer(key.first)->role == ir::Role::kInput ? 0 : 1;
      Flat g = flat(*group.access);
      g.c.resize(depth + 1);
      int64_t last = INT64_MIN;
      for (int64_t o : group.offsets) {
        if (last != INT64_MIN && o < last + 64) continue;
        last = o;
        g.k0 = o / esz;
        out.push_back("__builtin_prefetch(&" + cname_.at(key.first) + "[" + flat_text(g) + "], " +
                      std::to_string(write) + ", 3);");
      }
    }
    if (out.size() > 32) return;  // a tile this large hides its own latency; keep the code small
    const std::string it = "i" + std::to_string(depth);
    line("if (" + it + " + 1 < " + std::to_string(loop.extent) + ") {  // the lines the next " +
         it + " copies into its register tile, fetched during the loop below");
    ++indent_;
    for (const auto& l : out) line(l);
    --indent_;
    line("}");
    ++prefetch_blocks_;
  }

  // At the top of the loop `loop` (iterator i<depth>): for each indirect read below it whose
  // index element this loop walks in order (coefficient 1 in the index buffer's offset, nothing
  // deeper), prefetch the table row named gather_prefetch elements further on in the index
  // buffer (clamped to its last element: every read stays inside it), at most 16 lines. A hint:
  // the row is never read by it, and its address lies inside the table.
  void prefetch_gathered_rows(const ir::Node& loop, int depth) {
    if (o_.gather_prefetch <= 0 || o_.cuda || !ir::any_indirect(loop.body)) return;
    std::vector<const ir::Access*> loads;
    std::function<void(const ir::Node&)> walk = [&](const ir::Node& n) {
      if (!n.is_scope) return collect_loads(*n.stmt.rhs, loads);
      for (const auto& c : n.body) walk(*c);
    };
    walk(loop);
    std::set<std::string> printed;
    for (const ir::Access* a : loads) {
      if (!a->indirect()) continue;
      const auto& st = strides_.at(a->buffer);
      const int64_t esz = ir::dtype_bytes(dtype_.at(a->buffer));
      for (size_t d = 0; d < a->index.size(); ++d) {
        const ir::Gather* g = a->gather_at(d);
        if (!g || st[d] * esz < 64) continue;  // rows under a line: nothing to gain
        // The index element's offset in its buffer, walked by this loop alone.
        const Flat at = gather_offset(*g);
        bool deeper = false;
        for (size_t k = depth + 1; k < at.c.size(); ++k) deeper = deeper || at.c[k] != 0;
        if (at.coeff(depth) != 1 || deeper) continue;
        const ir::BufferDecl* ib = p_.find_buffer(g->buffer);
        const std::string last = std::to_string(ib->elements() - 1);
        const std::string ahead = "(" + flat_text(at) + " + " + std::to_string(o_.gather_prefetch);
        const std::string pos = ahead + " < " + last + " ? " + ahead + ") : " + last + ")";
        // The row's start: every dimension at its value from the enclosing loops (the indirect
        // term aside), the loops at this depth and inside at their first values.
        Flat row = flat_index(a->index, st);
        if (row.c.size() > static_cast<size_t>(depth)) row.c.resize(depth);
        const std::string value = gather_value(*g, pos);
        // Lines of the row from its start, inside it; from elsewhere in the row (the enclosing
        // loops pick a part of it) the one line there.
        const bool whole = row.k0 == 0 && std::all_of(row.c.begin(), row.c.end(),
                                                      [](int64_t c) { return c == 0; });
        const int64_t per_line = std::max<int64_t>(1, 64 / esz);
        const int64_t lines = whole ? std::min<int64_t>(16, (st[d] * esz + 63) / 64) : 1;
        const std::string base = flat_text(row);
        const std::string key = cname_.at(a->buffer) + "|" + value + "|" + base;
        if (!printed.insert(key).second) continue;
        line("{  // the row " + g->buffer + " names " + std::to_string(o_.gather_prefetch) +
             " elements on, fetched while this one is read");
        ++indent_;
        line("const int64_t pd_row = " + value + " * " + std::to_string(st[d]) + " + " + base +
             ";");
        for (int64_t j = 0; j < lines; ++j)
          line("__builtin_prefetch(&" + cname_.at(a->buffer) + "[pd_row + " +
               std::to_string(j * per_line) + "], 0, 3);");
        --indent_;
        line("}");
      }
    }
  }

  // A scope's iterator range as C: its first value and one past its last. A bounded scope's
  // bounds are clamped to [0, extent) (docs/ir.md), written out rather than through helpers so
  // that the host loops of CUDA launches print them too.
  std::pair<std::string, std::string> loop_range(const ir::Node& n) const {
    std::string first = "0", end = std::to_string(n.extent);
    auto bound = [&](const ir::Affine& a, const std::optional<ir::Gather>& g) {
      Flat f = flat_of(a);
      if (g) f.gathered = " + " + gather_value(*g);  // an indirect bound: a CSR row's range
      return "(" + flat_text(f) + ")";
    };
    if (n.bounds.lo) {
      const std::string lo = bound(*n.bounds.lo, n.bounds.lo_gather);
      first = "(" + lo + " > 0 ? " + lo + " : 0)";
    }
    if (n.bounds.hi) {
      const std::string hi = bound(*n.bounds.hi, n.bounds.hi_gather);
      end = "(" + hi + " < " + end + " ? " + hi + " : " + end + ")";
    }
    return {first, end};
  }

  void plain_loop(const ir::Node& n, Path& path, int depth, bool fence_streams = false) {
    std::string it = "i" + std::to_string(depth);
    const auto [first, end] = loop_range(n);
    line("for (int64_t " + it + " = " + first + "; " + it + " < " + end + "; ++" + it + ") {");
    ++indent_;
    if (auto own = private_at_.find(path); own != private_at_.end())
      for (const auto& b : own->second) declare_temp(*p_.find_buffer(b), true);
    const int streams_before = streams_printed_;
    prefetch_gathered_rows(n, depth);
    for (size_t i = 0; i < n.body.size(); ++i) {
      path.push_back(static_cast<int>(i));
      print_node(*n.body[i], path, depth + 1);
      path.pop_back();
      if (i + 1 < n.body.size()) prefetch_next_tile(n, depth, *n.body[i], *n.body[i + 1]);
    }
    if (fence_streams && streams_printed_ > streams_before)
      line("_mm_sfence();  // this thread's streaming stores drain before the loop's barrier");
    --indent_;
    line("}");
  }

  void print_scope(const ir::Node& n, Path& path, int depth) {
    std::string it = "i" + std::to_string(depth);
    switch (n.annot) {
      case ir::Annot::kVector:
        if (vectorised_.count(path)) {
          if (n.bounds.any()) return print_bounded_vector(n, path, depth);
          return dots_.count(&n) ? print_dot_scope(n, depth) : print_vector_scope(n, path, depth);
        }
        if (auto w = fallback_why_.find(path); w != fallback_why_.end())
          line("// :vec scope kept scalar: " + w->second);
        return plain_loop(n, path, depth);
      case ir::Annot::kParallel: {
        if (o_.parallel)
          line("#pragma omp parallel for schedule(static)" +
               (o_.threads > 0 ? " num_threads(" + std::to_string(o_.threads) + ")"
                               : std::string()));
        // Each thread's streaming stores drain before the parallel loop's barrier publishes them.
        return plain_loop(n, path, depth, o_.parallel);
      }
      case ir::Annot::kUnroll:
        if (!o_.unroll || n.bounds.any()) return plain_loop(n, path, depth);
        if (copies_ * n.extent > o_.max_unrolled_copies) {
          // Nested unrolling multiplies code size; past the budget the compiler decides.
          line("// :unroll " + std::to_string(n.extent) +
               " left as a loop: nested unrolling would exceed " +
               std::to_string(o_.max_unrolled_copies) + " copies");
          return plain_loop(n, path, depth);
        }
        if (n.extent > o_.max_unroll) {
          line("#pragma GCC unroll " + std::to_string(n.extent));
          return plain_loop(n, path, depth);
        }
        copies_ *= n.extent;
        for (int64_t v = 0; v < n.extent; ++v) {
          line("{  // " + it + " = " + std::to_string(v) + " (:unroll " + std::to_string(n.extent) +
               ")");
          ++indent_;
          line("const int64_t " + it + " = " + std::to_string(v) + ";");
          unrolled_copy_[depth] = v;
          print_body(n.body, path, depth + 1);
          unrolled_copy_.erase(depth);
          --indent_;
          line("}");
        }
        copies_ /= n.extent;
        return;
      default:
        return plain_loop(n, path, depth);
    }
  }

  static std::string acc_name(int id, int64_t chunk) {
    return "acc" + std::to_string(id) + "_" + std::to_string(chunk);
  }

  // A bounded `:vec` scope: where its bounds keep every lane (a whole tile) the vector code,
  // elsewhere the loop over the lanes inside them (vectorisable: no accumulator across them).
  void print_bounded_vector(const ir::Node& v, Path& path, int d) {
    const auto [first, end] = loop_range(v);
    line("if (" + first + " == 0 && " + end + " == " + std::to_string(v.extent) +
         ") {  // every lane of the bounded i" + std::to_string(d) + " is inside its bounds");
    ++indent_;
    print_vector_scope(v, path, d);
    --indent_;
    line("} else {  // a partial tile: the lanes inside the bounds, one at a time");
    ++indent_;
    plain_loop(v, path, d);
    --indent_;
    line("}");
  }

  void print_vector_scope(const ir::Node& v, Path& path, int d) {
    line("{  // " + std::to_string(v.extent) + " lanes of i" + std::to_string(d) + " (:vec)");
    ++indent_;
    for (size_t k = 0; k < v.body.size(); ++k) {
      const ir::Stmt& s = v.body[k]->stmt;
      DType t = dtype_.at(s.lhs.buffer);
      int64_t lanes = chunk_lanes(s, v.extent);
      const std::string V = vtype(t, lanes);
      line("// " + comment_text(ir::print_stmt(s)) +
           (lanes < v.extent ? "  (" + std::to_string(v.extent / lanes) + " registers of " +
                                   std::to_string(lanes) + ")"
                             : ""));
      path.push_back(static_cast<int>(k));
      auto acc = acc_of_.find(path);
      path.pop_back();
      for (int64_t c = 0; c < v.extent / lanes; ++c) {
        std::string rhs = unparen(*vexpr(*s.rhs, t, d, lanes, c * lanes));
        // A fused update adds x * y to the old value with one rounding: V_fma(x, y, old).
        const bool fused = ir::fused_update(s);
        auto update = [&](const std::string& old) {
          if (!fused) return unparen(combine_vector(s.op, V, old, rhs));
          fuses_ = true;
          return V + "_fma(" + unparen(*vexpr(*s.rhs->args[0], t, d, lanes, c * lanes)) + ", " +
                 unparen(*vexpr(*s.rhs->args[1], t, d, lanes, c * lanes)) + ", " + old + ")";
        };
        if (acc != acc_of_.end()) {
          // The register set of this unrolled copy (the first where the scope printed as a loop).
          const Acc& info = acc->second;
          auto copy = unrolled_copy_.find(info.rotate_depth);
          const int64_t set = copy == unrolled_copy_.end() ? 0 : copy->second % info.copies;
          int64_t tile = 0;  // the register set of the tile element these copies update
          for (size_t m = 0; m < info.tile_depths.size(); ++m)
            tile = tile * info.tile_extents[m] + unrolled_copy_.at(info.tile_depths[m]);
          std::string a = acc_name(info.id, c + info.chunks * (set + info.copies * tile));
          line(a + " = " + update(a) + ";");
          continue;
        }
        std::string addr = "&" + access(s.lhs, d, c * lanes);
        if (s.op == ir::Reduce::kNone && streams(s.lhs.buffer, t, lanes)) {
          line(V + "_stream(" + addr + ", " + rhs + ");");
          stream_types_.insert({t, lanes});
          ++streams_printed_;
        } else if (s.op == ir::Reduce::kNone)
          line(V + "_store(" + addr + ", " + rhs + ");");
        else
          line(V + "_store(" + addr + ", " + update(V + "_load(" + addr + ")") + ");");
      }
    }
    --indent_;
    line("}");
  }

  // The address of `a` at a dot-product scope's lane 0 and q = 0 (the scope at depth d).
  std::string dot_address(const ir::Access& a, int d) const {
    Flat f = flat(a);
    for (int k : {d, d + 1})
      if (k < static_cast<int>(f.c.size())) f.c[k] = 0;
    return "&" + cname_.at(a.buffer) + "[" + flat_text(f) + "]";
  }

  // AArch64's usdot: 4 i32 lanes, each adding its 4 u8 x i8 products (exact, as vpdpbusd).
  void print_usdot_scope(const ir::Node& v, int d) {
    const Dot& dot = dots_.at(&v);
    line("{  // 4 lanes of i" + std::to_string(d) +
         " (:vec), each the sum of 4 u8 x i8 products over i" + std::to_string(d + 1) + " (usdot)");
    ++indent_;
    line("// " + comment_text(ir::print_stmt(*dot.stmt)));
    auto at = [&](const ir::Access& a) { return dot_address(a, d); };
    const ir::Access& packed = *dot.packed;
    const ir::Access& bcast = *dot.broadcast;
    const std::string b = "vreinterpretq_u8_s32(vdupq_n_s32(pd_load4(" + at(bcast) + ")))";
    const std::string c = at(dot.stmt->lhs);
    if (dot.unsigned_broadcast)
      line("vst1q_s32(" + c + ", vusdotq_s32(vld1q_s32(" + c + "), " + b + ", vld1q_s8(" +
           at(packed) + ")));");
    else
      line("vst1q_s32(" + c + ", vusdotq_s32(vld1q_s32(" + c + "), vld1q_u8(" + at(packed) +
           "), vreinterpretq_s8_u8(" + b + ")));");
    --indent_;
    line("}");
  }

  // One vpdpbusd per register: every lane adds its 4 products (u8 x i8, summed in i32 with
  // wrap-around, as the interpreter's i32 adds) to its element; exact in any order.
  void print_dot_scope(const ir::Node& v, int d) {
    if (v.extent == 4) return print_usdot_scope(v, d);
    const Dot& dot = dots_.at(&v);
    const bool wide = v.extent == 16;
    const std::string T = wide ? "__m512i" : "__m256i";
    const std::string dp = wide                  ? "_mm512_dpbusd_epi32"
                           : o_.vnni_bytes >= 64 ? "_mm256_dpbusd_epi32"
                                                 : "_mm256_dpbusd_avx_epi32";
    line("{  // " + std::to_string(v.extent) + " lanes of i" + std::to_string(d) +
         " (:vec), each the sum of 4 u8 x i8 products over i" + std::to_string(d + 1) +
         " (vpdpbusd)");
    ++indent_;
    line("// " + comment_text(ir::print_stmt(*dot.stmt)));
    auto at = [&](const ir::Access& a) { return dot_address(a, d); };
    const ir::Access& packed = *dot.packed;
    const ir::Access& bcast = *dot.broadcast;
    const std::string load =
        wide ? "_mm512_loadu_si512((const void*)" : "_mm256_loadu_si256((const __m256i*)";
    const std::string set1 = wide ? "_mm512_set1_epi32" : "_mm256_set1_epi32";
    line("const " + T + " pd_p = " + load + at(packed) + ");");
    line("const " + T + " pd_b = " + set1 + "(pd_load4(" + at(bcast) + "));");
    const std::string c = at(dot.stmt->lhs);
    const std::string old = wide ? "_mm512_loadu_si512((const void*)" + c + ")"
                                 : "_mm256_loadu_si256((const __m256i*)" + c + ")";
    const std::string sum =
        dp + "(" + old + ", " + (dot.unsigned_broadcast ? "pd_b, pd_p" : "pd_p, pd_b") + ")";
    line(wide ? "_mm512_storeu_si512((void*)" + c + ", " + sum + ");"
              : "_mm256_storeu_si256((__m256i*)" + c + ", " + sum + ");");
    --indent_;
    line("}");
  }

  // Whether a vector store of `lanes` lanes to `buffer` is printed as a non-temporal store: the
  // buffer is declared `stream`, the target has them, and the vector is one of x86's widths.
  bool streams(const std::string& buffer, DType t, int64_t lanes) const {
    if (!o_.stream_stores || o_.cuda) return false;
    const ir::BufferDecl* b = p_.find_buffer(buffer);
    const int64_t bytes = lanes * ir::dtype_bytes(t);
    return b && b->stream && (bytes == 16 || bytes == 32 || bytes == 64);
  }

  // The non-temporal store of one vector type: _mm*_stream_* where the address is aligned to
  // the vector (a requirement of the instruction), a plain store elsewhere.
  static std::string stream_helper(DType t, int64_t lanes) {
    const std::string V = vtype(t, lanes), S = ctype(t);
    const int64_t bytes = lanes * ir::dtype_bytes(t);
    const std::string pre = bytes == 64 ? "_mm512" : bytes == 32 ? "_mm256" : "_mm";
    const std::string reg = bytes == 64 ? "__m512" : bytes == 32 ? "__m256" : "__m128";
    std::string call;
    if (t == DType::kF32)
      call = pre + "_stream_ps(p, (" + reg + ")v)";
    else if (t == DType::kF64)
      call = pre + "_stream_pd(p, (" + reg + "d)v)";
    else
      call = pre + "_stream_si" + std::to_string(bytes * 8) + "((" + reg + "i*)p, (" + reg + "i)v)";
    return "PD_INLINE void " + V + "_stream(" + S + "* p, " + V + " v) { if (((uintptr_t)p & " +
           std::to_string(bytes - 1) + ") == 0) " + call + "; else " + V + "_store(p, v); }\n";
  }

  static std::string combine_vector(ir::Reduce op, const std::string& V, const std::string& old,
                                    const std::string& v) {
    switch (op) {
      case ir::Reduce::kAdd:
        return "(" + old + " + " + v + ")";
      case ir::Reduce::kMul:
        return "(" + old + " * " + v + ")";
      case ir::Reduce::kMax:
        return V + "_max(" + old + ", " + v + ")";
      case ir::Reduce::kMin:
        return V + "_min(" + old + ", " + v + ")";
      default:
        return v;
    }
  }

  // ----- CUDA

  static constexpr int kCudaBlock = 256;

  // Every buffer, as each node kernel takes them (inputs const).
  std::string cuda_params(bool with_types) const {
    std::string s;
    for (const auto& b : p_.buffers) {
      if (!s.empty()) s += ", ";
      if (with_types)
        s += std::string(b.role == ir::Role::kInput ? "const " : "") + ctype(b.dtype) +
             "* restrict ";
      s += cname_.at(b.name);
    }
    return s;
  }

  static std::string blocks_for(int64_t n) {
    return std::to_string(
        std::max<int64_t>(1, std::min<int64_t>((n + kCudaBlock - 1) / kCudaBlock, 65535)));
  }

  std::string print_cuda() {
    const std::string sig = cuda_params(true);
    // Initial values, grid-stride.
    line("__global__ void pd_init(" + sig + ") {");
    ++indent_;
    line("const int64_t pd_t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;");
    line("const int64_t pd_s = (int64_t)gridDim.x * blockDim.x;");
    int64_t largest = 1;
    for (const auto& b : p_.buffers) {
      if (b.role == ir::Role::kInput || ir::initial_value_dead(p_, b) || sliced_.count(b.name))
        continue;
      std::optional<double> v = b.init;
      if (!v && b.role == ir::Role::kTemp && b.dtype == DType::kI32)
        v = 0;  // the interpreter's fill
      if (!v) continue;
      largest = std::max(largest, b.elements());
      line("for (int64_t pd_n = pd_t; pd_n < " + std::to_string(b.elements()) + "; pd_n += pd_s) " +
           cname_.at(b.name) + "[pd_n] = " + literal(*v, b.dtype) + ";  // " + b.name + " = " +
           ir::print_number(*v));
    }
    --indent_;
    line("}");
    line("");
    std::vector<std::string> launches = {"pd_init<<<" + blocks_for(largest) + ", " +
                                         std::to_string(kCudaBlock) + ">>>(ARGS)"};
    for (size_t i = 0; i < p_.body.size(); ++i) {
      const ir::Node& n = *p_.body[i];
      Path path{static_cast<int>(i)};
      const std::string name = "pd_node" + std::to_string(i);
      // The scopes above the nest's first `:par` scope, when each holds only the next: they
      // become host loops around the launch (a grid-wide barrier between their iterations).
      std::vector<const ir::Node*> chain;
      const ir::Node* par = &n;
      while (par->is_scope && par->annot != ir::Annot::kParallel && par->body.size() == 1 &&
             par->body[0]->is_scope) {
        chain.push_back(par);
        par = par->body[0].get();
        path.push_back(0);
      }
      if (!(par->is_scope && par->annot == ir::Annot::kParallel)) {
        chain.clear();
        par = nullptr;
        path = Path{static_cast<int>(i)};
      }
      std::string outer_sig;
      for (size_t d = 0; d < chain.size(); ++d)
        outer_sig += ", const int64_t i" + std::to_string(d);
      line("__global__ void " + name + "(" + sig + outer_sig + ") {");
      ++indent_;
      if (par) {
        const std::string it = "i" + std::to_string(chain.size());
        line("// :par " + std::to_string(par->extent) + ": one thread per iteration" +
             (chain.empty()
                  ? ""
                  : "; the " + std::to_string(chain.size()) + " scopes above it loop on the host"));
        line("const int64_t " + it + " = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;");
        line("if (" + it + " >= " + std::to_string(par->extent) + ") return;");
        if (par->bounds.any()) {  // a bounded scope: the threads outside its range at i0.. idle
          const auto [first, end] = loop_range(*par);
          line("if (" + it + " < " + first + " || " + it + " >= " + end + ") return;");
        }
        // This thread's own copies of the iteration-private temporaries (in a block of their
        // own: they hide the shared buffers the kernel is passed).
        const auto own = private_at_.find(path);
        if (own != private_at_.end()) {
          line("{");
          ++indent_;
          for (const auto& b : own->second) declare_temp(*p_.find_buffer(b), true);
        }
        print_body(par->body, path, static_cast<int>(chain.size()) + 1);
        if (own != private_at_.end()) {
          --indent_;
          line("}");
        }
        std::string launch;
        for (size_t d = 0; d < chain.size(); ++d) {
          const auto [first, end] = loop_range(*chain[d]);
          launch += "for (int64_t i" + std::to_string(d) + " = " + first + "; i" +
                    std::to_string(d) + " < " + end + "; ++i" + std::to_string(d) + ") ";
        }
        std::string outer_args;
        for (size_t d = 0; d < chain.size(); ++d) outer_args += ", i" + std::to_string(d);
        launches.push_back(launch + name + "<<<" + blocks_for(par->extent) + ", " +
                           std::to_string(kCudaBlock) + ">>>(ARGS" + outer_args + ")");
      } else {
        line("// no :par scope at the top of this nest: one thread runs it");
        print_node(n, path, 0);
        launches.push_back(name + "<<<1, 1>>>(ARGS)");
      }
      --indent_;
      line("}");
      line("");
    }
    // Host: device buffers, copies in, the launches in program order, copies out.
    const auto params = kernel_parameters(p_);
    line(std::string(o_.cuda_namespace.empty() ? "extern \"C\" " : "") +
         "int perfdojo_entry(void* const* bufs) {");
    ++indent_;
    line("cudaError_t pd_e = cudaSuccess;");
    for (const auto& b : p_.buffers)
      line(std::string(ctype(b.dtype)) + "* " + cname_.at(b.name) + " = 0;");
    line("do {");
    ++indent_;
    for (const auto& b : p_.buffers)
      line("if ((pd_e = cudaMalloc((void**)&" + cname_.at(b.name) + ", " +
           std::to_string(b.elements() * ir::dtype_bytes(b.dtype)) + ")) != cudaSuccess) break;");
    for (size_t i = 0; i < params.size(); ++i)
      line("if ((pd_e = cudaMemcpy(" + cname_.at(params[i]->name) + ", bufs[" + std::to_string(i) +
           "], " + std::to_string(params[i]->elements() * ir::dtype_bytes(params[i]->dtype)) +
           ", cudaMemcpyHostToDevice)) != cudaSuccess) break;");
    const std::string args = cuda_params(false);
    for (auto l : launches) line(l.replace(l.find("ARGS"), 4, args) + ";");
    line("if ((pd_e = cudaGetLastError()) != cudaSuccess) break;");
    line("if ((pd_e = cudaDeviceSynchronize()) != cudaSuccess) break;");
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i]->role == ir::Role::kOutput)
        line("if ((pd_e = cudaMemcpy(bufs[" + std::to_string(i) + "], " +
             cname_.at(params[i]->name) + ", " +
             std::to_string(params[i]->elements() * ir::dtype_bytes(params[i]->dtype)) +
             ", cudaMemcpyDeviceToHost)) != cudaSuccess) break;");
    --indent_;
    line("} while (0);");
    for (const auto& b : p_.buffers) line("cudaFree(" + cname_.at(b.name) + ");");
    line("return (int)pd_e;");
    --indent_;
    line("}");
    return out_;
  }

  std::string cuda_preamble() const {
    std::string s = "// Generated by PerfDojo's C printer (" + std::string(kCodegenVersion) +
                    ", CUDA) for " + o_.target + ".\n";
    s += "// IR structural hash " + std::to_string(ir::structural_hash(p_)) + "\n";
    s += "#include <cuda_runtime.h>\n#include <math.h>\n#include <stdint.h>\n#include "
         "<stdlib.h>\n\n";
    std::string helpers = kScalarHelpers;
    const std::string host = "#define PD_INLINE static inline __attribute__((always_inline))";
    helpers.replace(helpers.find(host), host.size(),
                    "#define PD_INLINE static __device__ __forceinline__");
    s += "#ifndef restrict\n#define restrict __restrict__\n#endif\n";
    if (!o_.cuda_namespace.empty()) s += "namespace " + o_.cuda_namespace + " {\n";
    if (ir::any_indirect(p_.body)) helpers += kIndexHelpers;
    return s + helpers + "\n";
  }

  std::string cuda_epilogue() const {
    return o_.cuda_namespace.empty() ? "" : "}  // namespace " + o_.cuda_namespace + "\n";
  }

  std::string preamble() const {
    std::string s = "// Generated by PerfDojo's C printer (" + std::string(kCodegenVersion) +
                    ") for " + o_.target + ".\n";
    std::istringstream doc(p_.doc);
    std::string l;
    if (std::getline(doc, l) && !l.empty())
      s += "//" + comment_text(l[0] == ' ' ? l : " " + l) + "\n";
    s += "// IR structural hash " + std::to_string(ir::structural_hash(p_)) + "\n";
    s += "#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n";
    s += "#if defined(__x86_64__) && !defined(__CUDACC__)\n#include <immintrin.h>\n#endif\n";
    if (o_.arm_usdot && !dots_.empty()) s += "#include <arm_neon.h>\n";
    s += "\n";
    s += kScalarHelpers;
    if (ir::any_indirect(p_.body)) s += kIndexHelpers;
    const bool guard_exp = computes_infinity(p_);
    for (const auto& [t, w] : vtypes_) s += vector_helpers(t, w, o_.libmvec, guard_exp);
    if (!dots_.empty())  // a dot product's 4 broadcast bytes, from any alignment
      s += "PD_INLINE int32_t pd_load4(const void* p) { int32_t v; memcpy(&v, p, 4); return v; }\n";
    if (!stream_types_.empty()) {
      s += "#include <immintrin.h>\n";
      for (const auto& [t, w] : stream_types_) s += stream_helper(t, w);
    }
    return s + "\n";
  }

  const ir::Program& p_;
  const CodegenOptions& o_;
  std::map<std::string, std::string> cname_;
  std::map<std::string, std::vector<int64_t>> strides_;
  std::map<std::string, DType> dtype_;
  std::vector<const ir::Node*> ancestors_;
  const int64_t max_extent_;  ///< largest scope extent: every iterator value lies below it
  std::set<Path> vectorised_;
  struct Dot {
    const ir::Stmt* stmt;
    const ir::Access* packed;     ///< 4 bytes of its own per lane
    const ir::Access* broadcast;  ///< the same 4 bytes for every lane
    bool unsigned_broadcast;      ///< the broadcast operand is the u8 one
  };
  std::map<const ir::Node*, Dot> dots_;  ///< `:vec` scopes printed as dot-product instructions
  std::map<Path, std::string> fallback_why_;
  std::map<Path, std::vector<Acc>> accs_at_;
  std::map<Path, Acc> acc_of_;            // by the path of its update
  std::map<int, int64_t> unrolled_copy_;  // depth -> the copy an unrolled scope is printing
  std::set<std::pair<DType, int64_t>> vtypes_;
  int next_acc_ = 0;
  std::set<std::pair<DType, int64_t>> stream_types_;  ///< vector types stored non-temporally
  int streams_printed_ = 0;
  int64_t copies_ = 1;       ///< product of the extents of the unrolled scopes being printed
  int prefetch_blocks_ = 0;  ///< register-tile copies whose next lines are prefetched
  std::string out_;
  int indent_ = 0;
};

}  // namespace

std::vector<const ir::BufferDecl*> kernel_parameters(const ir::Program& p) {
  std::vector<const ir::BufferDecl*> out;
  for (const auto& b : p.buffers)
    if (b.role == ir::Role::kInput) out.push_back(&b);
  for (const auto& b : p.buffers)
    if (b.role == ir::Role::kOutput) out.push_back(&b);
  return out;
}

GeneratedC generate_c(const ir::Program& p, const CodegenOptions& options) {
  if (options.cuda) {  // scalar device code; every temporary in device memory
    CodegenOptions o = options;
    o.vectorize = o.parallel = false;
    o.libmvec = false;
    return Printer(p, o).run();
  }
  return Printer(p, options).run();
}

}  // namespace perfdojo::backends
