// The parser: golden diagnostics for malformed files, error recovery, and the shapes it builds.
//
// Each tests/data/errors/NAME.pdj holds one malformed kernel; NAME.expected holds the complete
// diagnostic text load_file must produce for it, with the path shortened to the file name
// (`NAME.pdj:LINE:COL: error: MESSAGE`, one line per diagnostic).
#include "ir/parse.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "ir/interp.h"
#include "ir/ir.h"
#include "ir/load.h"
#include "ir/print.h"
#include "support/test_files.h"

namespace {

namespace fs = std::filesystem;
using namespace perfdojo::ir;

using perfdojo::testing::read_text;

fs::path errors_dir() { return fs::path(PERFDOJO_TEST_DATA_DIR) / "errors"; }

std::vector<fs::path> files_with_extension(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

/// The diagnostics as the user sees them, with every path shortened to its file name.
std::string error_text_with_file_names(const std::vector<Diagnostic>& errors) {
  std::string s;
  for (Diagnostic d : errors) {
    d.loc.file = fs::path(d.loc.file.str()).filename().string();
    if (!s.empty()) s += '\n';
    s += d.str();
  }
  return s;
}

std::string without_trailing_newlines(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

const char* const kHeader =
    "N = 4\n"
    "input x: f32[N]\n"
    "output y: f32[N]\n"
    "\n";

}  // namespace

TEST_CASE("every malformed file in tests/data/errors is rejected with exactly its expected text") {
  const auto inputs = files_with_extension(errors_dir(), ".pdj");
  REQUIRE(inputs.size() >= 20);
  for (const auto& input : inputs) {
    const fs::path expected_path = fs::path(input).replace_extension(".expected");
    INFO("golden file ", input.filename().string());
    REQUIRE_MESSAGE(fs::exists(expected_path), "missing " << expected_path.filename().string());
    auto r = load_file(input.string());
    REQUIRE_FALSE(r.ok());
    CHECK(error_text_with_file_names(r.errors()) ==
          without_trailing_newlines(read_text(expected_path)));
  }
}

TEST_CASE("every expectation in tests/data/errors belongs to an input file") {
  for (const auto& expected : files_with_extension(errors_dir(), ".expected")) {
    INFO("expectation ", expected.filename().string());
    CHECK(fs::exists(fs::path(expected).replace_extension(".pdj")));
  }
}

TEST_CASE("every golden diagnostic names its file, a line and a column, and says error") {
  for (const auto& expected : files_with_extension(errors_dir(), ".expected")) {
    const std::string text = without_trailing_newlines(read_text(expected));
    const std::string prefix =
        fs::path(expected).replace_extension(".pdj").filename().string() + ":";
    std::istringstream lines(text);
    std::string line;
    int count = 0;
    while (std::getline(lines, line)) {
      INFO(expected.filename().string(), ": ", line);
      ++count;
      REQUIRE(line.rfind(prefix, 0) == 0);
      int ln = 0, col = 0;
      char rest[16] = {};
      REQUIRE(std::sscanf(line.c_str() + prefix.size(), "%d:%d: %7s", &ln, &col, rest) == 3);
      CHECK(ln > 0);
      CHECK(col > 0);
      CHECK(std::string(rest) == "error:");
    }
    CHECK(count >= 1);
  }
}

TEST_CASE("syntax errors on several lines are all reported, in line order") {
  const std::string text = std::string(kHeader) +
                           "N y[{0}] = x[{0}] +\n"     // line 5: missing operand
                           "N y[{0}] = x[{0}]\n"       // line 6: fine
                           "N y[{0}] = sigmoid(1)\n"   // line 7: unknown function
                           "N:simd y[{0}] = x[{0}]\n"  // line 8: unknown annotation
                           "N y[{0}] = x[{0}]]\n";     // line 9: trailing ']'
  auto r = load_program(text, "k.pdj");
  REQUIRE_FALSE(r.ok());
  const auto& e = r.errors();
  REQUIRE(e.size() == 4);
  CHECK(e[0].loc.line == 5);
  CHECK(e[1].loc.line == 7);
  CHECK(e[2].loc.line == 8);
  CHECK(e[3].loc.line == 9);
  CHECK(e[1].message.find("sigmoid") != std::string::npos);
  CHECK(e[2].message.find("simd") != std::string::npos);
  for (const auto& d : e) CHECK(d.loc.file == "k.pdj");
}

TEST_CASE("checker errors on several lines are all reported, in line order") {
  const std::string text = std::string(kHeader) +
                           "N y[{0}] = q[{0}]\n"    // line 5: undeclared buffer
                           "N y[{0}] = x[{0}]\n"    // line 6: fine
                           "N y[{0}] = x[{0}+1]\n"  // line 7: out of bounds
                           "N x[{0}] = y[{0}]\n";   // line 8: writes an input
  auto r = load_program(text, "k.pdj");
  REQUIRE_FALSE(r.ok());
  const auto& e = r.errors();
  REQUIRE(e.size() == 3);
  CHECK(e[0].loc.line == 5);
  CHECK(e[1].loc.line == 7);
  CHECK(e[2].loc.line == 8);
}

TEST_CASE("one bad line does not hide a later declaration error") {
  const std::string text =
      "N = 4\n"
      "input x: f32[M]\n"      // line 2: unknown size
      "output y: f32[N] = \n"  // line 3: missing value
      "\n"
      "N y[{0}] = 1\n";
  auto r = parse_program(text);
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 2);
  CHECK(r.errors()[0].loc.line == 2);
  CHECK(r.errors()[1].loc.line == 3);
  CHECK(r.errors()[1].loc.col == 20);
}

TEST_CASE("the parser gives up after 50 errors and says so") {
  std::string text = kHeader;
  for (int i = 0; i < 80; ++i) text += "N y[{0}] = @\n";
  auto r = parse_program(text);
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 51);
  CHECK(r.errors()[49].loc.line == 54);
  CHECK(r.errors().back().message == "too many errors; giving up");
}

TEST_CASE("an unreadable file is a diagnostic naming the path, not a crash") {
  const std::string path = (errors_dir() / "no-such-file.pdj").string();
  auto r = load_file(path);
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  CHECK(r.error_text() == path + ": error: cannot read file");
  // A folder opens but cannot be read: the same diagnostic, from the streaming reader.
  const std::string dir = errors_dir().string();
  auto d = load_file(dir);
  REQUIRE_FALSE(d.ok());
  CHECK(d.error_text() == dir + ": error: cannot read file");
}

TEST_CASE("the docs' softmax example nests its statements as its bars say") {
  const std::string text =
      "# softmax over the rows of s\n"
      "B = 64\n"
      "N = 1024\n"
      "input s: f32[B, N]\n"
      "output d: f32[B, N]\n"
      "temp m: f32[B] = -inf\n"
      "temp x: f32[B, N]\n"
      "temp e: f32[B, N]\n"
      "temp a: f32[B] = 0\n"
      "temp i: f32[B]\n"
      "\n"
      "B N m[{0}] = max(s[{0},{1}])\n"
      "| N x[{0},{1}] = s[{0},{1}] - m[{0}]\n"
      "| | e[{0},{1}] = exp(x[{0},{1}])\n"
      "| | a[{0}] += e[{0},{1}]\n"
      "B i[{0}] = 1 / a[{0}]\n"
      "| N d[{0},{1}] = e[{0},{1}] * i[{0}]\n";
  auto r = load_program(text);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  const Program& p = *r;
  CHECK(p.doc == "softmax over the rows of s");
  REQUIRE(p.body.size() == 2);
  // First B scope: [N{max}, N{x, e, a}].
  const Node& b0 = *p.body[0];
  REQUIRE(b0.is_scope);
  CHECK(b0.extent == 64);
  CHECK(b0.extent_name == "B");
  REQUIRE(b0.body.size() == 2);
  REQUIRE(b0.body[0]->is_scope);
  REQUIRE(b0.body[0]->body.size() == 1);
  CHECK(b0.body[0]->body[0]->stmt.op == Reduce::kMax);
  CHECK(b0.body[0]->body[0]->stmt.lhs.buffer == "m");
  const Node& n1 = *b0.body[1];
  REQUIRE(n1.is_scope);
  CHECK(n1.extent == 1024);
  REQUIRE(n1.body.size() == 3);
  CHECK(n1.body[0]->stmt.lhs.buffer == "x");
  CHECK(n1.body[1]->stmt.lhs.buffer == "e");
  CHECK(n1.body[2]->stmt.lhs.buffer == "a");
  CHECK(n1.body[2]->stmt.op == Reduce::kAdd);
  // Second B scope: [i, N{d}].
  const Node& b1 = *p.body[1];
  REQUIRE(b1.body.size() == 2);
  CHECK_FALSE(b1.body[0]->is_scope);
  CHECK(b1.body[0]->stmt.lhs.buffer == "i");
  REQUIRE(b1.body[1]->is_scope);
  CHECK(b1.body[1]->body[0]->stmt.lhs.buffer == "d");
}

TEST_CASE("a bar continues the innermost open scopes, so fewer bars close the inner ones") {
  const std::string text =
      "N = 4\n"
      "output y: f32[N, N]\n"
      "\n"
      "N N y[{0},{1}] = 1\n"
      "| y[{0},0] = 2\n"       // inside the outer scope only
      "| N y[{0},{1}] = 3\n";  // a new inner scope, sibling of the first
  auto r = load_program(text);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  REQUIRE(r->body.size() == 1);
  const Node& outer = *r->body[0];
  REQUIRE(outer.body.size() == 3);
  CHECK(outer.body[0]->is_scope);
  CHECK_FALSE(outer.body[1]->is_scope);
  CHECK(outer.body[2]->is_scope);
  CHECK(outer.body[0] != outer.body[2]);
}

TEST_CASE("an index is folded into one affine function of the iterators") {
  const std::string text =
      "N = 8\n"
      "input x: f32[128]\n"
      "output y: f32[N, N]\n"
      "\n"
      "N N y[{0},{1}] = x[2*({0}+{1})*3 - {1} + N - 8 + (({0}))]\n";
  auto r = load_program(text);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  const Affine& ix = r->body[0]->body[0]->body[0]->stmt.rhs->access.index[0];
  CHECK(ix.coeffs == std::vector<int64_t>{7, 5});
  CHECK(ix.constant == 0);
}

TEST_CASE("a scope token may be a literal extent with an annotation") {
  auto r = load_program("output y: f32[8]\n\n2:par 4:vec y[{0}*4+{1}] = 1\n");
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  const Node& outer = *r->body[0];
  CHECK(outer.extent == 2);
  CHECK(outer.extent_name.empty());
  CHECK(outer.annot == Annot::kParallel);
  CHECK(outer.body[0]->extent == 4);
  CHECK(outer.body[0]->annot == Annot::kVector);
}

TEST_CASE("only the leading comment lines become the kernel's description") {
  const std::string text =
      "\n"
      "# first line\n"
      "#   indented second line  \n"
      "#\n"
      "\n"
      "# not part of the description\n"
      "N = 4  # trailing comment\n"
      "output y: f32[N]\n"
      "\n"
      "N y[{0}] = 1  # another\n";
  auto r = load_program(text);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  CHECK(r->doc == "first line\n  indented second line\n");
}

TEST_CASE("CRLF line endings and tabs parse like LF and spaces") {
  const std::string lf = std::string(kHeader) + "N y[{0}] = x[{0}] * 2\n";
  const std::string crlf =
      "N = 4\r\ninput x:\tf32[N]\r\noutput y: f32[N]\r\n\r\nN\ty[{0}] = x[{0}]\t*\t2\r\n";
  auto a = load_program(lf), b = load_program(crlf);
  REQUIRE_MESSAGE(a.ok(), a.error_text());
  REQUIRE_MESSAGE(b.ok(), b.error_text());
  CHECK(structurally_equal(*a, *b));
}

TEST_CASE("a file without a trailing newline parses its last line") {
  auto r = load_program(std::string(kHeader) + "N y[{0}] = x[{0}]");
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  CHECK(r->body.size() == 1);
}

TEST_CASE("one-argument max and min are reductions, two-argument ones are functions") {
  const std::string text = std::string(kHeader) +
                           "N y[{0}] = max(x[{0}])\n"
                           "N y[{0}] = min(x[{0}])\n"
                           "N y[{0}] = max(x[{0}], 0)\n"
                           "N y[{0}] = max(x[{0}], 0) + 1\n";
  auto r = load_program(text);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  REQUIRE(r->body.size() == 4);
  CHECK(r->body[0]->body[0]->stmt.op == Reduce::kMax);
  CHECK(r->body[1]->body[0]->stmt.op == Reduce::kMin);
  const Stmt& two = r->body[2]->body[0]->stmt;
  CHECK(two.op == Reduce::kNone);
  CHECK(two.rhs->kind == ExprKind::kBinary);
  CHECK(two.rhs->bin == BinOp::kMax);
  CHECK(r->body[3]->body[0]->stmt.rhs->bin == BinOp::kAdd);
}

TEST_CASE("the select binds loosest and nests to the right") {
  auto r = load_program(std::string(kHeader) +
                        "N y[{0}] = x[{0}] > 0 ? x[{0}] + 1 : x[{0}] < -1 ? -1 : 0\n");
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  const Expr& e = *r->body[0]->body[0]->stmt.rhs;
  REQUIRE(e.kind == ExprKind::kSelect);
  CHECK(e.cmp == CmpOp::kGt);
  CHECK(e.args[2]->kind == ExprKind::kBinary);
  REQUIRE(e.args[3]->kind == ExprKind::kSelect);
  CHECK(e.args[3]->cmp == CmpOp::kLt);
}

TEST_CASE("columns of errors count from 1 at the line's first byte") {
  // The '@' is the 14th byte of its line.
  auto r = parse_program(std::string(kHeader) + "N y[{0}] = 1 @\n");
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors()[0].loc.line == 5);
  CHECK(r.errors()[0].loc.col == 14);
  // At the very start of a line.
  auto s = parse_program(std::string(kHeader) + "@ y[{0}] = 1\n");
  REQUIRE_FALSE(s.ok());
  CHECK(s.errors()[0].loc.col == 1);
  CHECK(s.errors()[0].message == "unexpected character '@'");
}

// Inputs that once overflowed the parser's stack or the checker's arithmetic: each must be a
// precise diagnostic.
TEST_CASE("pathological nesting, long expressions and huge numbers are diagnosed, not crashed on") {
  const std::string head = "output y: f32[4]\n\n";
  auto expect_error = [&](const std::string& body, const std::string& needle) {
    auto r = load_program(head + body, "p.pdj");
    REQUIRE_FALSE(r.ok());
    CHECK_MESSAGE(r.error_text().find(needle) != std::string::npos, r.error_text());
  };
  expect_error("1 y[" + std::string(10000, '(') + "0" + std::string(10000, ')') + "] = 1\n",
               "nests too deeply");
  std::string sel;
  for (int i = 0; i < 60000; ++i) sel += "1<2?1:";
  expect_error("1 y[0] = " + sel + "1\n", "nests too deeply");
  std::string sum;
  for (int i = 0; i < 50000; ++i) sum += "y[0]+";
  expect_error("1 y[0] = " + sum + "1\n", "too long");
  expect_error("2 y[{0}*9223372036854775807+1] = 1\n", "out of range");
  expect_error("1 y[-{0}*9223372036854775807-{0}] = 1\n", "out of range");
  // Brackets are tried as a select's condition once each: 2^depth tries took the fuzzer's 15 s
  // on a line of 200 '('. Deep brackets that are not conditions, and one that is, at the bottom.
  expect_error("1 y[0] = " + std::string(190, '(') + "y[0]" + std::string(190, ')') + "\n",
               "nests too deeply");
  auto deep = load_program(head + "1 y[0] = " + std::string(90, '(') + "y[0]" +
                           std::string(90, ')') + "\n");
  REQUIRE_MESSAGE(deep.ok(), deep.error_text());
  auto cond = load_program(head + "1 y[0] = " + std::string(60, '(') + "(y[0] > 1) ? 2 : 3" +
                           std::string(60, ')') + " + ((y[0] < 0) ? 1 : (y[0] > 2) ? 2 : 0)\n");
  REQUIRE_MESSAGE(cond.ok(), cond.error_text());
  CHECK(print_program(cond.value()).find("y[0] > 1 ? 2 : 3") != std::string::npos);
  auto big = load_program(
      "temp t: f32[4294967296, 4294967296]\noutput y: f32[1]\n\n1 t[0,0] = 1\n| y[0] = t[0,0]\n",
      "p.pdj");
  REQUIRE_FALSE(big.ok());
  CHECK(big.error_text().find("too large") != std::string::npos);
}

TEST_CASE(
    "a line beyond 1 MiB is refused before it is read into tokens, and later lines are still "
    "checked") {
  const std::string head = "output y: f32[4]\n\n";
  std::string huge = "1 y[0] = ";
  while (huge.size() <= (size_t{1} << 20)) huge += "y[0]+";
  huge += "1\n";
  auto r = parse_program(head + huge + "4 y[{0}] = @\n", "p.pdj");
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 2);
  CHECK(r.errors()[0].loc.line == 3);
  CHECK(r.errors()[0].message.find("a line holds at most 1048576") != std::string::npos);
  CHECK(r.errors()[1].loc.line == 4);
  // Deep nesting that long is refused the same way.
  auto deep = parse_program(head + "1 y[" + std::string(3 << 20, '(') + "0] = 1\n", "p.pdj");
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.error_text().find("a line holds at most") != std::string::npos);
}

TEST_CASE("bytes outside printable ASCII are shown escaped in messages") {
  auto r = parse_program("output y: f32[4]\n\n4 y[{0}] = 1 \xff\xfe\n", "p.pdj");
  REQUIRE_FALSE(r.ok());
  CHECK_MESSAGE(r.error_text().find("'\\xff'") != std::string::npos, r.error_text());
  for (unsigned char c : r.error_text()) CHECK(((c >= 0x20 && c < 0x7F) || c == 10));
}

TEST_CASE(
    "select(c, a, b), where(...), a bracketed condition and sizes as values read as the ?: form "
    "and numbers") {
  const std::string head = "N = 8\ninput x: f32[N]\noutput y: f32[N]\n\n";
  auto sugar = load_program(
      head +
      "N y[{0}] = select(x[{0}] > 0, x[{0}], 0) / N + where(x[{0}] <= 1, 1, (x[{0}] - 1))\n");
  auto plain = load_program(
      head + "N y[{0}] = (x[{0}] > 0 ? x[{0}] : 0) / 8 + (x[{0}] <= 1 ? 1 : x[{0}] - 1)\n");
  auto bracketed = load_program(
      head + "N y[{0}] = ((x[{0}] > 0) ? x[{0}] : 0) / N + ((x[{0}] <= 1) ? 1 : x[{0}] - 1)\n");
  REQUIRE_MESSAGE(sugar.ok(), sugar.error_text());
  REQUIRE_MESSAGE(plain.ok(), plain.error_text());
  REQUIRE_MESSAGE(bracketed.ok(), bracketed.error_text());
  CHECK(structurally_equal(sugar.value(), plain.value()));
  CHECK(structurally_equal(bracketed.value(), plain.value()));
  CHECK(print_program(sugar.value()) == print_program(plain.value()));
  // A parenthesis that holds an ordinary expression is still one.
  auto paren = load_program(head + "N y[{0}] = (x[{0}] + 1) * 2\n");
  CHECK(paren.ok());
  auto bad = parse_program(head + "N y[{0}] = (x[{0}] > 1) + 2\n", "p.pdj");
  REQUIRE_FALSE(bad.ok());
  CHECK_MESSAGE(bad.error_text().find("'?' after the comparison") != std::string::npos,
                bad.error_text());
}

TEST_CASE("declaration mistakes point at the token that is wrong") {
  auto a = load_program("N = x\n", "d.pdj");
  CHECK(a.error_text().find("d.pdj:1:5: error: expected an integer size, found 'x'") !=
        std::string::npos);
  auto b = load_program("input: f32[4]\n", "d.pdj");
  CHECK(b.error_text().find("d.pdj:1:6: error: expected a buffer name after 'input'") !=
        std::string::npos);
  auto c = load_program("N = -4\n", "d.pdj");
  CHECK(c.error_text().find("must be positive") != std::string::npos);
}

TEST_CASE("iterators are values: integer arithmetic on them folds into one affine node") {
  const std::string head = "N = 8\ninput x: f32[N, N]\noutput y: f32[N, N]\n\n";
  auto one = [&](const std::string& rhs) -> ExprPtr {
    auto r = load_program(head + "N N y[{0},{1}] = " + rhs + "\n");
    REQUIRE_MESSAGE(r.ok(), rhs << ": " << r.error_text());
    return r.value().body[0]->body[0]->body[0]->stmt.rhs;
  };
  // One node, whatever the spelling, with the function a*{0} + b*{1} + c.
  for (const char* rhs : {"{0}*8+{1}", "8*{0} + {1}", "({1} + {0} * N)", "-(-{1}) + {0}*8"}) {
    INFO(std::string(rhs));
    ExprPtr e = one(rhs);
    REQUIRE(e->kind == ExprKind::kIndex);
    CHECK(e->affine().coeffs == std::vector<int64_t>{8, 1});
    CHECK(e->affine().constant == 0);
  }
  CHECK(one("{1} - 1 + 3")->affine().constant == 2);
  CHECK(one("-{0}")->affine().coeffs == std::vector<int64_t>{-1});
  // What is not integer arithmetic on iterators stays as written.
  CHECK(one("{0} * 0.5")->kind == ExprKind::kBinary);
  CHECK(one("{0} / 2")->kind == ExprKind::kBinary);
  CHECK(one("x[{0},{1}] + {0}")->kind == ExprKind::kBinary);
  // An iterator minus itself is the constant it equals.
  ExprPtr zero = one("{1} + 3 - {1}");
  CHECK(zero->kind == ExprKind::kConst);
  CHECK(zero->value == 3);
  // The printed form parses back to the same program, wherever the node sits.
  for (const char* rhs :
       {"{1} <= {0} ? x[{0},{1}] : -inf", "x[{0},{1}] * ({0}*8+{1})", "x[{0},{1}] - -{0}",
        "x[{0},{1}] / ({1}*2) + {0}*3", "({0}+1) * x[{0},{1}]",
        "exp({0} * -0.5) + sin({1}) * cos({0}+1)", "select({1} < {0} + 2, {0}, {1}*2-1)"}) {
    INFO(std::string(rhs));
    auto p = load_program(head + "N N y[{0},{1}] = " + rhs + "\n");
    REQUIRE_MESSAGE(p.ok(), p.error_text());
    auto q = load_program(print_program(p.value()));
    REQUIRE_MESSAGE(q.ok(), print_program(p.value()) << q.error_text());
    CHECK(structurally_equal(p.value(), q.value()));
    CHECK(print_program(p.value()) == print_program(q.value()));
    CHECK(structural_hash(p.value()) == structural_hash(q.value()));
  }
  // Folding stays within the index range: beyond it the product is kept as written.
  CHECK(one("{0} * 1e15")->kind == ExprKind::kBinary);
}

TEST_CASE("the interpreter reads an iterator value as an integer in the statement's type") {
  auto p = load_program(
      "output y: f32[4, 8]\noutput z: i32[4, 8]\noutput w: f64[4, 8]\n\n"
      "4 8 y[{0},{1}] = {1} <= {0} ? {0}*8+{1} : -1\n"
      "| | z[{0},{1}] = {1} * 3 / 2\n"
      "| | w[{0},{1}] = sin({1}) + {0}\n");
  REQUIRE_MESSAGE(p.ok(), p.error_text());
  auto out = interpret(p.value(), {});
  REQUIRE(out.ok());
  const auto& y = out.value().at("y").data;
  const auto& z = out.value().at("z").data;
  const auto& w = out.value().at("w").data;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 8; ++j) {
      CHECK(y[i * 8 + j] == (j <= i ? i * 8 + j : -1));
      CHECK(z[i * 8 + j] == (j * 3) / 2);  // i32 division truncates
      CHECK(w[i * 8 + j] == doctest::Approx(std::sin(j) + i).epsilon(1e-15));
    }
  }
}
