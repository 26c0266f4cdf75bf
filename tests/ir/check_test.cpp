// The checker: what it accepts as well as what it rejects, on programs the parser accepts.
#include "ir/check.h"

#include <string>

#include "doctest/doctest.h"
#include "ir/ir.h"
#include "ir/parse.h"

namespace {

using namespace perfdojo::ir;

/// Parses (which must succeed) and returns the checker's diagnostics.
std::vector<Diagnostic> check_text(const std::string& text) {
  auto r = parse_program(text, "k.pdj");
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return check_program(*r);
}

std::string joined_messages(const std::vector<Diagnostic>& errors) {
  std::string s;
  for (const auto& d : errors) s += d.str() + "\n";
  return s;
}

const char* const kCheckHeader =
    "N = 4\n"
    "input x: f32[N]\n"
    "input d: f64[N]\n"
    "input k: i32[N]\n"
    "output y: f32[N]\n"
    "output w: i32[N]\n"
    "\n";

}  // namespace

TEST_CASE("bounds are proven from the extents: a shifted read fits a shorter scope only") {
  CHECK(check_text(std::string(kCheckHeader) + "3 y[{0}] = x[{0}+1]\n").empty());
  auto e = check_text(std::string(kCheckHeader) + "N y[{0}] = x[{0}+1]\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0].loc.line == 8);
  CHECK(e[0].loc.col == 12);
}

TEST_CASE("a reversed index is in bounds exactly when it ends at zero") {
  CHECK(check_text(std::string(kCheckHeader) + "N y[{0}] = x[N-1-{0}]\n").empty());
  CHECK(check_text(std::string(kCheckHeader) + "N y[{0}] = x[N-{0}]\n").size() == 1);
  CHECK(check_text(std::string(kCheckHeader) + "N y[{0}] = x[N-2-{0}]\n").size() == 1);
}

TEST_CASE("the bounds of a sum of iterators add up over every enclosing scope") {
  const std::string h = "input x: f32[7]\noutput y: f32[4, 4]\n\n";
  CHECK(check_text(h + "4 4 y[{0},{1}] = x[{0}+{1}]\n").empty());
  CHECK(check_text(h + "4 4 y[{0},{1}] = x[{0}+{1}+1]\n").size() == 1);
  CHECK(check_text(h + "4 4 y[{0},{1}] = x[{0}*2-{1}+3]\n").size() == 1);  // reaches 9
  CHECK(check_text(h + "4 4 y[{0},{1}] = x[{0}-{1}+3]\n").empty());        // 0..6
}

TEST_CASE("a scope of extent 1 lets any coefficient multiply its iterator") {
  CHECK(check_text("output y: f32[2]\n\n1 2 y[{0}*1000+{1}] = 1\n").empty());
}

TEST_CASE("bare literals adapt to the target's type, loads do not") {
  CHECK(check_text(std::string(kCheckHeader) + "N w[{0}] = k[{0}] * 2 + 1\n").empty());
  CHECK(check_text(std::string(kCheckHeader) + "N y[{0}] = x[{0}] * 2.5\n").empty());
  CHECK(check_text(std::string(kCheckHeader) + "N w[{0}] = 2.5\n").empty());
  auto e = check_text(std::string(kCheckHeader) + "N w[{0}] = x[{0}]\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0].message.find("'w' is i32 but the value is f32") != std::string::npos);
}

TEST_CASE("an explicit cast makes a mixed-type statement valid") {
  CHECK(check_text(std::string(kCheckHeader) + "N y[{0}] = f32(d[{0}]) + x[{0}] * f32(k[{0}])\n")
            .empty());
  CHECK(check_text(std::string(kCheckHeader) + "N w[{0}] = i32(x[{0}]) / k[{0}]\n").empty());
}

TEST_CASE("a select's comparison may compare another type than the value it picks") {
  CHECK(check_text(std::string(kCheckHeader) + "N y[{0}] = k[{0}] > 0 ? x[{0}] : 0\n").empty());
  auto e = check_text(std::string(kCheckHeader) + "N y[{0}] = k[{0}] > x[{0}] ? x[{0}] : 0\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0].message.find("type mismatch") != std::string::npos);
}

TEST_CASE("abs and negation are allowed on i32, the other functions are not") {
  CHECK(check_text(std::string(kCheckHeader) + "N w[{0}] = abs(-k[{0}])\n").empty());
  for (const char* f : {"exp", "log", "sqrt", "rsqrt", "tanh"}) {
    INFO("function ", f);
    auto e = check_text(std::string(kCheckHeader) + "N w[{0}] = " + f + "(k[{0}])\n");
    REQUIRE(e.size() == 1);
    CHECK(e[0].message.find("applies a floating-point function to i32") != std::string::npos);
  }
}

TEST_CASE("every access in a statement is checked, not only the first one") {
  auto e = check_text(std::string(kCheckHeader) + "N y[{0}+1] = x[{0}] + x[{0}+2] + q[0]\n");
  INFO(joined_messages(e));
  REQUIRE(e.size() == 3);
  CHECK(e[0].loc.col == 3);   // y[{0}+1]
  CHECK(e[1].loc.col == 23);  // x[{0}+2]
  CHECK(e[2].loc.col == 34);  // q[0]
  CHECK(e[2].message == "undeclared buffer 'q'");
}

TEST_CASE("an input may be read by every statement but written by none") {
  CHECK(check_text(std::string(kCheckHeader) + "N y[{0}] = x[{0}]\nN y[{0}] += x[{0}]\n").empty());
  auto e = check_text(std::string(kCheckHeader) + "N x[{0}] += 1\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0].message == "cannot write to input 'x'");
}

TEST_CASE("a program built in code is checked the same way as a parsed one") {
  Program p;
  p.sizes.push_back({"N", 4, {}});
  BufferDecl y;
  y.name = "y";
  y.role = Role::kOutput;
  y.shape = {4};
  y.shape_names = {"N"};
  p.buffers.push_back(y);
  Stmt s;
  s.lhs = Access{"y", {Affine::iter(0)}, {}};
  s.rhs = Expr::constant(1);
  p.body.push_back(Node::scope(4, "N", Annot::kNone, {Node::statement(s)}));
  CHECK(check_program(p).empty());
  // The same tree with the scope one iteration too long.
  Program q = p;
  q.body = {Node::scope(5, "", Annot::kNone, {Node::statement(s)})};
  auto e = check_program(q);
  REQUIRE(e.size() == 1);
  CHECK(e[0].message.find("ranges over [0, 4]") != std::string::npos);
}
