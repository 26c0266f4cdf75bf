// The canonical printer: parse(print(p)) == p, print is a fixed point after one pass, and the
// printer's exact output for every expression form.
#include "ir/print.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "ir/ir.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "support/test_files.h"

namespace {

namespace fs = std::filesystem;
using namespace perfdojo::ir;

/// Asserts the round-trip laws on `p`: print, re-parse, compare structure, text and hash.
void check_round_trip(const Program& p) {
  const std::string t1 = print_program(p);
  auto p2 = parse_program(t1, "printed.pdj");
  REQUIRE_MESSAGE(p2.ok(), p2.error_text() << "\n--- printed text ---\n" << t1);
  CHECK(structurally_equal(p, *p2));
  CHECK(print_program(*p2) == t1);
  CHECK(structural_hash(p) == structural_hash(*p2));
  CHECK(p2->doc == p.doc);
}

using perfdojo::testing::must_load;

/// The header every one-statement case below uses.
const char* const kPrintHeader =
    "N = 4\n"
    "input a: f32[N]\n"
    "input b: f32[N]\n"
    "input c: f32[N]\n"
    "input k: i32[N]\n"
    "output y: f32[N]\n"
    "output w: i32[N]\n"
    "\n";

/// The canonical text of one statement written as `stmt` inside `N` (without the scope token).
std::string printed_statement(const std::string& stmt) {
  Program p = must_load(std::string(kPrintHeader) + "N " + stmt + "\n");
  check_round_trip(p);
  const std::string text = print_program(p);
  const std::string body = text.substr(text.find("\n\n") + 2);
  REQUIRE(body.rfind("N ", 0) == 0);
  return body.substr(2, body.size() - 3);  // without "N " and the final newline
}

std::vector<fs::path> suite_kernels() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(PERFDOJO_KERNEL_DIR))
    if (e.path().extension() == ".pdj") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("every suite kernel survives print then parse unchanged") {
  const auto kernels = suite_kernels();
  REQUIRE_FALSE(kernels.empty());
  for (const auto& path : kernels) {
    INFO("kernel ", path.filename().string());
    auto p = load_file(path.string());
    REQUIRE_MESSAGE(p.ok(), p.error_text());
    check_round_trip(*p);
    // The printed text is itself a valid kernel, not just parseable.
    auto checked = load_program(print_program(*p));
    CHECK_MESSAGE(checked.ok(), checked.error_text());
  }
}

TEST_CASE("a program using every construct prints in canonical form and re-parses equal") {
  const std::string text =
      "#   exprs\n"
      "#\n"
      "# more doc\n"
      "N = 8\n"
      "M=4\n"
      "input a: f32[N, M] in [-2, 0.5]\n"
      "input b: f32[N]\n"
      "input c: f32[4]\n"
      "input k: i32[N] in [0, 10]\n"
      "output y: f32[N,M]=-inf\n"
      "output z: f32[N] = inf\n"
      "output w: i32[ N ]\n"
      "temp t: f64[1] = 1e-5\n"
      "temp u: f32[2, 3] = -0.125\n"
      "\n"
      "N:par M:vec y[{0},{1}] = max(a[{0},{1}] - (b[{0}] - c[{1}]))\n"
      "| z[{0}] = min(a[{0}, 0] / (b[{0}] * c[0]))\n"
      "| 4:unroll w[{0}] = k[N-1-{0}] > 0 ? i32(-a[{0},{1}] * 2) : -k[({0})]\n"
      "2 3 u[{0},{1}] = -(a[-{0}*2+7-{0}*2,{1}] + 1) * -3.5e+10\n"
      "| | t[0] += f64(u[{0},{1}]) < 1 ? 1e-05 : (2 < 3 ? 4 : 5) + 1\n"
      "1:gpu_block 1:gpu_thread t[{0}+{1}] *= f64(b[{0}*5]) * f64(c[({0}+1)*2 - {1}*3])\n"
      "N y[{0},1] = exp(log(sqrt(rsqrt(tanh(abs(f32(-b[{0}]))))))) - - -b[{0}] * (1 + 2 * 3)\n"
      "| z[{0}] = max(b[{0}], min(1, -2)) - (b[{0}] < 0 ? -b[{0}] : b[{0}]) / 2 - (1 - b[{0}])\n";
  const std::string canonical =
      "#   exprs\n"
      "#\n"
      "# more doc\n"
      "N = 8\n"
      "M = 4\n"
      "input a: f32[N, M] in [-2, 0.5]\n"
      "input b: f32[N]\n"
      "input c: f32[4]\n"
      "input k: i32[N] in [0, 10]\n"
      "output y: f32[N, M] = -inf\n"
      "output z: f32[N] = inf\n"
      "output w: i32[N]\n"
      "temp t: f64[1] = 1e-05\n"
      "temp u: f32[2, 3] = -0.125\n"
      "\n"
      "N:par M:vec y[{0},{1}] = max(a[{0},{1}] - (b[{0}] - c[{1}]))\n"
      "| z[{0}] = min(a[{0},0] / (b[{0}] * c[0]))\n"
      "| 4:unroll w[{0}] = k[-{0}+7] > 0 ? i32(-a[{0},{1}] * 2) : -k[{0}]\n"
      "2 3 u[{0},{1}] = -(a[-{0}*4+7,{1}] + 1) * -3.5e+10\n"
      "| | t[0] += f64(u[{0},{1}]) < 1 ? 1e-05 : (2 < 3 ? 4 : 5) + 1\n"
      "1:gpu_block 1:gpu_thread t[{0}+{1}] *= f64(b[{0}*5]) * f64(c[{0}*2-{1}*3+2])\n"
      "N y[{0},1] = exp(log(sqrt(rsqrt(tanh(abs(f32(-b[{0}]))))))) - --b[{0}] * (1 + 2 * 3)\n"
      "| z[{0}] = max(b[{0}], min(1, -2)) - (b[{0}] < 0 ? -b[{0}] : b[{0}]) / 2 - (1 - b[{0}])\n";
  Program p = must_load(text);
  CHECK(print_program(p) == canonical);
  check_round_trip(p);
}

TEST_CASE("the printer keeps exactly the parentheses that precedence and order need") {
  CHECK(printed_statement("y[{0}] = (a[{0}] + b[{0}]) + c[{0}]") ==
        "y[{0}] = a[{0}] + b[{0}] + c[{0}]");
  CHECK(printed_statement("y[{0}] = a[{0}] + (b[{0}] + c[{0}])") ==
        "y[{0}] = a[{0}] + (b[{0}] + c[{0}])");
  CHECK(printed_statement("y[{0}] = a[{0}] - (b[{0}] - c[{0}])") ==
        "y[{0}] = a[{0}] - (b[{0}] - c[{0}])");
  CHECK(printed_statement("y[{0}] = (a[{0}] - b[{0}]) - c[{0}]") ==
        "y[{0}] = a[{0}] - b[{0}] - c[{0}]");
  CHECK(printed_statement("y[{0}] = a[{0}] / (b[{0}] * c[{0}])") ==
        "y[{0}] = a[{0}] / (b[{0}] * c[{0}])");
  CHECK(printed_statement("y[{0}] = (a[{0}] * b[{0}]) / c[{0}]") ==
        "y[{0}] = a[{0}] * b[{0}] / c[{0}]");
  CHECK(printed_statement("y[{0}] = a[{0}] * (b[{0}] + c[{0}])") ==
        "y[{0}] = a[{0}] * (b[{0}] + c[{0}])");
  CHECK(printed_statement("y[{0}] = (a[{0}] * b[{0}]) + c[{0}]") ==
        "y[{0}] = a[{0}] * b[{0}] + c[{0}]");
  CHECK(printed_statement("y[{0}] = ((((a[{0}]))))") == "y[{0}] = a[{0}]");
  CHECK(printed_statement("y[{0}] = exp((a[{0}] + 1))") == "y[{0}] = exp(a[{0}] + 1)");
}

TEST_CASE("unary minus prints tight to a load and parenthesises anything looser") {
  CHECK(printed_statement("y[{0}] = -a[{0}]") == "y[{0}] = -a[{0}]");
  CHECK(printed_statement("y[{0}] = (-a[{0}]) * b[{0}]") == "y[{0}] = -a[{0}] * b[{0}]");
  CHECK(printed_statement("y[{0}] = -(a[{0}] * b[{0}])") == "y[{0}] = -(a[{0}] * b[{0}])");
  CHECK(printed_statement("y[{0}] = -(a[{0}] + b[{0}])") == "y[{0}] = -(a[{0}] + b[{0}])");
  CHECK(printed_statement("y[{0}] = -(-a[{0}])") == "y[{0}] = --a[{0}]");
  CHECK(printed_statement("y[{0}] = a[{0}] - -b[{0}]") == "y[{0}] = a[{0}] - -b[{0}]");
  CHECK(printed_statement("y[{0}] = -(a[{0}] > 0 ? 1 : 2)") == "y[{0}] = -(a[{0}] > 0 ? 1 : 2)");
}

TEST_CASE("negative literals fold into constants and print with their sign") {
  CHECK(printed_statement("y[{0}] = a[{0}] - -1") == "y[{0}] = a[{0}] - -1");
  CHECK(printed_statement("y[{0}] = -2 * a[{0}]") == "y[{0}] = -2 * a[{0}]");
  CHECK(printed_statement("y[{0}] = -(2) * a[{0}]") == "y[{0}] = -2 * a[{0}]");
  CHECK(printed_statement("y[{0}] = - -3") == "y[{0}] = 3");
  CHECK(printed_statement("y[{0}] = -0") == "y[{0}] = -0");
  CHECK(printed_statement("y[{0}] = a[{0}] * -inf") == "y[{0}] = a[{0}] * -inf");
}

TEST_CASE("numbers print in their shortest exact form") {
  CHECK(printed_statement("y[{0}] = 1e-5") == "y[{0}] = 1e-05");
  CHECK(printed_statement("y[{0}] = 1E3") == "y[{0}] = 1000");
  CHECK(printed_statement("y[{0}] = 1e20") == "y[{0}] = 1e+20");
  CHECK(printed_statement("y[{0}] = .5") == "y[{0}] = 0.5");
  CHECK(printed_statement("y[{0}] = 5.") == "y[{0}] = 5");
  CHECK(printed_statement("y[{0}] = 0.1") == "y[{0}] = 0.1");
  CHECK(printed_statement("y[{0}] = 0.7978845608") == "y[{0}] = 0.7978845608");
  CHECK(printed_statement("y[{0}] = 2.50") == "y[{0}] = 2.5");
  CHECK(printed_statement("y[{0}] = inf") == "y[{0}] = inf");
  CHECK(print_number(1e-5) == "1e-05");
  CHECK(print_number(-std::numeric_limits<double>::infinity()) == "-inf");
}

TEST_CASE("selects print without parentheses on their own and with them inside arithmetic") {
  CHECK(printed_statement("y[{0}] = a[{0}] > 0 ? a[{0}] : 0") ==
        "y[{0}] = a[{0}] > 0 ? a[{0}] : 0");
  CHECK(printed_statement("y[{0}] = 1 + (a[{0}] > 0 ? 1 : 2)") ==
        "y[{0}] = 1 + (a[{0}] > 0 ? 1 : 2)");
  CHECK(printed_statement("y[{0}] = a[{0}] < 0 ? (b[{0}] < 0 ? 1 : 2) : 3") ==
        "y[{0}] = a[{0}] < 0 ? b[{0}] < 0 ? 1 : 2 : 3");
  CHECK(printed_statement("y[{0}] = (a[{0}] < 0 ? 1 : 2) < b[{0}] ? 1 : 2") ==
        "y[{0}] = (a[{0}] < 0 ? 1 : 2) < b[{0}] ? 1 : 2");
  CHECK(printed_statement("y[{0}] = a[{0}]+1 <= b[{0}]*2 ? 1 : 0") ==
        "y[{0}] = a[{0}] + 1 <= b[{0}] * 2 ? 1 : 0");
  for (const char* op : {"<", "<=", ">", ">=", "==", "!="}) {
    const std::string s = std::string("y[{0}] = a[{0}] ") + op + " b[{0}] ? 1 : 0";
    CHECK(printed_statement(s) == s);
  }
}

TEST_CASE("casts, functions and reductions print as written") {
  CHECK(printed_statement("w[{0}] = i32(a[{0}] * 2) + k[{0}]") ==
        "w[{0}] = i32(a[{0}] * 2) + k[{0}]");
  CHECK(printed_statement("y[{0}] = f32(f64(k[{0}]))") == "y[{0}] = f32(f64(k[{0}]))");
  CHECK(printed_statement("y[{0}] = max(a[{0}], b[{0}])") == "y[{0}] = max(a[{0}], b[{0}])");
  CHECK(printed_statement("y[{0}] = max(max(a[{0}], b[{0}]))") ==
        "y[{0}] = max(max(a[{0}], b[{0}]))");
  CHECK(printed_statement("y[{0}] = min( a[{0}] )") == "y[{0}] = min(a[{0}])");
  CHECK(printed_statement("y[{0}] += a[{0}]") == "y[{0}] += a[{0}]");
  CHECK(printed_statement("y[{0}] *= a[{0}]") == "y[{0}] *= a[{0}]");
  CHECK(printed_statement("y[{0}] = abs(rsqrt(a[{0}]))") == "y[{0}] = abs(rsqrt(a[{0}]))");
}

TEST_CASE("affine indices print iterators in depth order, then the constant") {
  const std::string header = "N = 4\ninput x: f32[64]\noutput y: f32[8, 8]\n\n";
  auto index_of = [&](const std::string& index) {
    Program p = must_load(header + "N N y[{0},{1}] = x[" + index + "]\n");
    check_round_trip(p);
    return print_affine(p.body[0]->body[0]->body[0]->stmt.rhs->access.index[0]);
  };
  CHECK(index_of("-{0}*2+7") == "-{0}*2+7");
  CHECK(index_of("7-2*{0}") == "-{0}*2+7");
  CHECK(index_of("7 - {0} * 2") == "-{0}*2+7");
  CHECK(index_of("({0}+1)*2") == "{0}*2+2");
  CHECK(index_of("{1}-{0}+3") == "-{0}+{1}+3");
  CHECK(index_of("{1}*8+{0}") == "{0}+{1}*8");
  CHECK(index_of("N-1-{0}") == "-{0}+3");
  CHECK(index_of("{0}*2-{0}*2") == "0");
  CHECK(index_of("-(-{0})") == "{0}");
  CHECK(index_of("2*{0}*3") == "{0}*6");
  CHECK(index_of("{0}*16+-{1}+3") == "{0}*16-{1}+3");
}

TEST_CASE("declarations keep size names, literal dims, inits and ranges") {
  const std::string text =
      "N=4\n"
      "input x: f32[N,3] in [ -0.5 , 2 ]\n"
      "input j: i32[2] in [0, 100]\n"
      "output y: f64[3] = -inf\n"
      "output z: f32[N] = inf\n"
      "temp t: i32[1]=7\n"
      "\n"
      "3 y[{0}] = max(f64(x[0,{0}]))\n"
      "N z[{0}] = min(x[{0},0])\n"
      "1 t[0] = j[1]\n";
  Program p = must_load(text);
  CHECK(print_program(p) ==
        "N = 4\n"
        "input x: f32[N, 3] in [-0.5, 2]\n"
        "input j: i32[2] in [0, 100]\n"
        "output y: f64[3] = -inf\n"
        "output z: f32[N] = inf\n"
        "temp t: i32[1] = 7\n"
        "\n"
        "3 y[{0}] = max(f64(x[0,{0}]))\n"
        "N z[{0}] = min(x[{0},0])\n"
        "1 t[0] = j[1]\n");
  check_round_trip(p);
}

TEST_CASE("a statement outside every scope prints without a scope token") {
  Program p = must_load("output y: f32[1]\n\ny[0] = 3\n1 y[0] += 1\n");
  CHECK(print_program(p) == "output y: f32[1]\n\ny[0] = 3\n1 y[0] += 1\n");
  check_round_trip(p);
}

TEST_CASE("the doc comment and whitespace take no part in equality or the hash") {
  Program a = must_load("# one\nN = 4\noutput y: f32[N]\n\nN y[{0}] = 1\n");
  Program b = must_load("# two\n\nN=4\noutput   y : f32 [ N ]\n\n  N  y[ {0} ]=1  # note\n");
  CHECK(a.doc != b.doc);
  CHECK(structurally_equal(a, b));
  CHECK(structural_hash(a) == structural_hash(b));
}

TEST_CASE("structural_hash and equality tell apart programs that differ in one detail") {
  const std::string base =
      "N = 4\n"
      "input x: f32[N, N]\n"
      "output y: f32[N] = 0\n"
      "\n"
      "N N y[{0}] += x[{0},{1}] * 2\n";
  auto variant = [&](const std::string& from, const std::string& to) {
    std::string t = base;
    const size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    return must_load(t);
  };
  const Program p = must_load(base);
  const uint64_t h = structural_hash(p);
  struct Case {
    const char* what;
    Program q;
  };
  const std::vector<Case> cases = {
      {"an index coefficient", variant("x[{0},{1}]", "x[{0},{1}*1+0]")},  // same: control below
      {"an index coefficient", variant("x[{0},{1}]", "x[{0},-{1}+3]")},
      {"an index constant", variant("x[{0},{1}]", "x[{0},{1}*0+1]")},
      {"an extent", variant("N N y", "N 3 y")},
      {"an extent's name only", variant("N N y", "N 4 y")},
      {"an operator", variant("* 2", "/ 2")},
      {"a reduction", variant("+=", "*=")},
      {"a constant", variant("* 2", "* 3")},
      {"an annotation", variant("N N y", "N N:vec y")},
      {"an initial value", variant("= 0\n", "= 1\n")},
      {"element types", variant("f32[N, N]\noutput y: f32", "f64[N, N]\noutput y: f64")},
      {"a value range", variant("f32[N, N]\n", "f32[N, N] in [0, 1]\n")},
  };
  // The first case is the same program written differently: it must hash equal.
  CHECK(structurally_equal(p, cases[0].q));
  CHECK(structural_hash(cases[0].q) == h);
  for (size_t i = 1; i < cases.size(); ++i) {
    INFO("differs in ", cases[i].what);
    CHECK_FALSE(structurally_equal(p, cases[i].q));
    CHECK(structural_hash(cases[i].q) != h);
  }
}

TEST_CASE("structural_hash is pinned: the same value on every run and platform") {
  // FNV-1a over a canonical byte stream. Caches and traces key on this value, so a change to the
  // encoding must be deliberate: update the constant together with the hasher.
  const Program p = must_load("output y: f32[1]\n\n1 y[0] = 1\n");
  CHECK(structural_hash(p) == 11788817715222486951ULL);
}

TEST_CASE("fma prints as a call and a fused update as fma of its own target; both re-parse equal") {
  CHECK(printed_statement("y[{0}] = fma(a[{0}], b[{0}], c[{0}])") ==
        "y[{0}] = fma(a[{0}], b[{0}], c[{0}])");
  CHECK(printed_statement("y[{0}] = fma(-a[{0}], b[{0}] + 1, 2)") ==
        "y[{0}] = fma(-a[{0}], b[{0}] + 1, 2)");
  CHECK(printed_statement("w[{0}] = fma(k[{0}], k[{0}], 3)") == "w[{0}] = fma(k[{0}], k[{0}], 3)");
  // The fused update: the same statement as `y += a * b` but for the one rounding.
  Program fused = must_load(std::string(kPrintHeader) + "N y[{0}] = fma(a[{0}], b[{0}], y[{0}])\n");
  Program plain = must_load(std::string(kPrintHeader) + "N y[{0}] += a[{0}] * b[{0}]\n");
  check_round_trip(fused);
  const Stmt& s = fused.body[0]->body[0]->stmt;
  CHECK(fused_update(s));
  CHECK_FALSE(structurally_equal(fused, plain));
  CHECK(structural_hash(fused) != structural_hash(plain));
}
