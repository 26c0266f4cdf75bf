// The brief's matmul path: tile M/N/K by 32, move the K tile loop outward, cache a row of C in
// a register temporary, vectorise 16 lanes. Every step must be legal on the 1024^3 kernel, and
// the same trace must compute the same result as the original on a smaller instance.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "ir/interp.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "transforms/registry.h"

using namespace perfdojo;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<transforms::Action> brief_trace() {
  auto t = transforms::parse_trace(
      read(std::string(PERFDOJO_TEST_DATA_DIR) + "/traces/matmul-brief.trace"));
  REQUIRE_MESSAGE(t.ok(), t.error_text());
  return t.value();
}

}  // namespace

TEST_CASE("the brief's matmul trace is legal step by step on matmul 1024^3") {
  auto p = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/matmul-1024.pdj");
  REQUIRE(p.ok());
  const transforms::Target avx512;
  ir::Program cur = p.value();
  for (const auto& a : brief_trace()) {
    auto l = transforms::check(cur, a, avx512);
    REQUIRE_MESSAGE(l.ok(), transforms::explain(a, l));
    cur = transforms::apply(cur, a, avx512).value();
  }
  const std::string text = ir::print_program(cur);
  CHECK(text.find("temp C_t0: f32[32]") != std::string::npos);  // the register row
  CHECK(text.find("16:vec C_t0[{5}*16+{6}] += A[") != std::string::npos);
  CHECK(text.find("2:unroll") != std::string::npos);
  CHECK((text.find("32 32 32 32 ") == 0 || text.find("\n32 32 32 32 ") != std::string::npos));
}

TEST_CASE("the brief's matmul trace computes the original result on a 64^3 instance") {
  auto text = read(std::string(PERFDOJO_KERNEL_DIR) + "/matmul-1024.pdj");
  for (const char* s : {"M", "N", "K"}) {
    auto at = text.find(std::string("\n") + s + " = 1024");
    REQUIRE(at != std::string::npos);
    text.replace(at, 9, std::string("\n") + s + " = 64");
  }
  auto small = ir::load_program(text, "matmul-64.pdj");
  REQUIRE_MESSAGE(small.ok(), small.error_text());
  auto result = transforms::replay(small.value(), brief_trace(), transforms::Target{});
  REQUIRE_MESSAGE(result.ok(), result.error_text());
  for (uint64_t seed : {1, 2}) {
    auto inputs = ir::make_inputs(small.value(), seed);
    auto want = ir::interpret(small.value(), inputs);
    auto got = ir::interpret(result.value(), inputs);
    REQUIRE(want.ok());
    REQUIRE(got.ok());
    CHECK(ir::max_relative_error(want->at("C"), got->at("C")) == 0);
  }
}
