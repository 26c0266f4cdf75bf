// docs/microkernel.md walks matmul-1024 to a micro-kernel one move at a time. Its trace must be
// exactly what the micro-kernel sketch expands into, every step legal, and each IR block on the
// page (marked `<!-- ir after N -->`) what the first N steps make: the page stays true to the code.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ir/interp.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/registry.h"

using namespace perfdojo;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kData = PERFDOJO_TEST_DATA_DIR;

std::vector<transforms::Action> worked_trace() {
  auto t = transforms::parse_trace(read(kData + "/traces/matmul-microkernel.trace"));
  REQUIRE_MESSAGE(t.ok(), t.error_text());
  return t.value();
}

ir::Program matmul() {
  auto p = ir::load_file(kData + "/../../kernels/matmul-1024.pdj");
  REQUIRE_MESSAGE(p.ok(), p.error_text());
  return p.value();
}

// What the page shows of a program: its temporaries, a blank line, the body.
std::string shown(const ir::Program& p) {
  std::stringstream in(ir::print_program(p));
  std::vector<std::string> temps, body;
  bool in_body = false;
  for (std::string line; std::getline(in, line);) {
    if (in_body)
      body.push_back(line);
    else if (line.empty())
      in_body = true;
    else if (line.rfind("temp ", 0) == 0)
      temps.push_back(line);
  }
  while (!body.empty() && body.back().empty()) body.pop_back();
  std::string s;
  for (const auto& t : temps) s += t + "\n";
  if (!temps.empty()) s += "\n";
  for (const auto& b : body) s += b + "\n";
  return s;
}

}  // namespace

TEST_CASE("the worked trace is the micro-kernel sketch's expansion of matmul-1024" *
          doctest::test_suite("golden")) {
  const ir::Program p = matmul();
  const auto nest = transforms::gemm_nest_at(p, {0});
  REQUIRE(nest.ok());
  const auto target = *transforms::target_by_name("x86_avx512");
  // The first candidate: 8 x 32, whose blocks all divide 1024 (no remainders to walk through),
  // row panels outside column panels.
  const auto params = transforms::microkernel_candidates(*nest, target);
  transforms::MicrokernelParams m{8, 32, 256, 64, 0, 16};
  m.rows_outer = true;
  REQUIRE_FALSE(params.empty());
  CHECK(params.front() == m);
  auto e = transforms::expand_microkernel(p, {0}, m, target);
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  CHECK(transforms::print_trace(e->trace) == transforms::print_trace(worked_trace()));
}

TEST_CASE("every IR block of docs/microkernel.md is what its steps make" *
          doctest::test_suite("golden")) {
  const std::string doc = read(kData + "/../../docs/microkernel.md");
  const auto trace = worked_trace();
  const ir::Program p = matmul();
  int blocks = 0;
  const std::string marker = "<!-- ir after ";
  for (size_t at = doc.find(marker); at != std::string::npos; at = doc.find(marker, at + 1)) {
    const int n = std::stoi(doc.substr(at + marker.size()));
    REQUIRE(n >= 0);
    REQUIRE(n <= static_cast<int>(trace.size()));
    const size_t open = doc.find("```\n", at);
    REQUIRE(open != std::string::npos);
    const size_t close = doc.find("```", open + 4);
    REQUIRE(close != std::string::npos);
    const std::string block = doc.substr(open + 4, close - open - 4);
    auto q = transforms::replay(p, {trace.begin(), trace.begin() + n}, transforms::Target{});
    REQUIRE_MESSAGE(q.ok(), q.error_text());
    INFO("the block after step ", n, " of docs/microkernel.md");
    CHECK(block == shown(*q));
    ++blocks;
  }
  CHECK(blocks >= 6);
}

TEST_CASE("the worked trace computes matmul exactly on an instance the interpreter can run") {
  // Scaled to M = 128, N = 64, K = 512 (the smallest the block sizes admit): every step still
  // legal, the outputs bit for bit the original's (no reassociation anywhere in the trace).
  const auto trace = worked_trace();
  auto inst = transforms::small_instance(matmul(), trace, transforms::Target{}, 1.6e7);
  REQUIRE(inst.has_value());
  auto inputs = ir::make_inputs(inst->first, 3);
  auto want = ir::interpret(inst->first, inputs);
  auto got = ir::interpret(inst->second, inputs);
  REQUIRE(want.ok());
  REQUIRE(got.ok());
  CHECK(ir::max_relative_error(want->at("C"), got->at("C")) == 0);
}
