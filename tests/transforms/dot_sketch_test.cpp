// The int8 dot-product sketch (dot_sketch.h): which nests it takes, its expansion (legal atomic
// moves that keep every output bit for bit), and that the program-wide sketch uses it.
#include "transforms/dot_sketch.h"

#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace dot_sketch_cases {

std::string packed_gemm(int m, int n, int k, const std::string& body) {
  return "M = " + std::to_string(m) + "\nN = " + std::to_string(n) + "\nK = " + std::to_string(k) +
         "\nKB = " + std::to_string(k / 4) +
         "\ninput A: u8[M, K]\ninput B4: i8[KB, N, 4]\ninput W: i8[N, K]\ninput Bk: i8[K, N]\n"
         "input F: f32[M, K]\ninput G: f32[K, N]\noutput C: i32[M, N] = 3\n"
         "output D: f32[M, N] = 0\n\n" +
         body + "\n";
}
const char* kDotBody = "M N KB 4 C[{0},{1}] += A[{0},{2}*4+{3}] * B4[{2},{1},{3}]";

}  // namespace dot_sketch_cases

using dot_sketch_cases::kDotBody;
using dot_sketch_cases::packed_gemm;

TEST_CASE("a dot nest is a packed u8 x i8 GEMM in any scope order, nothing else") {
  auto nest = transforms::dot_nest_at(load(packed_gemm(16, 64, 64, kDotBody)), {0});
  REQUIRE(nest);
  CHECK(nest->i == 0);
  CHECK(nest->j == 1);
  CHECK(nest->p == 2);
  CHECK(nest->q == 3);
  CHECK(nest->packed == "B4");
  CHECK(nest->m == 16);
  CHECK(nest->n == 64);
  // Another order, operands swapped.
  auto other = transforms::dot_nest_at(
      load(packed_gemm(16, 64, 64, "KB M 4 N C[{1},{3}] += B4[{0},{3},{2}] * A[{1},{0}*4+{2}]")),
      {0});
  REQUIRE(other);
  CHECK(other->p == 0);
  CHECK(other->i == 1);
  CHECK(other->q == 2);
  CHECK(other->j == 3);
  // Not one: unpacked weights, f32, a scope of 2 k at a time, an annotated scope.
  for (const char* body : {"M N K C[{0},{1}] += A[{0},{2}] * W[{1},{2}]",
                           "M N K D[{0},{1}] += F[{0},{2}] * G[{2},{1}]",
                           "M N KB 4 C[{0},{1}] = A[{0},{2}*4+{3}] * B4[{2},{1},{3}]",
                           "M N:unroll KB 4 C[{0},{1}] += A[{0},{2}*4+{3}] * B4[{2},{1},{3}]"}) {
    INFO(body);
    CHECK_FALSE(transforms::dot_nest_at(load(packed_gemm(16, 64, 64, body)), {0}));
  }
}

TEST_CASE("the dot sketch expands into legal moves that keep every output, for each tile") {
  const ir::Program before = load(packed_gemm(16, 64, 32, kDotBody));
  const transforms::Target target;
  const auto nest = transforms::dot_nest_at(before, {0});
  REQUIRE(nest);
  const auto tiles = transforms::dot_candidates(*nest, target);
  REQUIRE(tiles.size() >= 3);
  CHECK(tiles[0] == transforms::DotTile{8, 32, 16});
  for (const auto& tile : tiles) {
    INFO(tile.mr << " x " << tile.nr);
    auto e = transforms::expand_dot_sketch(before, {0}, tile, target);
    REQUIRE_MESSAGE(e.ok(), e.error_text());
    const std::string trace = transforms::print_trace(e->trace);
    CHECK(trace.find("dot_product") != std::string::npos);
    CHECK((trace.find("create_temporary 0 B4") != std::string::npos) == (tile.nr < 64));
    auto replayed = transforms::replay(before, e->trace, target);
    REQUIRE(replayed.ok());
    CHECK(ir::print_program(replayed.value()) == ir::print_program(e->program));
    require_same_outputs(before, e->program);
  }
  // AVX2's 8 lanes.
  const auto avx2 = *transforms::target_by_name("x86_avx2");
  const auto narrow = transforms::dot_candidates(*nest, avx2);
  REQUIRE_FALSE(narrow.empty());
  CHECK(narrow[0].lanes == 8);
  auto e = transforms::expand_dot_sketch(before, {0}, narrow[0], avx2);
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  require_same_outputs(before, e->program);
  // AArch64's usdot: 4 lanes; other 4-lane targets get no dot sketch.
  const auto neon = transforms::dot_candidates(*nest, *transforms::target_by_name("aarch64_neon"));
  REQUIRE_FALSE(neon.empty());
  CHECK(neon[0].lanes == 4);
  CHECK(transforms::dot_candidates(*nest, *transforms::target_by_name("riscv64_rvv")).empty());
  // A tile that does not divide is refused, with the reason.
  CHECK_FALSE(transforms::expand_dot_sketch(before, {0}, {6, 32, 16}, target).ok());
}

TEST_CASE("the program-wide sketch takes int8 dot nests with the dot sketch") {
  const ir::Program p = load(packed_gemm(16, 64, 32, kDotBody));
  const transforms::Target target;
  CHECK(transforms::sketch_choices(p, target) >= 3);
  const auto e = transforms::sketch_program(p, target, 0);
  const std::string trace = transforms::print_trace(e.trace);
  CHECK(trace.find("dot_product 0.1.0.0.0 16") != std::string::npos);
  require_same_outputs(p, e.program);
}

TEST_CASE("an int8 GEMM over weights as they come is blocked by 4 and packed by the sketch") {
  const transforms::Target target;
  // W[N, K] (a linear layer's weights) and B[K, N]; both operand orders.
  for (const char* body : {"M N K C[{0},{1}] += A[{0},{2}] * W[{1},{2}]",
                           "M N K C[{0},{1}] += Bk[{2},{1}] * A[{0},{2}]",
                           "M K N C[{0},{2}] += A[{0},{1}] * W[{2},{1}]"}) {
    INFO(body);
    const ir::Program p = load(packed_gemm(16, 64, 32, body));
    CHECK_FALSE(transforms::dot_nest_at(p, {0}));
    const auto tile = transforms::dot_blocking(p, {0});
    REQUIRE(tile);
    CHECK(tile->kind == transforms::Kind::kTileScope);
    CHECK(tile->param == 4);
    const auto e = transforms::sketch_program(p, target, 0);
    const std::string trace = transforms::print_trace(e.trace);
    CHECK(trace.find("dot_product") != std::string::npos);
    CHECK(trace.find("create_temporary") != std::string::npos);
    require_same_outputs(p, e.program);
  }
  // Nothing to block: a reduction not a multiple of 4, an f32 GEMM, an already blocked nest.
  CHECK_FALSE(transforms::dot_blocking(
      load(packed_gemm(16, 64, 30, "M N K C[{0},{1}] += A[{0},{2}] * W[{1},{2}]")), {0}));
  CHECK_FALSE(transforms::dot_blocking(
      load(packed_gemm(16, 64, 32, "M N K D[{0},{1}] += F[{0},{2}] * G[{2},{1}]")), {0}));
  CHECK_FALSE(transforms::dot_blocking(load(packed_gemm(16, 64, 32, kDotBody)), {0}));
}
