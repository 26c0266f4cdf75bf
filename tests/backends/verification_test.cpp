// Verification that tells rounding from bugs (docs/ir.md, "Verification"): on every suite kernel
// at small size, outputs moved by one unit in the last place pass the interpreter's error bound,
// and the outputs of the same kernel with one wrong index fail it.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "backends/host_buffers.h"
#include "backends/x86_test_support.h"
#include "ir/interp.h"
#include "ir/ir.h"

using namespace perfdojo;

namespace {

// Each finite element moved one ulp (in its own type) away from zero; integers left as they are.
ir::TensorMap one_ulp_off(const ir::TensorMap& t) {
  ir::TensorMap out = t;
  for (auto& [n, x] : out)
    for (double& v : x.data) {
      if (!std::isfinite(v) || x.dtype == ir::DType::kI32) continue;
      const double to = v < 0 ? -std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::infinity();
      v = x.dtype == ir::DType::kF32
              ? static_cast<double>(std::nextafter(static_cast<float>(v), static_cast<float>(to)))
              : std::nextafter(v, to);
    }
  return out;
}

// The injected fault: the last input load in program order that moves with an iterator reads
// index 0 in its last such dimension instead (a classic slip: a fixed column, a dropped offset).
// `todo` counts down the candidate loads to skip; it reaches -1 once one is replaced.
ir::ExprPtr wrong_index(const ir::Program& p, const ir::ExprPtr& e, int& todo) {
  if (todo < 0) return e;
  if (e->kind == ir::ExprKind::kLoad) {
    const ir::BufferDecl* b = p.find_buffer(e->access.buffer);
    if (!b || b->role != ir::Role::kInput) return e;
    for (size_t d = e->access.index.size(); d-- > 0;) {
      if (e->access.index[d].max_depth() < 0) continue;
      if (todo-- > 0) return e;
      ir::Access a = e->access;
      a.index[d] = ir::Affine::constant_of(0);
      return ir::Expr::load(a);
    }
    return e;
  }
  if (e->args.empty()) return e;
  auto copy = std::make_shared<ir::Expr>(*e);
  for (auto& arg : copy->args) arg = wrong_index(p, arg, todo);
  return copy;
}

std::vector<ir::NodePtr> wrong_index(const ir::Program& p, const std::vector<ir::NodePtr>& body,
                                     int& todo) {
  std::vector<ir::NodePtr> out;
  for (const auto& n : body) {
    if (todo < 0) {
      out.push_back(n);
    } else if (n->is_scope) {
      out.push_back(ir::Node::scope(n->extent, n->extent_name, n->annot,
                                    wrong_index(p, n->body, todo), n->loc));
    } else {
      ir::Stmt s = n->stmt;
      s.rhs = wrong_index(p, s.rhs, todo);
      out.push_back(ir::Node::statement(s));
    }
  }
  return out;
}

// The program with the injected fault; nullopt when no input load moves with an iterator.
std::optional<ir::Program> with_wrong_index(const ir::Program& p) {
  int count = 1 << 30;  // a first pass counts the candidates
  wrong_index(p, p.body, count);
  const int candidates = (1 << 30) - count;
  if (candidates == 0) return std::nullopt;
  ir::Program bad = p;
  int todo = candidates - 1;
  bad.body = wrong_index(p, p.body, todo);
  return bad;
}

}  // namespace

TEST_CASE(
    "every suite kernel: one ulp per element passes the error bound, one wrong index fails it" *
    doctest::test_suite("slow")) {
  for (const auto& name : testing::suite_kernel_names()) {
    CAPTURE(name);
    ir::Program p = testing::scaled(name);
    const ir::TensorMap inputs = ir::make_inputs(p, 11);
    ir::TensorMap bounds;
    ir::InterpretOptions o;
    o.error_bounds = &bounds;
    auto want_all = ir::interpret(p, inputs, o);
    REQUIRE_MESSAGE(want_all.ok(), want_all.error_text());
    ir::TensorMap want;
    for (const auto& b : p.buffers)
      if (b.role == ir::Role::kOutput) want[b.name] = want_all->at(b.name);
    backends::Comparison how;
    how.bounds = &bounds;

    backends::Measurement near;
    CHECK_MESSAGE(backends::compare_outputs(p, one_ulp_off(want), want, near, how),
                  near.error.value_or(""));

    auto bad = with_wrong_index(p);
    REQUIRE_MESSAGE(bad, name << " has no input load that moves with an iterator");
    auto got_all = ir::interpret(*bad, inputs);
    REQUIRE_MESSAGE(got_all.ok(), got_all.error_text());
    ir::TensorMap got;
    for (const auto& [n, t] : want) got[n] = got_all->at(n);
    backends::Measurement wrong;
    CHECK_FALSE_MESSAGE(backends::compare_outputs(p, got, want, wrong, how),
                        name << ": a wrong index passed");
    if (wrong.error) CHECK(wrong.error->find("wrong result") != std::string::npos);
  }
}

TEST_CASE("exact comparison fails one ulp, and integer outputs are compared exactly") {
  ir::Program p = testing::scaled("matmul-256");
  const ir::TensorMap inputs = ir::make_inputs(p, 3);
  auto r = ir::interpret(p, inputs);
  REQUIRE(r.ok());
  ir::TensorMap want{{"C", r->at("C")}};
  backends::Comparison exact;
  exact.exact = true;
  backends::Measurement m;
  CHECK(backends::compare_outputs(p, want, want, m, exact));
  CHECK(m.verification == "exact");
  CHECK_FALSE(backends::compare_outputs(p, one_ulp_off(want), want, m, exact));
  REQUIRE(m.error);
  CHECK(m.error->find("bit for bit") != std::string::npos);

  ir::Program ints =
      testing::program_of("input k: i32[4]\noutput w: i32[4]\n\n4 w[{0}] = k[{0}] * 3\n");
  auto ri = ir::interpret(ints, ir::make_inputs(ints, 1));
  REQUIRE(ri.ok());
  ir::TensorMap wi{{"w", ri->at("w")}}, off = wi;
  off.at("w").data[2] += 1;
  backends::Measurement mi;
  CHECK(backends::compare_outputs(ints, wi, wi, mi));
  CHECK(mi.verification == "exact");
  CHECK_FALSE(backends::compare_outputs(ints, off, wi, mi));
}
