// The PerfDojo IR: an immutable tree of scopes (loops) and statements over declared buffers.
//
// Values are immutable and shared: a transformation builds a new Program that points at every
// subtree it did not change (copy-on-write by construction). Source locations ride along for
// diagnostics but never take part in equality or hashing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace perfdojo::ir {

/// A file's name as locations hold it: one shared copy per parse, not one per token (a long
/// path in every location of a large file was a fifth of its tree).
class FileName {
 public:
  FileName() = default;
  FileName(std::string_view name)  // NOLINT: implicit, as the std::string it replaced
      : name_(name.empty() ? nullptr : std::make_shared<const std::string>(name)) {}
  FileName(const std::string& name) : FileName(std::string_view(name)) {}  // NOLINT
  FileName(const char* name) : FileName(std::string_view(name)) {}         // NOLINT
  const std::string& str() const;
  operator const std::string&() const { return str(); }  // NOLINT
  bool empty() const { return !name_ || name_->empty(); }
  friend bool operator==(const FileName& a, std::string_view b) { return a.str() == b; }

 private:
  std::shared_ptr<const std::string> name_;
};

/// Where a token came from; line and col are 1-based, 0 when the node was synthesised.
struct SourceLoc {
  FileName file;
  int line = 0;
  int col = 0;
};

/// Element type of a buffer. bf16, f16, i8 and u8 are storage types (docs/ir.md, "Narrow
/// types"): an element widens exactly to its compute type when read (f32, or i32 for the integers)
/// and a statement storing into one computes in that type and narrows once, at the store (to
/// nearest even for bf16 and f16, saturating for i8 and u8). New types go at the end: the
/// structural hash mixes the enumerator's value.
enum class DType { kF32, kF64, kI32, kBF16, kF16, kI8, kU8 };
/// What a buffer is for: read-only input, result, or scratch.
enum class Role { kInput, kOutput, kTemp };

/// Affine function of scope iterators: sum_k coeffs[k] * {k} + constant.
struct Affine {
  std::vector<int64_t> coeffs;  ///< coeffs[k] multiplies the depth-k iterator; no trailing zeros.
  int64_t constant = 0;

  /// The iterator {depth}.
  static Affine iter(int depth);
  /// A constant.
  static Affine constant_of(int64_t c);
  /// Coefficient of {depth} (0 beyond the stored range).
  int64_t coeff(int depth) const {
    return depth >= 0 && depth < static_cast<int>(coeffs.size()) ? coeffs[depth] : 0;
  }
  /// Drops trailing zero coefficients so equal functions compare equal.
  void normalise();
  /// Highest depth with a non-zero coefficient, or -1 for a constant.
  int max_depth() const {
    for (int k = static_cast<int>(coeffs.size()) - 1; k >= 0; --k)
      if (coeffs[k] != 0) return k;
    return -1;
  }
  bool operator==(const Affine&) const = default;
};

/// An indirect index term (docs/ir.md, "Indirect indices"): the value of `buffer[index...]`, an
/// element of an i32 input whose declaration bounds its values (`in [LO, HI)`).
struct Gather {
  std::string buffer;
  std::vector<Affine> index;
  SourceLoc loc;
  bool operator==(const Gather& o) const { return buffer == o.buffer && index == o.index; }
};

/// A buffer element reference: name[index_0, ..., index_{r-1}].
struct Access {
  std::string buffer;
  std::vector<Affine> index;
  SourceLoc loc;
  /// Indirect terms: empty when there are none (the common case), else one entry per dimension,
  /// gather[d] (when set) adding the value it reads to index[d]. Never non-empty with every entry
  /// unset (the parser's rule, which the moves keep), so equal accesses compare equal.
  std::vector<std::optional<Gather>> gather = {};
  bool operator==(const Access& o) const {
    return buffer == o.buffer && index == o.index && gather == o.gather;
  }
  /// Whether some dimension reads its index from a buffer.
  bool indirect() const { return !gather.empty(); }
  /// The gather of dimension d, or nullptr.
  const Gather* gather_at(size_t d) const {
    return d < gather.size() && gather[d] ? &*gather[d] : nullptr;
  }
};

/// Expression node kinds. kIndex is the integer value of an affine function of the iterators
/// (`{0}`, `{1}*32+{2}`), converted to the type the expression is evaluated in, like a constant.
/// kFma is fma(a, b, c): a * b + c rounded once (args = {a, b, c}); it is how the IR says where a
/// fused multiply-add is computed (docs/ir.md, "Contraction").
enum class ExprKind { kConst, kLoad, kUnary, kBinary, kSelect, kIndex, kFma };
/// Unary operators and functions; casts convert between element types. (New members go last:
/// the structural hash encodes the number.)
enum class UnOp {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kTanh,
  kAbs,
  kCastF32,
  kCastF64,
  kCastI32,
  kSin,
  kCos
};
/// Binary operators; kMax/kMin are the two-argument functions max(a, b) / min(a, b).
enum class BinOp { kAdd, kSub, kMul, kDiv, kMax, kMin };
/// Comparison of a select's condition.
enum class CmpOp { kLt, kLe, kGt, kGe, kEq, kNe };

struct Expr;
/// Shared immutable expression.
using ExprPtr = std::shared_ptr<const Expr>;

/// An expression tree node. For kSelect, args = {cond_lhs, cond_rhs, if_true, if_false}.
struct Expr {
  ExprKind kind = ExprKind::kConst;
  double value = 0;  ///< kConst
  /// kLoad: the element read. kIndex: buffer "" and one index, the affine function whose value
  /// the node is (so every rewrite of accesses' iterators rewrites it too).
  Access access;
  UnOp un = UnOp::kNeg;
  BinOp bin = BinOp::kAdd;
  CmpOp cmp = CmpOp::kLt;
  std::vector<ExprPtr> args;
  SourceLoc loc;

  static ExprPtr constant(double v);
  static ExprPtr load(Access a);
  static ExprPtr unary(UnOp op, ExprPtr a);
  static ExprPtr binary(BinOp op, ExprPtr a, ExprPtr b);
  static ExprPtr select(CmpOp op, ExprPtr l, ExprPtr r, ExprPtr t, ExprPtr f);
  /// fma(a, b, c): a * b + c with one rounding.
  static ExprPtr fma(ExprPtr a, ExprPtr b, ExprPtr c);
  /// The value of `f`; a constant when `f` uses no iterator (the canonical form).
  static ExprPtr index(Affine f, SourceLoc loc = {});
  /// The affine function of a kIndex node.
  const Affine& affine() const { return access.index.front(); }
};

/// How a statement combines its value with the target: plain store or a reduction.
enum class Reduce { kNone, kAdd, kMul, kMax, kMin };

/// `lhs = rhs`, `lhs += rhs`, `lhs *= rhs`, `lhs = max(rhs)`, `lhs = min(rhs)`.
/// `fused`: a `+=` whose right side is a product `x * y` adds it with one rounding,
/// lhs = fma(x, y, lhs), and prints that way; on any other statement it means nothing (see
/// fused_update).
struct Stmt {
  Access lhs;
  Reduce op = Reduce::kNone;
  ExprPtr rhs;
  SourceLoc loc;
  bool fused = false;
};

/// Whether `s` is a fused multiply-add update: lhs = fma(x, y, lhs) for `lhs += x * y`.
bool fused_update(const Stmt& s);

/// Scheduling annotation of a scope; it changes how a backend runs it, never what it computes.
enum class Annot { kNone, kVector, kParallel, kUnroll, kGpuBlock, kGpuThread };

/// The bounds of a non-rectangular scope (docs/ir.md, "Bounded scopes"): its iterator runs over
/// [max(0, lo), min(extent, hi)), lo and hi affine in the iterators of the scopes around it. An
/// unset bound is 0 (lo) or the extent (hi): a scope with neither is rectangular. The clamp to
/// [0, extent) means a bound never takes the iterator outside the extent, so everything that
/// reasons about a scope's iterator range through its extent stays true (an over-approximation).
struct ScopeBounds {
  std::optional<Affine> lo, hi;
  /// A bound's indirect term (docs/ir.md, "Indirect indices"): the value it reads is added to
  /// the bound (`lo`, resp. `hi`, is then set too, zero when the bound is the term alone), as a
  /// CSR row's range reads its row pointers: `NNZ(rowptr[{0}]..rowptr[{0}+1])`.
  std::optional<Gather> lo_gather, hi_gather;
  bool any() const { return lo.has_value() || hi.has_value(); }
  /// Whether a bound reads a buffer.
  bool indirect() const { return lo_gather.has_value() || hi_gather.has_value(); }
  bool operator==(const ScopeBounds&) const = default;
};

/// The value of `a` where iterator {k} is iters[k] (the caller holds every depth `a` uses).
inline int64_t evaluate(const Affine& a, const int64_t* iters) {
  int64_t v = a.constant;
  for (size_t k = 0; k < a.coeffs.size(); ++k) v += a.coeffs[k] * iters[k];
  return v;
}

/// The first and one-past-last value of a scope's iterator of `extent` with `bounds`, where the
/// enclosing iterators are `iters`; first >= end when the scope runs no iteration there. A
/// bound's indirect term adds `gathered(term)`: the value its index buffer holds there (callers
/// without the data pass none and must not ask about indirect bounds).
template <class Gathered>
std::pair<int64_t, int64_t> scope_range(int64_t extent, const ScopeBounds& bounds,
                                        const int64_t* iters, Gathered&& gathered) {
  int64_t first = 0, end = extent;
  if (bounds.lo)
    first = std::max<int64_t>(
        0, evaluate(*bounds.lo, iters) + (bounds.lo_gather ? gathered(*bounds.lo_gather) : 0));
  if (bounds.hi)
    end = std::min<int64_t>(
        extent, evaluate(*bounds.hi, iters) + (bounds.hi_gather ? gathered(*bounds.hi_gather) : 0));
  return {first, end};
}
inline std::pair<int64_t, int64_t> scope_range(int64_t extent, const ScopeBounds& bounds,
                                               const int64_t* iters) {
  return scope_range(extent, bounds, iters, [](const Gather&) { return int64_t{0}; });
}
/// What a model that has no data assumes of a scope with an indirect bound: its ranges split
/// the extent evenly among the index elements its bounds read (a CSR matrix's rows share its
/// non-zeros), `outer` holding the enclosing extents. The mean trip count.
double indirect_mean_trips(int64_t extent, const ScopeBounds& bounds,
                           const std::vector<int64_t>& outer);

struct Node;
/// Shared immutable tree node.
using NodePtr = std::shared_ptr<const Node>;

/// Whether `n` or a scope below it is bounded (non-rectangular).
bool any_bounded(const Node& n);
/// Whether a scope in `body` (or below) is bounded.
bool any_bounded(const std::vector<NodePtr>& body);
/// Whether a statement in `body` (or below) has an indirect index (Access::indirect).
bool any_indirect(const std::vector<NodePtr>& body);

/// A scope (a loop of `extent` iterations over its body) or a statement.
struct Node {
  bool is_scope = false;
  // Scope fields.
  int64_t extent = 0;
  std::string extent_name;  ///< size name the extent was written with, "" for a literal
  Annot annot = Annot::kNone;
  ScopeBounds bounds;  ///< non-rectangular scopes only
  std::vector<NodePtr> body;
  // Statement field.
  Stmt stmt;
  SourceLoc loc;

  static NodePtr scope(int64_t extent, std::string extent_name, Annot annot,
                       std::vector<NodePtr> body, SourceLoc loc = {}, ScopeBounds bounds = {});
  /// `s` (a scope: its extent, name, bounds and location) with `annot` and `body`.
  static NodePtr scope_like(const Node& s, Annot annot, std::vector<NodePtr> body);
  static NodePtr statement(Stmt s);
};

/// `NAME = VALUE` in a file's header.
struct SizeDecl {
  std::string name;
  int64_t value = 0;
  SourceLoc loc;
};

/// `input|output|temp NAME: TYPE[DIMS] [= INIT] [in [LO, HI]]`.
struct BufferDecl {
  std::string name;
  Role role = Role::kTemp;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<std::string> shape_names;  ///< per dim: size name used, "" for a literal
  std::optional<double> init;            ///< value every element holds before the body runs
  std::optional<std::pair<double, double>> range;  ///< input value range for generated data
  /// Per bound of `range`: the size name it was written with, "" for a number.
  std::pair<std::string, std::string> range_names;
  /// `sorted` (i32 inputs): the values never decrease along the row-major order (a CSR row
  /// pointer); generated data is sorted, and given data is checked (check_index_data).
  bool sorted = false;
  /// `stream`: its vector stores bypass the cache (non-temporal, x86 only; no read-for-ownership,
  /// the lines not left in cache). Says how stores run, never what they store.
  bool stream = false;
  SourceLoc loc;

  /// Number of elements.
  int64_t elements() const;
};

/// A whole kernel: declarations plus the body.
struct Program {
  std::string doc;  ///< leading comment lines, without '#'; not part of equality
  std::vector<SizeDecl> sizes;
  std::vector<BufferDecl> buffers;
  std::vector<NodePtr> body;

  /// The declaration of `name`, or nullptr.
  const BufferDecl* find_buffer(const std::string& name) const;
  /// The size named `name`, or nullptr.
  const SizeDecl* find_size(const std::string& name) const;
};

/// A program in source order, piece by piece: what a streaming parse (parse_stream) delivers as
/// it reads. Nothing is kept for the sink:
/// a sink that drops what it is given (a checker, a hasher) parses a file of any size in the
/// memory of one line plus the declarations.
class ProgramSink {
 public:
  virtual ~ProgramSink() = default;
  /// The doc comment, sizes and buffers (an empty body), once, before the first scope or
  /// statement. The reference stays valid until the parse returns.
  virtual void declarations(const Program& header) = 0;
  /// A scope opens; the scopes and statements up to the matching close_scope are its body.
  virtual void open_scope(int64_t extent, std::string extent_name, Annot annot, SourceLoc loc,
                          ScopeBounds bounds) = 0;
  /// The innermost open scope ends.
  virtual void close_scope() = 0;
  /// A statement of the innermost open scope (or of the top level).
  virtual void statement(Stmt s) = 0;
};

/// Hands a program to `sink` piece by piece, as parse_stream would hand over its printed text.
void replay(const Program& p, ProgramSink& sink);

/// structural_hash computed piecewise, as a ProgramSink: `perfdojo check` hashes a file as it
/// streams by. Fed the pieces of a program, finish() equals structural_hash of that program.
class StructuralHasher final : public ProgramSink {
 public:
  void declarations(const Program& header) override;
  void open_scope(int64_t extent, std::string extent_name, Annot annot, SourceLoc loc,
                  ScopeBounds bounds) override;
  void close_scope() override;
  void statement(Stmt s) override;
  /// The hash, after the last piece.
  uint64_t finish();

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;  ///< FNV-1a state
};

/// Structural equality: declarations and tree, ignoring source locations and doc comments.
bool structurally_equal(const Program& a, const Program& b);
/// Structural equality of two subtrees.
bool structurally_equal(const Node& a, const Node& b);
/// Structural equality of two expressions.
bool structurally_equal(const Expr& a, const Expr& b);
/// A hash stable across runs and platforms, consistent with structurally_equal.
uint64_t structural_hash(const Program& p);

/// Size in bytes of one element.
int dtype_bytes(DType t);
/// "f32", "f64", "i32", "bf16", "f16", "i8", "u8".
const char* dtype_name(DType t);
/// The type of that name, or nullopt.
std::optional<DType> dtype_by_name(const std::string& name);
/// The type a value of `t` is computed in: f32 for bf16 and f16, i32 for i8 and u8, else `t`.
DType compute_type(DType t);
/// Whether `t` is a storage-only type (bf16, f16, i8, u8).
inline bool is_narrow(DType t) { return compute_type(t) != t; }
/// A binary floating-point format: `p` significand bits (the implicit one included), normal
/// exponents from `emin` to `emax`. Its unit roundoff is 2^-p, its spacing at 1 is 2^(1-p)
/// and its smallest subnormal 2^(emin+1-p).
struct FloatFormat {
  int p, emin, emax;
};
/// The format of f32, f64, bf16 or f16; nullopt for the integer types.
std::optional<FloatFormat> float_format(DType t);
/// `v` (a value of compute_type(t)) as stored in an element of `t`: rounded to nearest even
/// (f32, bf16, f16; overflow to infinity) or truncated and saturated (i8, u8; NaN to 0); f64
/// and i32 values unchanged (i32 arithmetic wraps where it is done).
double narrow_to(DType t, double v);
/// The bits an element of a narrow type stores for `v` (narrowed first): bf16 and f16 as their
/// 16-bit encodings, i8 and u8 as the byte. Only for is_narrow(t).
uint32_t narrow_bits(DType t, double v);
/// The value of an element of a narrow type with those bits (narrow_bits' inverse).
double from_narrow_bits(DType t, uint32_t bits);
/// "input", "output", "temp".
const char* role_name(Role r);
/// Annotation keyword as written after ':' ("vec", "par", "unroll", ...), "" for kNone.
const char* annot_name(Annot a);

}  // namespace perfdojo::ir
