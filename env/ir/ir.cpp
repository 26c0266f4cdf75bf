#include "ir/ir.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

namespace perfdojo::ir {

Affine Affine::iter(int depth) {
  Affine a;
  a.coeffs.assign(depth + 1, 0);
  a.coeffs[depth] = 1;
  return a;
}

Affine Affine::constant_of(int64_t c) {
  Affine a;
  a.constant = c;
  return a;
}

void Affine::normalise() {
  while (!coeffs.empty() && coeffs.back() == 0) coeffs.pop_back();
}

ExprPtr Expr::constant(double v) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::kConst;
  e->value = v;
  return e;
}

ExprPtr Expr::load(Access a) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::kLoad;
  e->loc = a.loc;
  e->access = std::move(a);
  return e;
}

namespace {

// Iterator values and integer arithmetic on them stay one affine node (exact integer
// arithmetic), so the text a printed kIndex parses back to is that same node. Coefficients stay
// within the parser's index range.
constexpr int64_t kMaxFolded = int64_t{1} << 40;

bool small_integer(const Expr& e, int64_t& v) {
  if (e.kind != ExprKind::kConst || !(std::abs(e.value) <= static_cast<double>(kMaxFolded)) ||
      e.value != std::trunc(e.value))
    return false;
  v = static_cast<int64_t>(e.value);
  return true;
}

bool as_affine(const Expr& e, Affine& f) {
  if (e.kind == ExprKind::kIndex) {
    f = e.affine();
    return true;
  }
  int64_t v = 0;
  if (!small_integer(e, v)) return false;
  f = Affine::constant_of(v);
  return true;
}

bool in_range(const Affine& f) {
  auto ok = [](int64_t c) { return c >= -kMaxFolded && c <= kMaxFolded; };
  if (!ok(f.constant)) return false;
  for (int64_t c : f.coeffs)
    if (!ok(c)) return false;
  return true;
}

// a*sa + b*sb, or nullopt outside the range.
std::optional<Affine> combine(const Affine& a, int64_t sa, const Affine& b, int64_t sb) {
  if (!in_range(a) || !in_range(b) || sa < -kMaxFolded || sa > kMaxFolded || sb < -kMaxFolded ||
      sb > kMaxFolded)
    return std::nullopt;
  Affine r;
  r.coeffs.assign(std::max(a.coeffs.size(), b.coeffs.size()), 0);
  // |values| <= 2^40 and |scales| <= 2^40: products fit in __int128, checked before narrowing.
  auto term = [](int64_t x, int64_t s) { return static_cast<__int128>(x) * s; };
  for (size_t k = 0; k < r.coeffs.size(); ++k) {
    __int128 v = term(a.coeff(static_cast<int>(k)), sa) + term(b.coeff(static_cast<int>(k)), sb);
    if (v < -kMaxFolded || v > kMaxFolded) return std::nullopt;
    r.coeffs[k] = static_cast<int64_t>(v);
  }
  __int128 c = term(a.constant, sa) + term(b.constant, sb);
  if (c < -kMaxFolded || c > kMaxFolded) return std::nullopt;
  r.constant = static_cast<int64_t>(c);
  return r;
}

std::optional<Affine> fold(BinOp op, const Expr& a, const Expr& b) {
  if (a.kind != ExprKind::kIndex && b.kind != ExprKind::kIndex) return std::nullopt;
  Affine fa, fb;
  if (!as_affine(a, fa) || !as_affine(b, fb)) return std::nullopt;
  switch (op) {
    case BinOp::kAdd:
      return combine(fa, 1, fb, 1);
    case BinOp::kSub:
      return combine(fa, 1, fb, -1);
    case BinOp::kMul:
      if (fb.coeffs.empty()) return combine(fa, fb.constant, Affine{}, 0);
      if (fa.coeffs.empty()) return combine(fb, fa.constant, Affine{}, 0);
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace

ExprPtr Expr::unary(UnOp op, ExprPtr a) {
  // Negated literals are literals: keeps print/parse a round trip.
  if (op == UnOp::kNeg && a->kind == ExprKind::kConst) return constant(-a->value);
  if (op == UnOp::kNeg && a->kind == ExprKind::kIndex)
    if (auto f = combine(a->affine(), -1, Affine{}, 0)) return index(std::move(*f), a->loc);
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::kUnary;
  e->un = op;
  e->args = {std::move(a)};
  return e;
}

ExprPtr Expr::binary(BinOp op, ExprPtr a, ExprPtr b) {
  if (auto f = fold(op, *a, *b)) return index(std::move(*f), a->loc.line ? a->loc : b->loc);
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::kBinary;
  e->bin = op;
  e->args = {std::move(a), std::move(b)};
  return e;
}

ExprPtr Expr::select(CmpOp op, ExprPtr l, ExprPtr r, ExprPtr t, ExprPtr f) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::kSelect;
  e->cmp = op;
  e->args = {std::move(l), std::move(r), std::move(t), std::move(f)};
  return e;
}

ExprPtr Expr::fma(ExprPtr a, ExprPtr b, ExprPtr c) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::kFma;
  e->args = {std::move(a), std::move(b), std::move(c)};
  return e;
}

bool fused_update(const Stmt& s) {
  return s.fused && s.op == Reduce::kAdd && s.rhs && s.rhs->kind == ExprKind::kBinary &&
         s.rhs->bin == BinOp::kMul;
}

ExprPtr Expr::index(Affine f, SourceLoc loc) {
  f.normalise();
  if (f.coeffs.empty()) return constant(static_cast<double>(f.constant));
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::kIndex;
  e->access.index.push_back(std::move(f));
  e->access.loc = loc;
  e->loc = std::move(loc);
  return e;
}

NodePtr Node::scope(int64_t extent, std::string extent_name, Annot annot, std::vector<NodePtr> body,
                    SourceLoc loc, ScopeBounds bounds) {
  auto n = std::make_shared<Node>();
  n->is_scope = true;
  n->extent = extent;
  n->extent_name = std::move(extent_name);
  n->annot = annot;
  n->bounds = std::move(bounds);
  n->body = std::move(body);
  n->loc = std::move(loc);
  return n;
}

NodePtr Node::scope_like(const Node& s, Annot annot, std::vector<NodePtr> body) {
  return scope(s.extent, s.extent_name, annot, std::move(body), s.loc, s.bounds);
}

bool any_bounded(const Node& n) { return n.is_scope && (n.bounds.any() || any_bounded(n.body)); }

bool any_bounded(const std::vector<NodePtr>& body) {
  for (const auto& c : body)
    if (any_bounded(*c)) return true;
  return false;
}

double indirect_mean_trips(int64_t extent, const ScopeBounds& bounds,
                           const std::vector<int64_t>& outer) {
  // The iterators the indirect terms read their elements by: one range per combination.
  std::vector<bool> used(outer.size(), false);
  for (const auto* g : {&bounds.lo_gather, &bounds.hi_gather})
    if (*g)
      for (const auto& ix : (*g)->index)
        for (size_t k = 0; k < ix.coeffs.size() && k < outer.size(); ++k)
          used[k] = used[k] || ix.coeffs[k] != 0;
  double ranges = 1;
  for (size_t k = 0; k < outer.size(); ++k)
    if (used[k]) ranges *= static_cast<double>(outer[k]);
  // One side indirect: half the extent on average.
  const double share = bounds.lo_gather && bounds.hi_gather ? 1.0 : 0.5;
  return std::max(1.0, share * static_cast<double>(extent) / ranges);
}

namespace {
bool expr_indirect(const Expr& e) {
  if (e.kind == ExprKind::kLoad && e.access.indirect()) return true;
  for (const auto& a : e.args)
    if (expr_indirect(*a)) return true;
  return false;
}
}  // namespace

bool any_indirect(const std::vector<NodePtr>& body) {
  for (const auto& c : body) {
    if (c->is_scope) {
      if (c->bounds.indirect() || any_indirect(c->body)) return true;
    } else if (c->stmt.lhs.indirect() || expr_indirect(*c->stmt.rhs)) {
      return true;
    }
  }
  return false;
}

NodePtr Node::statement(Stmt s) {
  auto n = std::make_shared<Node>();
  n->loc = s.loc;
  n->stmt = std::move(s);
  return n;
}

const std::string& FileName::str() const {
  static const std::string kNone;
  return name_ ? *name_ : kNone;
}

int64_t BufferDecl::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const BufferDecl* Program::find_buffer(const std::string& name) const {
  for (const auto& b : buffers)
    if (b.name == name) return &b;
  return nullptr;
}

const SizeDecl* Program::find_size(const std::string& name) const {
  for (const auto& s : sizes)
    if (s.name == name) return &s;
  return nullptr;
}

namespace {

bool same_double(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b) || (a != a && b != b);
}

bool same_stmt(const Stmt& a, const Stmt& b) {
  return a.lhs == b.lhs && a.op == b.op && fused_update(a) == fused_update(b) &&
         structurally_equal(*a.rhs, *b.rhs);
}

bool same_decl(const BufferDecl& a, const BufferDecl& b) {
  auto same_opt = [](const std::optional<double>& x, const std::optional<double>& y) {
    return x.has_value() == y.has_value() && (!x || same_double(*x, *y));
  };
  bool same_range = a.range.has_value() == b.range.has_value() &&
                    (!a.range || (same_double(a.range->first, b.range->first) &&
                                  same_double(a.range->second, b.range->second)));
  return a.name == b.name && a.role == b.role && a.dtype == b.dtype && a.shape == b.shape &&
         a.shape_names == b.shape_names && same_opt(a.init, b.init) && same_range &&
         a.range_names == b.range_names && a.sorted == b.sorted && a.stream == b.stream;
}

bool same_body(const std::vector<NodePtr>& a, const std::vector<NodePtr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && !structurally_equal(*a[i], *b[i])) return false;
  return true;
}

// FNV-1a over a canonical byte stream: stable across runs and platforms.
// Bodies end with a marker instead of starting with a count, so a streaming reader can hash a
// body it has not finished reading: a node starts with 0 (statement) or 1 (scope), and 2 ends
// the list.
constexpr uint64_t kEndOfBody = 2;

class Hasher {
 public:
  explicit Hasher(uint64_t state = 0xcbf29ce484222325ULL) : h_(state) {}
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ c[i]) * 0x100000001b3ULL;
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      unsigned char c = static_cast<unsigned char>(v >> (8 * i));
      bytes(&c, 1);
    }
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) { u64(v != v ? 0x7ff8000000000000ULL : std::bit_cast<uint64_t>(v)); }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void affine(const Affine& a) {
    u64(a.coeffs.size());
    for (auto c : a.coeffs) i64(c);
    i64(a.constant);
  }
  void access(const Access& a) {
    str(a.buffer);
    u64(a.index.size());
    for (const auto& i : a.index) affine(i);
    // Only an indirect access hashes its gathers, so every other program keeps its hash.
    if (!a.indirect()) return;
    u64(0x6761746865720000ULL);  // "gather"
    for (const auto& g : a.gather) {
      u64(g ? g->index.size() : 0);
      if (!g) continue;
      str(g->buffer);
      for (const auto& i : g->index) affine(i);
    }
  }
  void expr(const Expr& e) {
    u64(static_cast<uint64_t>(e.kind));
    switch (e.kind) {
      case ExprKind::kConst:
        f64(e.value);
        break;
      case ExprKind::kLoad:
      case ExprKind::kIndex:
        access(e.access);
        break;
      case ExprKind::kUnary:
        u64(static_cast<uint64_t>(e.un));
        break;
      case ExprKind::kBinary:
        u64(static_cast<uint64_t>(e.bin));
        break;
      case ExprKind::kSelect:
        u64(static_cast<uint64_t>(e.cmp));
        break;
      case ExprKind::kFma:
        break;
    }
    for (const auto& a : e.args) expr(*a);
  }
  void scope_header(int64_t extent, const std::string& extent_name, Annot annot,
                    const ScopeBounds& bounds) {
    u64(1);
    i64(extent);
    str(extent_name);
    // A bounded scope's header carries its bounds; a rectangular one hashes as it always did.
    u64(static_cast<uint64_t>(annot) + (bounds.lo ? 64 : 0) + (bounds.hi ? 128 : 0));
    if (bounds.lo) affine(*bounds.lo);
    if (bounds.hi) affine(*bounds.hi);
    if (!bounds.indirect()) return;  // only indirect bounds hash their terms
    u64(0x6761746865720001ULL);
    for (const auto* g : {&bounds.lo_gather, &bounds.hi_gather}) {
      u64(g->has_value());
      if (!*g) continue;
      str((*g)->buffer);
      u64((*g)->index.size());
      for (const auto& i : (*g)->index) affine(i);
    }
  }
  void statement(const Stmt& s) {
    u64(0);
    access(s.lhs);
    // A fused update hashes apart from `+=` (and every hash of an unfused program stays as it was).
    u64(static_cast<uint64_t>(s.op) + (fused_update(s) ? 16 : 0));
    expr(*s.rhs);
  }
  void node(const Node& n) {
    if (n.is_scope) {
      scope_header(n.extent, n.extent_name, n.annot, n.bounds);
      for (const auto& c : n.body) node(*c);
      u64(kEndOfBody);
    } else {
      statement(n.stmt);
    }
  }
  void declarations(const Program& p) {
    u64(p.sizes.size());
    for (const auto& s : p.sizes) {
      str(s.name);
      i64(s.value);
    }
    u64(p.buffers.size());
    for (const auto& b : p.buffers) {
      str(b.name);
      u64(static_cast<uint64_t>(b.role));
      u64(static_cast<uint64_t>(b.dtype));
      u64(b.shape.size());
      for (size_t i = 0; i < b.shape.size(); ++i) {
        i64(b.shape[i]);
        str(b.shape_names[i]);
      }
      u64(b.init.has_value());
      if (b.init) f64(*b.init);
      u64(b.range.has_value());
      if (b.range) {
        f64(b.range->first);
        f64(b.range->second);
        if (!b.range_names.first.empty() || !b.range_names.second.empty()) {  // only when named
          str(b.range_names.first);
          str(b.range_names.second);
        }
      }
      if (b.sorted) u64(0x534f52544544ULL);  // only when set, as `stream`
      if (b.stream) {  // only when set: hashes of programs without it stay as they were
        u64(0x53545245414dULL);
      }
    }
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_;
};

}  // namespace

bool structurally_equal(const Expr& a, const Expr& b) {
  if (&a == &b) return true;
  if (a.kind != b.kind || a.args.size() != b.args.size()) return false;
  switch (a.kind) {
    case ExprKind::kConst:
      if (!same_double(a.value, b.value)) return false;
      break;
    case ExprKind::kLoad:
    case ExprKind::kIndex:
      if (!(a.access == b.access)) return false;
      break;
    case ExprKind::kUnary:
      if (a.un != b.un) return false;
      break;
    case ExprKind::kBinary:
      if (a.bin != b.bin) return false;
      break;
    case ExprKind::kSelect:
      if (a.cmp != b.cmp) return false;
      break;
    case ExprKind::kFma:
      break;
  }
  for (size_t i = 0; i < a.args.size(); ++i)
    if (!structurally_equal(*a.args[i], *b.args[i])) return false;
  return true;
}

bool structurally_equal(const Node& a, const Node& b) {
  if (&a == &b) return true;
  if (a.is_scope != b.is_scope) return false;
  if (!a.is_scope) return same_stmt(a.stmt, b.stmt);
  return a.extent == b.extent && a.extent_name == b.extent_name && a.annot == b.annot &&
         a.bounds == b.bounds && same_body(a.body, b.body);
}

bool structurally_equal(const Program& a, const Program& b) {
  if (a.sizes.size() != b.sizes.size() || a.buffers.size() != b.buffers.size()) return false;
  for (size_t i = 0; i < a.sizes.size(); ++i)
    if (a.sizes[i].name != b.sizes[i].name || a.sizes[i].value != b.sizes[i].value) return false;
  for (size_t i = 0; i < a.buffers.size(); ++i)
    if (!same_decl(a.buffers[i], b.buffers[i])) return false;
  return same_body(a.body, b.body);
}

namespace {

void replay_body(const std::vector<NodePtr>& body, ProgramSink& sink) {
  for (const auto& n : body) {
    if (!n->is_scope) {
      sink.statement(n->stmt);
      continue;
    }
    sink.open_scope(n->extent, n->extent_name, n->annot, n->loc, n->bounds);
    replay_body(n->body, sink);
    sink.close_scope();
  }
}

}  // namespace

void replay(const Program& p, ProgramSink& sink) {
  Program header;
  header.doc = p.doc;
  header.sizes = p.sizes;
  header.buffers = p.buffers;
  sink.declarations(header);
  replay_body(p.body, sink);
}

uint64_t structural_hash(const Program& p) {
  Hasher h;
  h.declarations(p);
  for (const auto& n : p.body) h.node(*n);
  h.u64(kEndOfBody);
  return h.value();
}

void StructuralHasher::declarations(const Program& header) {
  Hasher h(h_);
  h.declarations(header);
  h_ = h.value();
}

void StructuralHasher::open_scope(int64_t extent, std::string extent_name, Annot annot, SourceLoc,
                                  ScopeBounds bounds) {
  Hasher h(h_);
  h.scope_header(extent, extent_name, annot, bounds);
  h_ = h.value();
}

void StructuralHasher::close_scope() {
  Hasher h(h_);
  h.u64(kEndOfBody);
  h_ = h.value();
}

void StructuralHasher::statement(Stmt s) {
  Hasher h(h_);
  h.statement(s);
  h_ = h.value();
}

uint64_t StructuralHasher::finish() {
  Hasher h(h_);
  h.u64(kEndOfBody);
  return h.value();
}

int dtype_bytes(DType t) {
  switch (t) {
    case DType::kF64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kI8:
    case DType::kU8:
      return 1;
  }
  return 4;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kI32:
      return "i32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

std::optional<DType> dtype_by_name(const std::string& name) {
  for (DType t :
       {DType::kF32, DType::kF64, DType::kI32, DType::kBF16, DType::kF16, DType::kI8, DType::kU8})
    if (name == dtype_name(t)) return t;
  return std::nullopt;
}

DType compute_type(DType t) {
  switch (t) {
    case DType::kBF16:
    case DType::kF16:
      return DType::kF32;
    case DType::kI8:
    case DType::kU8:
      return DType::kI32;
    default:
      return t;
  }
}

std::optional<FloatFormat> float_format(DType t) {
  switch (t) {
    case DType::kF32:
      return FloatFormat{24, -126, 127};
    case DType::kF64:
      return FloatFormat{53, -1022, 1023};
    case DType::kBF16:
      return FloatFormat{8, -126, 127};
    case DType::kF16:
      return FloatFormat{11, -14, 15};
    default:
      return std::nullopt;
  }
}

namespace {

// `v` rounded to nearest, ties to even, in the format: subnormals below 2^emin, infinity past
// the largest finite value. Exact: one rounding of the double.
double round_binary(double v, FloatFormat f) {
  const int p = f.p, emin = f.emin, emax = f.emax;
  if (!std::isfinite(v) || v == 0) return v;
  int e = 0;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const int quantum = std::max(e - 1, emin) - (p - 1);
  const double r = std::ldexp(std::nearbyint(std::ldexp(v, -quantum)), quantum);
  const double largest = std::ldexp(2.0 - std::ldexp(1.0, 1 - p), emax);
  if (std::fabs(r) > largest) return std::copysign(INFINITY, v);
  return r;
}

double saturate(double v, double lo, double hi) {
  if (std::isnan(v)) return 0;
  return std::clamp(std::trunc(v), lo, hi);
}

}  // namespace

double narrow_to(DType t, double v) {
  switch (t) {
    case DType::kF32:
      return static_cast<double>(static_cast<float>(v));
    case DType::kF64:
      return v;
    case DType::kI32:
      return v;  // the interpreter wraps i32 (interp.cpp round_to)
    case DType::kBF16:
      return round_binary(v, *float_format(t));
    case DType::kF16:
      return round_binary(v, *float_format(t));
    case DType::kI8:
      return saturate(v, -128, 127);
    case DType::kU8:
      return saturate(v, 0, 255);
  }
  return v;
}

uint32_t narrow_bits(DType t, double v) {
  const double n = narrow_to(t, v);
  if (t == DType::kI8) return static_cast<uint8_t>(static_cast<int8_t>(n));
  if (t == DType::kU8) return static_cast<uint8_t>(n);
  const float f = static_cast<float>(n);  // exact: a bf16 or f16 value is a float
  uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  if (t == DType::kBF16) return std::isnan(f) ? ((x >> 16) | 0x40u) : x >> 16;
  // f16: sign, rebiased exponent and the top 10 bits of the significand; subnormals in units
  // of 2^-24.
  const uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
  if (e == 0xff) return sign | 0x7c00u | (m ? 0x200u : 0);
  if (e >= 113) return sign | ((e - 112) << 10) | (m >> 13);
  return sign | static_cast<uint32_t>(std::ldexp(std::fabs(n), 24));
}

double from_narrow_bits(DType t, uint32_t bits) {
  switch (t) {
    case DType::kI8:
      return static_cast<int8_t>(static_cast<uint8_t>(bits));
    case DType::kU8:
      return static_cast<uint8_t>(bits);
    case DType::kBF16: {
      const uint32_t x = (bits & 0xffffu) << 16;
      float f = 0;
      std::memcpy(&f, &x, 4);
      return f;
    }
    case DType::kF16: {
      const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
      const uint32_t e = (bits >> 10) & 0x1fu, m = bits & 0x3ffu;
      if (e == 0x1f) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
      if (e == 0) return sign * std::ldexp(m, -24);
      return sign * std::ldexp(1024 + m, static_cast<int>(e) - 25);
    }
    default:
      return 0;
  }
}

const char* role_name(Role r) {
  switch (r) {
    case Role::kInput:
      return "input";
    case Role::kOutput:
      return "output";
    case Role::kTemp:
      return "temp";
  }
  return "?";
}

const char* annot_name(Annot a) {
  switch (a) {
    case Annot::kNone:
      return "";
    case Annot::kVector:
      return "vec";
    case Annot::kParallel:
      return "par";
    case Annot::kUnroll:
      return "unroll";
    case Annot::kGpuBlock:
      return "gpu_block";
    case Annot::kGpuThread:
      return "gpu_thread";
  }
  return "";
}

}  // namespace perfdojo::ir
