#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>

#include "backends/x86_backend.h"
#include "ir/interp.h"
#include "ir/parse.h"
#include "optimizer/optimizer.h"
#include "transforms/registry.h"

using namespace perfdojo;

namespace {

const char* kSmallMatmul =
    "# 64^3 matmul\nM = 64\nN = 64\nK = 64\ninput A: f32[M, K]\ninput B: f32[K, N]\n"
    "output C: f32[M, N] = 0\n\nM N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n";

std::string portable_arch() { return "x86_64"; }

}  // namespace

TEST_CASE("modes and architectures are validated by name") {
  CHECK(optimizer::mode_by_name("aggressive") == optimizer::Mode::kAggressive);
  CHECK_FALSE(optimizer::mode_by_name("reckless"));
  auto bad = optimizer::Optimizer::make("riscv_snitch", optimizer::Mode::kBalanced);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error_text().find("unknown architecture") != std::string::npos);
  CHECK_FALSE(optimizer::settings_for(optimizer::Mode::kConservative).allow_reassociation);
}

TEST_CASE("the optimiser returns a verified kernel that computes what the original computes") {
  auto p = ir::load_program(kSmallMatmul, "mm.pdj");
  REQUIRE(p.ok());
  auto opt = optimizer::Optimizer::make(portable_arch(), optimizer::Mode::kConservative);
  REQUIRE_MESSAGE(opt.ok(), opt.error_text());
  auto r = opt.value()->transform(p.value(), 8.0);
  CHECK(r.report.verified);
  CHECK(r.report.baseline_s > 0);
  CHECK(r.report.final_s <= r.report.baseline_s);
  CHECK(r.report.evaluations > 10);
  CHECK(r.c_source.find("kernel(") != std::string::npos);
  CHECK(r.c_header.find("void kernel(const float* A") != std::string::npos);
  // Its trace replays to the returned program, and the interpreter agrees with the original.
  auto replayed = transforms::replay(p.value(), r.trace, transforms::Target{"x86_64", {}, true});
  REQUIRE_MESSAGE(replayed.ok(), replayed.error_text());
  CHECK(ir::structurally_equal(replayed.value(), r.program));
  auto inputs = ir::make_inputs(p.value(), 3);
  auto a = ir::interpret(p.value(), inputs);
  auto b = ir::interpret(r.program, inputs);
  REQUIRE((a.ok() && b.ok()));
  CHECK(ir::max_relative_error(a->at("C"), b->at("C")) == 0);
}

TEST_CASE("a cancelled search still returns the best program so far") {
  auto p = ir::load_program(kSmallMatmul, "mm.pdj");
  auto opt = optimizer::Optimizer::make(portable_arch(), optimizer::Mode::kBalanced);
  REQUIRE(opt.ok());
  std::atomic<bool> cancel{true};
  auto r = opt.value()->transform(p.value(), 60.0, {}, &cancel);
  CHECK(r.report.interrupted);
  CHECK(r.program.body.size() > 0);
  CHECK(r.report.verified);
}
