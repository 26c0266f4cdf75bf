#include "ir/parse.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <unordered_map>

namespace perfdojo::ir {
namespace {

enum class Tok {
  kIdent,
  kInt,
  kFloat,
  kBar,
  kLBracket,
  kRBracket,
  kLBrace,
  kRBrace,
  kLParen,
  kRParen,
  kComma,
  kColon,
  kAssign,
  kPlusAssign,
  kMulAssign,
  kPlus,
  kMinus,
  kStar,
  kSlash,
  kQuestion,
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  kDotDot,
  kEnd,
  kBad
};

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;
  int col = 0;
};

/// A syntax error inside one line; caught per line so later lines still get checked.
struct LineError {
  int col;
  std::string message;
  bool limit = false;  ///< a size or depth limit, not a syntax error
};

// The length of the well-formed UTF-8 sequence of a printable character (U+00A0 and up) at
// `s[i]`, or 0.
size_t printable_utf8_at(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  const size_t n = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (n == 0 || c >= 0xF5 || i + n > s.size()) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000) || cp < 0xA0) return 0;
  return n;
}

std::string describe(const Token& t) {
  if (t.kind == Tok::kEnd) return "end of line";
  // Printable characters as they are; control characters and bytes that are not well-formed
  // UTF-8 as \xNN, so a message is readable and valid UTF-8 whatever the input held.
  std::string out = "'";
  const std::string_view text = t.text;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (size_t n = printable_utf8_at(text, i)) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    }
  }
  return out + "'";
}

std::vector<Token> lex_line(std::string_view line) {
  std::vector<Token> toks;
  size_t i = 0;
  auto push = [&](Tok k, size_t len) {
    toks.push_back({k, std::string(line.substr(i, len)), static_cast<int>(i) + 1});
    i += len;
  };
  while (i < line.size()) {
    char c = line[i];
    if (c == '#') break;
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < line.size() &&
             (std::isalnum(static_cast<unsigned char>(line[j])) || line[j] == '_'))
        ++j;
      push(Tok::kIdent, j - i);
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && i + 1 < line.size() &&
         std::isdigit(static_cast<unsigned char>(line[i + 1])))) {
      size_t j = i;
      bool is_float = false;
      while (j < line.size() && std::isdigit(static_cast<unsigned char>(line[j]))) ++j;
      if (j < line.size() && line[j] == '.' && !(j + 1 < line.size() && line[j + 1] == '.')) {
        is_float = true;
        ++j;
        while (j < line.size() && std::isdigit(static_cast<unsigned char>(line[j]))) ++j;
      }
      if (j < line.size() && (line[j] == 'e' || line[j] == 'E')) {
        size_t k = j + 1;
        if (k < line.size() && (line[k] == '+' || line[k] == '-')) ++k;
        if (k < line.size() && std::isdigit(static_cast<unsigned char>(line[k]))) {
          is_float = true;
          j = k;
          while (j < line.size() && std::isdigit(static_cast<unsigned char>(line[j]))) ++j;
        }
      }
      push(is_float ? Tok::kFloat : Tok::kInt, j - i);
      continue;
    }
    auto two = line.substr(i, 2);
    if (two == "+=") {
      push(Tok::kPlusAssign, 2);
      continue;
    }
    if (two == "*=") {
      push(Tok::kMulAssign, 2);
      continue;
    }
    if (two == "<=") {
      push(Tok::kLe, 2);
      continue;
    }
    if (two == ">=") {
      push(Tok::kGe, 2);
      continue;
    }
    if (two == "==") {
      push(Tok::kEq, 2);
      continue;
    }
    if (two == "!=") {
      push(Tok::kNe, 2);
      continue;
    }
    if (two == "..") {
      push(Tok::kDotDot, 2);
      continue;
    }
    switch (c) {
      case '|':
        push(Tok::kBar, 1);
        break;
      case '[':
        push(Tok::kLBracket, 1);
        break;
      case ']':
        push(Tok::kRBracket, 1);
        break;
      case '{':
        push(Tok::kLBrace, 1);
        break;
      case '}':
        push(Tok::kRBrace, 1);
        break;
      case '(':
        push(Tok::kLParen, 1);
        break;
      case ')':
        push(Tok::kRParen, 1);
        break;
      case ',':
        push(Tok::kComma, 1);
        break;
      case ':':
        push(Tok::kColon, 1);
        break;
      case '=':
        push(Tok::kAssign, 1);
        break;
      case '+':
        push(Tok::kPlus, 1);
        break;
      case '-':
        push(Tok::kMinus, 1);
        break;
      case '*':
        push(Tok::kStar, 1);
        break;
      case '/':
        push(Tok::kSlash, 1);
        break;
      case '?':
        push(Tok::kQuestion, 1);
        break;
      case '<':
        push(Tok::kLt, 1);
        break;
      case '>':
        push(Tok::kGt, 1);
        break;
      default: {
        // One bad character (possibly a multi-byte UTF-8 sequence) becomes one token.
        size_t len = 1;
        while (i + len < line.size() && (static_cast<unsigned char>(line[i + len]) & 0xC0) == 0x80)
          ++len;
        push(Tok::kBad, len);
      }
    }
  }
  toks.push_back({Tok::kEnd, "", static_cast<int>(line.size()) + 1});
  return toks;
}

const std::set<std::string>& reserved() {
  static const std::set<std::string> kWords = {
      "input", "output", "temp", "f32",   "f64",  "i32", "bf16", "f16", "i8",  "u8",     "in",
      "exp",   "log",    "sqrt", "rsqrt", "tanh", "abs", "max",  "min", "inf", "select", "where"};
  return kWords;
}

class LineParser {
 public:
  LineParser(std::vector<Token> toks, const Program& prog, FileName file, int line)
      : toks_(std::move(toks)), prog_(prog), file_(std::move(file)), line_(line) {}

  const Token& peek(size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  Token next() {
    Token t = peek();
    if (pos_ < toks_.size() - 1) ++pos_;
    return t;
  }
  bool accept(Tok k) {
    if (peek().kind != k) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const Token& t, const std::string& msg) const {
    throw LineError{t.col, msg};
  }
  [[noreturn]] void fail_limit(const Token& t, const std::string& msg) const {
    throw LineError{t.col, msg, true};
  }
  Token expect(Tok k, const std::string& what) {
    if (peek().kind != k) fail(peek(), "expected " + what + ", found " + describe(peek()));
    return next();
  }
  SourceLoc loc(const Token& t) const { return {file_, line_, t.col}; }

  int64_t parse_int(const Token& t) const {
    int64_t v = 0;
    auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size())
      fail(t, "integer " + describe(t) + " is out of range");
    return v;
  }

  // number = ["-"] (INT | FLOAT | "inf")
  double parse_number(const std::string& what) {
    bool neg = accept(Tok::kMinus);
    Token t = next();
    double v = 0;
    if (t.kind == Tok::kInt || t.kind == Tok::kFloat) {
      auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
      if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size())
        fail(t, "number " + describe(t) + " is out of range");
    } else if (t.kind == Tok::kIdent && t.text == "inf") {
      v = std::numeric_limits<double>::infinity();
    } else if (const SizeDecl* s = t.kind == Tok::kIdent ? prog_.find_size(t.text) : nullptr) {
      v = static_cast<double>(s->value);  // a size's value (`in [0, V)`); printed as the number
    } else {
      fail(t, "expected " + what + ", found " + describe(t));
    }
    return neg ? -v : v;
  }

  // A size name or a positive integer; `what` names the role in messages.
  std::pair<int64_t, std::string> parse_extent(const std::string& what) {
    Token t = next();
    if (t.kind == Tok::kInt) {
      int64_t v = parse_int(t);
      if (v <= 0) fail(t, what + " must be positive, found " + describe(t));
      return {v, ""};
    }
    if (t.kind == Tok::kIdent) {
      if (const SizeDecl* s = prog_.find_size(t.text)) return {s->value, s->name};
      if (prog_.find_buffer(t.text))
        fail(t, "'" + t.text + "' is a buffer, not a size; expected " + what);
      fail(t,
           "unknown size '" + t.text + "'; expected " + what + " (a declared size or an integer)");
    }
    fail(t, "expected " + what + " (a size name or an integer), found " + describe(t));
  }

  // --- declarations ---------------------------------------------------------------------------

  SizeDecl parse_size_decl() {
    Token name = next();
    check_new_name(name);
    next();  // '='
    Token start = peek();
    bool negative = start.kind == Tok::kMinus;
    if (negative) next();
    Token v = expect(Tok::kInt, "an integer size");
    int64_t value = negative ? -parse_int(v) : parse_int(v);
    if (value <= 0)
      fail(start, "size '" + name.text + "' must be positive, found '" + (negative ? "-" : "") +
                      v.text + "'");
    expect_end();
    return {name.text, value, loc(name)};
  }

  BufferDecl parse_buffer_decl() {
    Token role = next();
    BufferDecl b;
    b.role = role.text == "input"    ? Role::kInput
             : role.text == "output" ? Role::kOutput
                                     : Role::kTemp;
    Token name = expect(Tok::kIdent, "a buffer name after '" + role.text + "'");
    check_new_name(name);
    b.name = name.text;
    b.loc = loc(name);
    expect(Tok::kColon, "':' after the buffer name");
    Token ty = expect(Tok::kIdent, "an element type (f32, f64, i32, bf16, f16, i8 or u8)");
    if (auto t = dtype_by_name(ty.text))
      b.dtype = *t;
    else
      fail(ty, "unknown element type " + describe(ty) +
                   "; expected f32, f64, i32, bf16, f16, i8 or u8");
    expect(Tok::kLBracket, "'[' and the buffer's dimensions");
    do {
      auto [v, n] = parse_extent("a dimension");
      b.shape.push_back(v);
      b.shape_names.push_back(n);
    } while (accept(Tok::kComma));
    expect(Tok::kRBracket, "',' or ']' in the dimension list");
    if (peek().kind == Tok::kAssign) {
      Token eq = next();
      if (b.role == Role::kInput)
        fail(eq, "an input cannot have an initial value; its data is given");
      b.init = parse_number("an initial value");
    }
    if (peek().kind == Tok::kIdent && peek().text == "in") {
      Token in = next();
      if (b.role != Role::kInput) fail(in, "only inputs take a value range 'in [LO, HI]'");
      expect(Tok::kLBracket, "'[' to start the value range");
      // A bound written as a size keeps its name, as a dimension does, so a resized kernel's
      // index range follows the table it indexes (`in [0, V)`).
      auto size_named = [&]() -> std::string {
        return peek().kind == Tok::kIdent && prog_.find_size(peek().text) ? peek().text : "";
      };
      b.range_names.first = size_named();
      double lo = parse_number("the range's lower bound");
      expect(Tok::kComma, "',' between the range's bounds");
      b.range_names.second = size_named();
      double hi = parse_number("the range's upper bound");
      // [LO, HI) says what the range always meant (generated values lie in [LO, HI)); both
      // spellings parse, and the canonical text prints ']'.
      Token close = peek().kind == Tok::kRParen
                        ? next()
                        : expect(Tok::kRBracket, "']' or ')' to close the value range");
      if (!(lo < hi) || std::isinf(lo) || std::isinf(hi))
        fail(close, "the value range must be finite with LO < HI");
      b.range = {lo, hi};
    }
    if (peek().kind == Tok::kIdent && peek().text == "sorted") {
      Token so = next();
      if (b.role != Role::kInput || b.dtype != DType::kI32)
        fail(so, "only i32 inputs can be declared 'sorted' (a CSR row pointer)");
      b.sorted = true;
    }
    if (peek().kind == Tok::kIdent && peek().text == "stream") {
      Token st = next();
      if (b.role == Role::kInput)
        fail(st, "an input is never stored to; only outputs and temporaries can 'stream'");
      b.stream = true;
    }
    expect_end();
    return b;
  }

  void check_new_name(const Token& t) const {
    if (reserved().count(t.text))
      fail(t, "'" + t.text + "' is a reserved word and cannot name a size or buffer");
    if (prog_.find_size(t.text) || prog_.find_buffer(t.text))
      fail(t, "'" + t.text + "' is already declared");
  }

  void expect_end() {
    if (peek().kind != Tok::kEnd)
      fail(peek(), "unexpected " + describe(peek()) + ", expected end of line");
  }

  // --- index expressions ----------------------------------------------------------------------

  Affine parse_index() {
    Affine a = parse_iterm();
    while (peek().kind == Tok::kPlus || peek().kind == Tok::kMinus) {
      Token op = next();
      bool minus = op.kind == Tok::kMinus;
      const bool had = gather_taken();
      Affine b = parse_iterm();
      if (minus && !had && gather_taken())
        fail(op, "an indirect index term is added, never subtracted");
      add_into(a, b, minus ? -1 : 1, op);
    }
    a.normalise();
    return a;
  }

  // Whether the index being parsed has taken its indirect term (docs/ir.md, "Indirect indices").
  bool gather_taken() const { return gather_slot_ && *gather_slot_; }

  // One dimension of an access's index: affine terms plus at most one indirect term.
  Affine parse_access_index(std::optional<Gather>& g) {
    SlotScope in(gather_slot_, &g);
    return parse_index();
  }

  // Sets the indirect-term slot for a parse and restores it on every exit (errors throw, and a
  // backtracking parse goes on after them).
  struct SlotScope {
    std::optional<Gather>*& slot;
    std::optional<Gather>* saved;
    SlotScope(std::optional<Gather>*& s, std::optional<Gather>* to) : slot(s), saved(s) { s = to; }
    ~SlotScope() { slot = saved; }
    SlotScope(const SlotScope&) = delete;
    SlotScope& operator=(const SlotScope&) = delete;
  };

  // `NAME[i, ...]` as a term of an access's index, after its name: an indirect term. Its own
  // indices are affine: a read inside them does not nest.
  Affine parse_gather(const Token& name) {
    if (!gather_slot_)
      fail(name, "'" + name.text +
                     "[' reads a buffer: an indirect term may stand only in a buffer access's "
                     "index or a scope's bound, added once (W[idx[{0}],{1}], "
                     "NNZ(rowptr[{0}]..rowptr[{0}+1]))");
    if (*gather_slot_) fail(name, "at most one indirect term ('" + name.text + "[...]') per index");
    Gather g;
    g.buffer = name.text;
    g.loc = loc(name);
    expect(Tok::kLBracket, "'['");
    if (peek().kind == Tok::kRBracket)
      fail(peek(), "expected an index, found ']' (buffers have rank 1 or more)");
    std::optional<Gather>* const slot = gather_slot_;
    {
      SlotScope inner(gather_slot_, nullptr);
      do {
        g.index.push_back(parse_index());
      } while (accept(Tok::kComma));
      expect(Tok::kRBracket, "',' or ']' in the index list of '" + name.text + "'");
    }
    *slot = std::move(g);
    return Affine{};
  }

  // Index arithmetic stays within +-2^40: far beyond any real buffer, and far from overflow in
  // the bounds arithmetic of the checker and the interpreter.
  static constexpr int64_t kMaxIndexValue = int64_t{1} << 40;

  int64_t checked(const Token& at, int64_t v) const {
    if (v > kMaxIndexValue || v < -kMaxIndexValue)
      fail(at, "index arithmetic is out of range (magnitudes above 2^40)");
    return v;
  }

  void add_into(Affine& a, const Affine& b, int64_t scale, const Token& at) const {
    if (a.coeffs.size() < b.coeffs.size()) a.coeffs.resize(b.coeffs.size(), 0);
    for (size_t k = 0; k < b.coeffs.size(); ++k)
      a.coeffs[k] = checked(at, a.coeffs[k] + scale * b.coeffs[k]);
    a.constant = checked(at, a.constant + scale * b.constant);
  }

  Affine parse_iterm() {
    const Token first = peek();
    bool neg = accept(Tok::kMinus);
    const bool had = gather_taken();
    Affine a = parse_ifactor();
    if (!had && gather_taken() && (neg || peek().kind == Tok::kStar))
      fail(first, "an indirect index term is added as it is: no sign or factor");
    while (peek().kind == Tok::kStar) {
      Token star = next();
      const bool before = gather_taken();
      Affine b = parse_ifactor();
      if (!before && gather_taken())
        fail(star, "an indirect index term is added as it is: no sign or factor");
      bool a_const = a.max_depth() < 0, b_const = b.max_depth() < 0;
      if (!a_const && !b_const)
        fail(star, "index expressions must be affine: one side of '*' must be a constant");
      if (a_const) std::swap(a, b);
      for (auto& c : a.coeffs) c = checked(star, c * b.constant);
      a.constant = checked(star, a.constant * b.constant);
    }
    if (neg) {
      for (auto& c : a.coeffs) c = -c;
      a.constant = -a.constant;
    }
    return a;
  }

  Affine parse_ifactor() {
    Token t = next();
    switch (t.kind) {
      case Tok::kInt:
        return Affine::constant_of(checked(t, parse_int(t)));
      case Tok::kIdent: {
        if (peek().kind == Tok::kLBracket) return parse_gather(t);
        if (const SizeDecl* s = prog_.find_size(t.text)) return Affine::constant_of(s->value);
        fail(t, "unknown size '" + t.text + "' in an index expression");
      }
      case Tok::kLBrace:
        return parse_iterator();
      case Tok::kLParen: {
        if (++nesting_ > kMaxNesting) fail_limit(t, "index expression nests too deeply");
        SlotScope none(gather_slot_, nullptr);  // no indirect term inside parentheses
        Affine a = parse_index();
        expect(Tok::kRParen, "')' to close the index subexpression");
        --nesting_;
        return a;
      }
      default:
        fail(t, "expected an index term ({k}, an integer or a size), found " + describe(t));
    }
  }

  // `{k}` after its '{': the iterator of the enclosing scope at depth k.
  Affine parse_iterator() {
    Token d = expect(Tok::kInt, "an iterator depth inside '{}'");
    int64_t depth = parse_int(d);
    if (depth > 64) fail(d, "iterator depth " + describe(d) + " is too deep (at most 64)");
    expect(Tok::kRBrace, "'}' after the iterator depth");
    if (depth >= depth_ && in_bounds_)
      fail(d, "iterator {" + d.text + "} in the bounds of the scope at depth " +
                  std::to_string(depth_) +
                  ": a bound may use only the iterators of the scopes around it (" +
                  (depth_ == 0   ? std::string("none here")
                   : depth_ == 1 ? std::string("{0}")
                                 : "{0}..{" + std::to_string(depth_ - 1) + "}") +
                  ")");
    if (depth >= depth_)
      fail(d, "iterator {" + d.text + "} is out of range: the statement is inside " +
                  std::to_string(depth_) + " scope(s), so {0}.." +
                  (depth_ > 0 ? "{" + std::to_string(depth_ - 1) + "}" : "(none)") +
                  " are available");
    return Affine::iter(static_cast<int>(depth));
  }

  // `(LO..HI)` after a scope's extent, either side optional (docs/ir.md, "Bounded scopes"): the
  // scope at `depth` runs over [max(0, LO), min(extent, HI)). A bound is affine in the iterators
  // of the scopes around it; a non-affine one, an inner iterator or an empty pair is refused.
  ScopeBounds parse_bounds(int64_t depth) {
    Token open = next();  // '('
    ScopeBounds b;
    const int64_t saved = depth_;
    depth_ = depth;
    in_bounds_ = true;
    // Each bound may add one indirect term (a CSR row's range: rowptr[{0}]..rowptr[{0}+1]).
    if (peek().kind != Tok::kDotDot) b.lo = parse_access_index(b.lo_gather);
    expect(Tok::kDotDot, "'..' between a scope's lower and upper bound");
    if (peek().kind != Tok::kRParen) b.hi = parse_access_index(b.hi_gather);
    expect(Tok::kRParen, "')' to close the scope's bounds");
    in_bounds_ = false;
    depth_ = saved;
    if (!b.any()) fail(open, "empty bounds '(..)': give a lower bound, an upper bound or both");
    return b;
  }

  Access parse_access() {
    Token name = next();
    Access a;
    a.buffer = name.text;
    a.loc = loc(name);
    expect(Tok::kLBracket, "'[' after buffer '" + name.text + "'");
    if (peek().kind == Tok::kRBracket)
      fail(peek(), "expected an index, found ']' (buffers have rank 1 or more)");
    do {
      std::optional<Gather> g;
      a.index.push_back(parse_access_index(g));
      if (g) {
        a.gather.resize(a.index.size());
        a.gather.back() = std::move(g);
      }
    } while (accept(Tok::kComma));
    if (a.indirect()) a.gather.resize(a.index.size());
    expect(Tok::kRBracket, "',' or ']' in the index list of '" + name.text + "'");
    return a;
  }

  // --- value expressions ----------------------------------------------------------------------

  std::optional<CmpOp> cmp_op(Tok k) const {
    switch (k) {
      case Tok::kLt:
        return CmpOp::kLt;
      case Tok::kLe:
        return CmpOp::kLe;
      case Tok::kGt:
        return CmpOp::kGt;
      case Tok::kGe:
        return CmpOp::kGe;
      case Tok::kEq:
        return CmpOp::kEq;
      case Tok::kNe:
        return CmpOp::kNe;
      default:
        return std::nullopt;
    }
  }

  ExprPtr parse_expr() {
    if (++nesting_ > kMaxNesting) fail_limit(peek(), "expression nests too deeply");
    ExprPtr e = parse_expr_inner();
    --nesting_;
    return e;
  }

  // Counts operators: every later pass recurses over the tree, so its size is bounded here.
  void count_node(const Token& at) {
    if (++nodes_ > kMaxNodes)
      fail_limit(at,
                 "expression is too long (more than " + std::to_string(kMaxNodes) + " operations)");
  }

  ExprPtr parse_expr_inner() {
    ExprPtr l = parse_sum();
    auto op = cmp_op(peek().kind);
    if (!op) {
      if (peek().kind == Tok::kQuestion)
        fail(peek(), "a select needs a comparison before '?', e.g. 'a > 0 ? a : 0'");
      return l;
    }
    next();
    ExprPtr r = parse_sum();
    expect(Tok::kQuestion, "'?' after the comparison (comparisons only appear in 'c ? a : b')");
    ExprPtr t = parse_expr();
    expect(Tok::kColon, "':' between the branches of the select");
    ExprPtr f = parse_expr();
    return Expr::select(*op, l, r, t, f);
  }

  ExprPtr parse_sum() {
    ExprPtr a = parse_product();
    while (peek().kind == Tok::kPlus || peek().kind == Tok::kMinus) {
      count_node(peek());
      BinOp op = next().kind == Tok::kPlus ? BinOp::kAdd : BinOp::kSub;
      a = Expr::binary(op, a, parse_product());
    }
    return a;
  }

  ExprPtr parse_product() {
    ExprPtr a = parse_unary();
    while (peek().kind == Tok::kStar || peek().kind == Tok::kSlash) {
      count_node(peek());
      BinOp op = next().kind == Tok::kStar ? BinOp::kMul : BinOp::kDiv;
      a = Expr::binary(op, a, parse_unary());
    }
    return a;
  }

  ExprPtr parse_unary() {
    if (accept(Tok::kMinus)) {
      if (++unary_depth_ > kMaxNesting) fail_limit(peek(), "expression nests too deeply");
      ExprPtr e = Expr::unary(UnOp::kNeg, parse_unary());
      --unary_depth_;
      return e;
    }
    return parse_primary();
  }

  ExprPtr parse_primary() {
    count_node(peek());
    if (++nesting_ > kMaxNesting) fail_limit(peek(), "expression nests too deeply");
    ExprPtr e = parse_primary_inner();
    --nesting_;
    return e;
  }

  ExprPtr parse_primary_inner() {
    const Token& t = peek();
    if (t.kind == Tok::kInt || t.kind == Tok::kFloat)
      return Expr::constant(parse_number("a number"));
    if (t.kind == Tok::kLParen) {
      next();
      if (ExprPtr sel = parenthesised_condition()) return sel;
      ExprPtr e = parse_expr();
      expect(Tok::kRParen, "')' to close the parenthesis");
      return e;
    }
    if (t.kind == Tok::kLBrace) {
      // An iterator's value (an integer); arithmetic on it folds into one affine node.
      SourceLoc at = loc(next());
      return Expr::index(parse_iterator(), std::move(at));
    }
    if (t.kind != Tok::kIdent)
      fail(t,
           "expected a value (number, iterator {k}, buffer access, function call or '('), found " +
               describe(t));
    if (t.text == "inf") return Expr::constant(parse_number("a number"));
    if (peek(1).kind == Tok::kLBracket) {
      ExprPtr e = Expr::load(parse_access());
      return e;
    }
    if (peek(1).kind == Tok::kLParen) return parse_call(false).first;
    // A size used as a value is its number (the canonical text prints the number).
    if (const SizeDecl* size = prog_.find_size(t.text)) {
      next();
      return Expr::constant(static_cast<double>(size->value));
    }
    if (prog_.find_buffer(t.text)) fail(peek(1), "expected '[' after buffer '" + t.text + "'");
    fail(t, "unknown name '" + t.text + "'; expected a buffer access, a number or a function call");
  }

  // After '(': `(a CMP b) ? x : y`, the condition of a select in brackets; nullptr (nothing
  // consumed) when the parenthesis holds anything else.
  // Each '(' is tried as a condition once: the outcome is remembered by position, so nested
  // brackets that are not conditions cost linear time, not two tries per level (2^depth). A
  // limit hit while trying is final: parsed as an expression, the same brackets nest deeper.
  ExprPtr parenthesised_condition() {
    const size_t at = pos_;
    const int nodes = nodes_, nesting = nesting_, unary = unary_depth_;
    if (auto it = conditions_.find(at); it != conditions_.end()) {
      if (!it->second.select) return nullptr;
      pos_ = it->second.end;
      nodes_ += it->second.nodes;
      return it->second.select;
    }
    try {
      ExprPtr l = parse_sum();
      if (auto op = cmp_op(peek().kind)) {
        next();
        ExprPtr r = parse_sum();
        if (peek().kind == Tok::kRParen && peek(1).kind == Tok::kQuestion) {
          next();
          next();
          ExprPtr t = parse_expr();
          expect(Tok::kColon, "':' between the branches of the select");
          ExprPtr f = parse_expr();
          ExprPtr sel = Expr::select(*op, l, r, t, f);
          conditions_[at] = {sel, pos_, nodes_ - nodes};
          return sel;
        }
      }
    } catch (const LineError& e) {
      if (e.limit) throw;
    }
    conditions_[at] = {nullptr, at, 0};
    pos_ = at;  // not a condition: parse it again as an expression, with the usual errors
    nodes_ = nodes, nesting_ = nesting, unary_depth_ = unary;
    return nullptr;
  }

  // select(a CMP b, x, y) and where(...): `a CMP b ? x : y` in function form.
  ExprPtr parse_select_call(const Token& name) {
    ExprPtr l = parse_sum();
    auto op = cmp_op(peek().kind);
    if (!op)
      fail(peek(), "the first argument of '" + name.text + "' is a comparison, e.g. " + name.text +
                       "(a > 0, a, 0); found " + describe(peek()));
    next();
    ExprPtr r = parse_sum();
    expect(Tok::kComma, "',' after the condition of '" + name.text + "'");
    ExprPtr t = parse_expr();
    expect(Tok::kComma, "',' between the branches of '" + name.text + "'");
    ExprPtr f = parse_expr();
    expect(Tok::kRParen, "')' after the 3 arguments of '" + name.text + "'");
    return Expr::select(*op, l, r, t, f);
  }

  // Returns the call and, for a one-argument max/min allowed as a reduction, which one.
  std::pair<ExprPtr, std::optional<Reduce>> parse_call(bool reduction_ok) {
    Token name = next();
    next();  // '('
    if (name.text == "select" || name.text == "where")
      return {parse_select_call(name), std::nullopt};
    std::vector<ExprPtr> args;
    if (peek().kind != Tok::kRParen) {
      do {
        args.push_back(parse_expr());
      } while (accept(Tok::kComma));
    }
    Token close = expect(Tok::kRParen, "',' or ')' in the call of '" + name.text + "'");
    static const std::pair<const char*, UnOp> kUnary[] = {
        {"exp", UnOp::kExp},     {"log", UnOp::kLog},    {"sqrt", UnOp::kSqrt},
        {"rsqrt", UnOp::kRsqrt}, {"tanh", UnOp::kTanh},  {"abs", UnOp::kAbs},
        {"sin", UnOp::kSin},     {"cos", UnOp::kCos},    {"f32", UnOp::kCastF32},
        {"f64", UnOp::kCastF64}, {"i32", UnOp::kCastI32}};
    for (const auto& [fname, op] : kUnary) {
      if (name.text == fname) {
        if (args.size() != 1)
          fail(name, "'" + name.text + "' takes 1 argument, found " + std::to_string(args.size()));
        return {Expr::unary(op, args[0]), std::nullopt};
      }
    }
    if (name.text == "fma") {
      if (args.size() != 3)
        fail(name, "'fma' takes 3 arguments (fma(a, b, c) = a * b + c, rounded once), found " +
                       std::to_string(args.size()));
      return {Expr::fma(args[0], args[1], args[2]), std::nullopt};
    }
    if (name.text == "max" || name.text == "min") {
      bool is_max = name.text == "max";
      if (args.size() == 2)
        return {Expr::binary(is_max ? BinOp::kMax : BinOp::kMin, args[0], args[1]), std::nullopt};
      if (args.size() == 1 && reduction_ok) return {args[0], is_max ? Reduce::kMax : Reduce::kMin};
      if (args.size() == 1)
        fail(name, "one-argument '" + name.text +
                       "(e)' is a reduction and must be the whole "
                       "right-hand side ('t[..] = " +
                       name.text + "(e)'); use '" + name.text + "(a, b)' for the function");
      fail(name, "'" + name.text + "' takes 2 arguments, found " + std::to_string(args.size()));
    }
    (void)close;
    fail(name, "unknown function '" + name.text +
                   "'; expected exp, log, sqrt, rsqrt, tanh, sin, cos, abs, max, min, fma, select, "
                   "where, f32, f64 or i32");
  }

  Stmt parse_stmt() {
    Stmt s;
    s.lhs = parse_access();
    s.loc = s.lhs.loc;
    Token op = next();
    if (op.kind == Tok::kPlusAssign) {
      s.op = Reduce::kAdd;
    } else if (op.kind == Tok::kMulAssign) {
      s.op = Reduce::kMul;
    } else if (op.kind != Tok::kAssign) {
      fail(op, "expected '=', '+=' or '*=' after the target, found " + describe(op));
    }
    if (op.kind == Tok::kAssign && peek().kind == Tok::kIdent &&
        (peek().text == "max" || peek().text == "min") && peek(1).kind == Tok::kLParen) {
      size_t save = pos_;
      auto [e, red] = parse_call(true);
      if (red && peek().kind == Tok::kEnd) {
        s.op = *red;
        s.rhs = e;
        return s;
      }
      if (red) {
        fail(toks_[save], "one-argument '" + toks_[save].text +
                              "(e)' is a reduction and must be the whole right-hand side");
      }
      pos_ = save;  // an ordinary two-argument max/min starting a longer expression
    }
    s.rhs = parse_expr();
    expect_end();
    // `t = fma(x, y, t)` is the fused update of `t += x * y` (one rounding): a reduction, as
    // the unfused form is, so every move treats both alike.
    if (s.op == Reduce::kNone && s.rhs->kind == ExprKind::kFma &&
        s.rhs->args[2]->kind == ExprKind::kLoad && s.rhs->args[2]->access == s.lhs) {
      Stmt f = s;
      f.op = Reduce::kAdd;
      f.fused = true;
      f.rhs = Expr::binary(BinOp::kMul, s.rhs->args[0], s.rhs->args[1]);
      if (fused_update(f)) return f;
    }
    return s;
  }

  size_t pos_ = 0;
  int64_t depth_ = 0;       ///< scopes enclosing the statement being parsed
  bool in_bounds_ = false;  ///< parsing a scope's bounds (depth_ is that scope's depth)
  /// Where an access's index being parsed keeps its indirect term; null where none may stand.
  std::optional<Gather>* gather_slot_ = nullptr;

 private:
  std::vector<Token> toks_;
  const Program& prog_;
  FileName file_;  ///< shared by every location of the parse
  int line_;
  int nesting_ = 0;
  int unary_depth_ = 0;
  int nodes_ = 0;
  /// parenthesised_condition's outcome at each token position: the select, where it ended and
  /// the operations it counted, or no select.
  struct Condition {
    ExprPtr select;
    size_t end = 0;
    int nodes = 0;
  };
  std::unordered_map<size_t, Condition> conditions_;  ///< by token position
  static constexpr int kMaxNesting = 200;
  static constexpr int kMaxNodes = 4096;
};

// The lines of a text: every '\n' ends one, and what follows the last '\n' is one more (empty
// at the end of a file that ends with a newline).
class LineSource {
 public:
  virtual ~LineSource() = default;
  /// The next line and its length in bytes; `line` is empty when `bytes` is above `limit` (the
  /// line was skipped, not held). False when there are no more lines.
  virtual bool next(std::string_view& line, size_t& bytes, size_t limit) = 0;
  /// Whether reading failed (a stream error, not the end).
  virtual bool failed() const { return false; }
};

class TextLines final : public LineSource {
 public:
  explicit TextLines(std::string_view text) : text_(text) {}
  bool next(std::string_view& line, size_t& bytes, size_t limit) override {
    if (start_ > text_.size()) return false;
    size_t end = text_.find('\n', start_);
    if (end == std::string_view::npos) end = text_.size();
    bytes = end - start_;
    line = bytes <= limit ? text_.substr(start_, bytes) : std::string_view();
    start_ = end + 1;
    return true;
  }

 private:
  std::string_view text_;
  size_t start_ = 0;
};

class StreamLines final : public LineSource {
 public:
  explicit StreamLines(std::istream& in) : in_(in), chunk_(size_t{1} << 16) {}
  bool next(std::string_view& line, size_t& bytes, size_t limit) override {
    if (done_) return false;
    line_.clear();
    bytes = 0;
    for (;;) {
      if (pos_ == len_ && !fill()) {  // the end: what is left is the last line
        done_ = true;
        break;
      }
      const char* s = chunk_.data() + pos_;
      const auto* nl = static_cast<const char*>(std::memchr(s, '\n', len_ - pos_));
      const size_t n = nl ? static_cast<size_t>(nl - s) : len_ - pos_;
      if (bytes + n <= limit)
        line_.append(s, n);
      else
        std::string().swap(line_);  // too long: keep counting, hold nothing
      bytes += n;
      pos_ += n + (nl ? 1 : 0);
      if (nl) break;
    }
    line = bytes <= limit ? std::string_view(line_) : std::string_view();
    return true;
  }
  bool failed() const override { return in_.bad(); }

 private:
  bool fill() {
    if (!in_) return false;
    in_.read(chunk_.data(), static_cast<std::streamsize>(chunk_.size()));
    len_ = static_cast<size_t>(in_.gcount());
    pos_ = 0;
    return len_ > 0;
  }
  std::istream& in_;
  std::vector<char> chunk_;
  size_t pos_ = 0, len_ = 0;
  bool done_ = false;
  std::string line_;
};

std::vector<Diagnostic> parse_lines(LineSource& source, std::string_view file_view,
                                    ProgramSink& sink) {
  const FileName file(file_view);  // one copy, shared by every location
  Program prog;                    // the declarations: names the body's lines are parsed against
  std::vector<Diagnostic> errors;
  size_t open = 0;  // the scopes a '|' can continue
  bool in_doc = true, in_body = false, declared = false;
  std::vector<std::string> doc_lines;
  int line_no = 0;
  constexpr size_t kMaxErrors = 50;
  constexpr size_t kMaxLineBytes = size_t{1} << 20;
  std::string_view line;
  size_t bytes = 0;
  const auto error_at = [&](int col, std::string message) {
    SourceLoc loc;
    loc.file = file;
    loc.line = line_no;
    loc.col = col;
    errors.push_back({std::move(loc), std::move(message)});
  };
  while (errors.size() < kMaxErrors && source.next(line, bytes, kMaxLineBytes)) {
    ++line_no;
    if (bytes > kMaxLineBytes) {
      // Refused unread: a statement has at most kMaxNodes operations, far below this, and a
      // huge line would otherwise cost its size many times over in tokens.
      error_at(1, "line is " + std::to_string(bytes) + " bytes; a line holds at most " +
                      std::to_string(kMaxLineBytes) + " (one statement)");
      continue;
    }
    auto toks = lex_line(line);
    if (toks.size() == 1) {  // blank or comment-only
      if (in_doc) {
        size_t h = line.find_first_not_of(" \t\r");
        if (h != std::string_view::npos && line[h] == '#') {
          std::string_view c = line.substr(h + 1);
          if (!c.empty() && c[0] == ' ') c.remove_prefix(1);
          while (!c.empty() && (c.back() == '\r' || c.back() == ' ')) c.remove_suffix(1);
          doc_lines.emplace_back(c);
        } else if (!doc_lines.empty()) {
          in_doc = false;
        }
      }
      continue;
    }
    in_doc = false;
    LineParser lp(std::move(toks), prog, file, line_no);
    try {
      const Token& first = lp.peek();
      if (first.kind == Tok::kBad) lp.fail(first, "unexpected character " + describe(first));
      // Reserved words never name sizes, so these keywords always start a declaration; and a
      // body line always has an access, so `NAME =` always starts a size declaration.
      bool is_buffer_decl =
          first.kind == Tok::kIdent &&
          (first.text == "input" || first.text == "output" || first.text == "temp");
      bool is_size_decl = first.kind == Tok::kIdent && lp.peek(1).kind == Tok::kAssign;
      if (is_buffer_decl || is_size_decl) {
        if (in_body) lp.fail(first, "declarations must come before the first statement");
        if (is_size_decl)
          prog.sizes.push_back(lp.parse_size_decl());
        else
          prog.buffers.push_back(lp.parse_buffer_decl());
      } else {
        in_body = true;
        size_t bars = 0;
        Token first_bar = lp.peek();
        while (lp.peek().kind == Tok::kBar) {
          Token bar = lp.next();
          if (++bars > open)
            lp.fail(bar, "too many '|': only " + std::to_string(open) +
                             " enclosing scope(s) are open here");
        }
        struct NewScope {
          int64_t extent = 0;
          std::string extent_name;
          Annot annot = Annot::kNone;
          SourceLoc loc;
          ScopeBounds bounds;
        };
        std::vector<NewScope> new_scopes;
        while (!(lp.peek().kind == Tok::kIdent && lp.peek(1).kind == Tok::kLBracket)) {
          Token t = lp.peek();
          if (t.kind == Tok::kEnd)
            lp.fail(t, "expected a statement ('name[index] = value') after the scopes");
          if (t.kind != Tok::kIdent && t.kind != Tok::kInt)
            lp.fail(t, "expected a scope extent or a statement, found " + describe(t));
          NewScope b;
          b.loc = lp.loc(t);
          std::tie(b.extent, b.extent_name) = lp.parse_extent("a scope extent");
          if (lp.peek().kind == Tok::kLParen)
            b.bounds = lp.parse_bounds(static_cast<int64_t>(bars + new_scopes.size()));
          if (lp.accept(Tok::kColon)) {
            Token a = lp.expect(Tok::kIdent, "an annotation after ':'");
            static const std::pair<const char*, Annot> kAnnots[] = {
                {"vec", Annot::kVector},
                {"par", Annot::kParallel},
                {"unroll", Annot::kUnroll},
                {"gpu_block", Annot::kGpuBlock},
                {"gpu_thread", Annot::kGpuThread}};
            bool found = false;
            for (const auto& [n, v] : kAnnots)
              if (a.text == n) b.annot = v, found = true;
            if (!found)
              lp.fail(a, "unknown scope annotation " + describe(a) +
                             "; expected vec, par, unroll, gpu_block or gpu_thread");
          }
          new_scopes.push_back(std::move(b));
        }
        if (new_scopes.size() + bars > 64)
          lp.fail(first_bar, "scopes nest too deeply (at most 64)");
        lp.depth_ = static_cast<int64_t>(bars + new_scopes.size());
        Stmt stmt = lp.parse_stmt();
        // The line parsed: hand it on. Once there are errors the sink hears nothing more, but
        // the open scopes are still followed so later lines are judged as written.
        const bool deliver = errors.empty();
        if (deliver && !declared) {
          for (size_t i = 0; i < doc_lines.size(); ++i) prog.doc += (i ? "\n" : "") + doc_lines[i];
          sink.declarations(prog);
          declared = true;
        }
        for (; open > bars; --open)
          if (deliver) sink.close_scope();
        for (auto& s : new_scopes) {
          if (deliver)
            sink.open_scope(s.extent, std::move(s.extent_name), s.annot, std::move(s.loc),
                            std::move(s.bounds));
          ++open;
        }
        if (deliver) sink.statement(std::move(stmt));
      }
    } catch (const LineError& e) {
      error_at(e.col, e.message);
    }
  }
  if (source.failed() && errors.size() < kMaxErrors) {
    line_no = 0;  // the file, not a line of it
    error_at(0, "cannot read file");
  }
  if (errors.size() >= kMaxErrors) error_at(1, "too many errors; giving up");
  if (!declared && errors.empty()) error_at(1, "the kernel has no statements");
  if (!errors.empty()) return errors;
  for (; open > 0; --open) sink.close_scope();
  return {};
}

// Builds the immutable tree from the parse's events.
class TreeBuilder final : public ProgramSink {
 public:
  void declarations(const Program& header) override { prog_ = header; }
  void open_scope(int64_t extent, std::string extent_name, Annot annot, SourceLoc loc,
                  ScopeBounds bounds) override {
    open_.push_back({extent, std::move(extent_name), annot, std::move(loc), std::move(bounds), {}});
  }
  void close_scope() override {
    Open o = std::move(open_.back());
    open_.pop_back();
    o.body.shrink_to_fit();
    body().push_back(Node::scope(o.extent, std::move(o.extent_name), o.annot, std::move(o.body),
                                 std::move(o.loc), std::move(o.bounds)));
  }
  void statement(Stmt s) override { body().push_back(Node::statement(std::move(s))); }
  Program take() {
    prog_.body.shrink_to_fit();
    return std::move(prog_);
  }

 private:
  struct Open {
    int64_t extent;
    std::string extent_name;
    Annot annot;
    SourceLoc loc;
    ScopeBounds bounds;
    std::vector<NodePtr> body;
  };
  std::vector<NodePtr>& body() { return open_.empty() ? prog_.body : open_.back().body; }
  Program prog_;
  std::vector<Open> open_;
};

Result<Program> build(LineSource& source, std::string_view file) {
  TreeBuilder tree;
  auto errors = parse_lines(source, file, tree);
  if (!errors.empty()) return errors;
  return tree.take();
}

}  // namespace

std::vector<Diagnostic> parse_stream(std::istream& in, std::string_view file, ProgramSink& sink) {
  StreamLines lines(in);
  return parse_lines(lines, file, sink);
}

std::vector<Diagnostic> parse_stream(std::string_view text, std::string_view file,
                                     ProgramSink& sink) {
  TextLines lines(text);
  return parse_lines(lines, file, sink);
}

Result<Program> parse_program(std::string_view text, std::string_view file) {
  TextLines lines(text);
  return build(lines, file);
}

Result<Program> parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::vector<Diagnostic>{{{path, 0, 0}, "cannot read file"}};
  StreamLines lines(in);
  return build(lines, path);
}

}  // namespace perfdojo::ir
