// The micro-kernel sketch: which nests it recognises, the atomic trace it expands into (every step
// a registered kind, replayable), the BLIS structure that trace builds, bit-exact outputs, and
// precise refusals.
#include "transforms/microkernel_sketch.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/load.h"
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;
using transforms::MicrokernelParams;

namespace {

constexpr const char* kMatmul32 = R"(M = 32
N = 32
K = 32
input A: f32[M, K]
input B: f32[K, N]
output C: f32[M, N] = 0

M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]
)";

// The same product written k-outermost and with B transposed: roles come from the indices.
constexpr const char* kPermuted = R"(M = 32
N = 32
K = 32
input A: f32[M, K]
input Bt: f32[N, K]
output C: f32[M, N] = 1

K M N C[{1},{2}] += A[{1},{0}] * Bt[{2},{0}]
)";

constexpr const char* kBatched = R"(BATCH = 2
M = 32
N = 32
K = 32
input A: f32[BATCH, M, K]
input B: f32[BATCH, K, N]
output C: f32[BATCH, M, N] = 0

BATCH M N K C[{0},{1},{2}] += A[{0},{1},{3}] * B[{0},{3},{2}]
)";

// C = A B, M x N, with a reduction of K.
std::string matmul_text(int m, int n, int k) {
  return "M = " + std::to_string(m) + "\nN = " + std::to_string(n) + "\nK = " + std::to_string(k) +
         "\ninput A: f32[M, K]\ninput B: f32[K, N]\noutput C: f32[M, N] = 0\n\n"
         "M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n";
}

// conv2d with 3 x 3 filters over 4 input channels and 16 output columns: K output channels,
// H output rows.
std::string conv2d_3x3(int k, int h) {
  return "N = 1\nC = 4\nK = " + std::to_string(k) + "\nH = " + std::to_string(h) +
         "\nW = 16\nHI = " + std::to_string(h + 2) +
         "\nWI = 18\nKH = 3\nKW = 3\ninput x: f32[N, C, HI, WI]\ninput w: f32[K, C, KH, KW]\n"
         "output y: f32[N, K, H, W] = 0\n\n"
         "N K H W C KH KW y[{0},{1},{2},{3}] += x[{0},{4},{2}+{5},{3}+{6}] * w[{1},{4},{5},{6}]\n";
}

// Small blocks for small programs: 4 x 16 register tile of 8 lanes, kc 16, mc 16.
const MicrokernelParams kSmall{4, 16, 16, 16, 0, 8};

transforms::SketchExpansion expand(const ir::Program& p, const transforms::Path& path,
                                   const MicrokernelParams& m = kSmall) {
  auto e = transforms::expand_microkernel(p, path, m, transforms::Target{});
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  return *e;
}

}  // namespace

TEST_CASE("the sketch recognises GEMM-class nests by their indices") {
  const ir::Program mm = load(kMatmul32);
  auto g = transforms::gemm_nest_at(mm, {0});
  REQUIRE(g.ok());
  CHECK(g->i == 0);
  CHECK(g->j == 1);
  CHECK(g->k == 2);
  CHECK(g->target == "C");
  auto h = transforms::gemm_nest_at(load(kPermuted), {0});
  REQUIRE(h.ok());
  CHECK(h->k == 0);
  CHECK(h->i == 1);
  CHECK(h->j == 2);
  // bmm: the batch scope is part of the nest, kept outermost.
  const auto nests = transforms::gemm_nests(load(kBatched));
  REQUIRE(nests.size() == 1);
  CHECK(nests[0].path == transforms::Path{0});
  CHECK(nests[0].batch == std::vector<int>{0});
  // Shipped kernels: one nest each in matmul, mlp, bmm, attention's second product, conv2d.
  for (const char* k : {"matmul-1024", "mlp", "bmm", "attention", "matmul-skinny", "matmul-tall-k",
                        "conv2d-3x3", "conv2d-3x3-s2"})
    CHECK_MESSAGE(transforms::gemm_nests(load_kernel(k)).size() == 1, k);
  CHECK(transforms::gemm_nests(load_kernel("conv2d-3x3")).size() == 1);
  CHECK(transforms::gemm_nests(load_kernel("softmax")).empty());
}

TEST_CASE("the sketch refuses what is not GEMM-class, with the reason at the nest's source") {
  auto r = transforms::gemm_nest_at(load(R"(N = 8
input x: f32[N]
output y: f32[N]

N 4 2 y[{0}] = x[{0}]
)"),
                                    {0});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error_text().find("<test>:5:1") != std::string::npos);
  CHECK(r.error_text().find("not GEMM-class") != std::string::npos);
  // A block size that does not divide, and one the action space does not offer.
  const ir::Program mm = load(kMatmul32);
  MicrokernelParams bad = kSmall;
  bad.kc = 12;
  auto e = transforms::expand_microkernel(mm, {0}, bad, transforms::Target{});
  REQUIRE_FALSE(e.ok());
  CHECK(e.error_text().find("kc must divide") != std::string::npos);
  bad = kSmall;
  bad.nr = 12;
  CHECK_FALSE(transforms::expand_microkernel(mm, {0}, bad, transforms::Target{}).ok());
}

TEST_CASE("the sketch expands into atomic actions that replay to its program") {
  const ir::Program p = load(kMatmul32);
  const auto e = expand(p, {0});
  CHECK(e.trace.size() >= 20);
  auto replayed = transforms::replay(p, e.trace, transforms::Target{});
  REQUIRE(replayed.ok());
  CHECK(ir::structurally_equal(*replayed, e.program));
  // Text round trip: a trace file is all a user needs to keep.
  auto parsed = transforms::parse_trace(transforms::print_trace(e.trace));
  REQUIRE(parsed.ok());
  CHECK(*parsed == e.trace);
}

TEST_CASE("the sketch builds packed panels and a register tile and computes the same outputs") {
  const ir::Program p = load(kMatmul32);
  const auto e = expand(p, {0});
  const ir::Program& q = e.program;
  // B: [No][Ki][Ni] = [2][16][16]; A: [Mio][Ki][Mii] = [4][16][4]; C tile 4 x 16.
  REQUIRE(q.find_buffer("B_t0") != nullptr);
  CHECK(q.find_buffer("B_t0")->shape == std::vector<int64_t>{2, 16, 16});
  REQUIRE(q.find_buffer("A_t0") != nullptr);
  CHECK(q.find_buffer("A_t0")->shape == std::vector<int64_t>{4, 16, 4});
  REQUIRE(q.find_buffer("C_t0") != nullptr);
  CHECK(q.find_buffer("C_t0")->shape == std::vector<int64_t>{4, 16});
  // The k blocks stay in order and nothing is reassociated: bit-exact.
  require_same_outputs(p, q);
  const std::string text = ir::print_program(q);
  CHECK(text.find("4:unroll 2:unroll 8:vec C_t0") != std::string::npos);
}

TEST_CASE("with the columns in one panel the sketch reads A in place: no packed copy to reuse") {
  // 32 x 16 x 32, kSmall's 4 x 16 tile: one column panel (no No level), row blocks of 16.
  const ir::Program p = load(matmul_text(32, 16, 32));
  const auto e = expand(p, {0});
  CHECK(e.program.find_buffer("A_t0") == nullptr);
  REQUIRE(e.program.find_buffer("C_t0") != nullptr);
  for (const auto& a : e.trace)
    CHECK_FALSE((a.kind == transforms::Kind::kCreateTemporary && a.buffer == "A"));
  require_same_outputs(p, e.program);
  // Two column panels (32 x 32 x 32): the packed A block is read by both, and kept.
  CHECK(expand(load(matmul_text(32, 32, 32)), {0}).program.find_buffer("A_t0") != nullptr);
}

TEST_CASE("rows_outer runs the row panels outside the column panels, same outputs") {
  const ir::Program p = load(kMatmul32);
  MicrokernelParams m = kSmall;
  m.rows_outer = true;
  const auto e = expand(p, {0}, m);
  const auto plain = expand(p, {0});
  CHECK(e.trace.size() + 1 == plain.trace.size());  // one swap fewer from i j k
  // The same panels and tile, the tile's loop now over the column panels (No = 2), inside the
  // row panels (Mio = 4): Ko Mo Mio No Ki Mii Ni.
  CHECK(e.program.find_buffer("B_t0")->shape == std::vector<int64_t>{2, 16, 16});
  CHECK(e.program.find_buffer("A_t0")->shape == std::vector<int64_t>{4, 16, 4});
  CHECK(e.program.find_buffer("C_t0")->shape == std::vector<int64_t>{4, 16});
  const std::string text = ir::print_program(e.program);
  CHECK_MESSAGE(text.find("| | 4 2 4:unroll 2:unroll 8:vec C_t0") != std::string::npos, text);
  require_same_outputs(p, e.program);
  CHECK(transforms::print_params(m).find(" rows_outer") != std::string::npos);
}

TEST_CASE("the sketch orders a permuted nest and packs a transposed operand") {
  const ir::Program p = load(kPermuted);
  const auto e = expand(p, {0});
  // Bt[{j},{k}] is indexed by k and j: packed at Ko into the same [No][Ki][Ni] panel layout.
  REQUIRE(e.program.find_buffer("Bt_t0") != nullptr);
  CHECK(e.program.find_buffer("Bt_t0")->shape == std::vector<int64_t>{2, 16, 16});
  require_same_outputs(p, e.program);
}

TEST_CASE("the sketch packs one buffer in both operand roles: C = A A^T") {
  const ir::Program p = load(R"(M = 32
K = 32
input A: f32[M, K]
output C: f32[M, M] = 0

M M K C[{0},{1}] += A[{0},{2}] * A[{1},{2}]
)");
  const auto e = expand(p, {0});
  // At Ko each of A's indices gets a copy: the rows of i (A_t0, M x kc) and the column panel of
  // j (A_t1, [No][Ki][Ni]); the row block is then packed from A_t0 at Mo, [Mio][Ki][Mii].
  REQUIRE(e.program.find_buffer("A_t1") != nullptr);
  CHECK(e.program.find_buffer("A_t1")->shape == std::vector<int64_t>{2, 16, 16});
  REQUIRE(e.program.find_buffer("A_t0_t0") != nullptr);
  CHECK(e.program.find_buffer("A_t0_t0")->shape == std::vector<int64_t>{4, 16, 4});
  CHECK(e.program.find_buffer("C_t0") != nullptr);
  require_same_outputs(p, e.program);
}

TEST_CASE("the sketch keeps a batch scope outermost, from the batch or from the nest below it") {
  const ir::Program p = load(kBatched);
  const auto whole = expand(p, {0});
  const auto inner = expand(p, {0, 0});
  for (const auto& a : inner.trace) CHECK(a.path.size() >= 2);  // nothing outside the nest moves
  CHECK(transforms::print_trace(whole.trace) == transforms::print_trace(inner.trace));
  require_same_outputs(p, whole.program);
}

TEST_CASE("the sketch takes conv2d: output channels by output columns, kh and kw inside the tile") {
  const ir::Program p = load(conv2d_3x3(16, 6));
  const auto g = transforms::gemm_nest_at(p, {0});
  REQUIRE_MESSAGE(g.ok(), g.error_text());
  CHECK(g->i == 1);  // K: the filters do not use the output column
  CHECK(g->j == 3);
  CHECK(g->k == 4);  // C, the largest reduction
  CHECK(g->batch == std::vector<int>{0, 2});
  CHECK(g->reductions == std::vector<int>{5, 6});
  auto e = transforms::expand_microkernel_fitted(p, {0}, MicrokernelParams{4, 8, 4, 8, 0, 8},
                                                 transforms::Target{});
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  // The filters of each block of mc = 8 output channels packed, broadcast 4 at a time:
  // [Mio][C][KH][KW][Mii].
  REQUIRE(e->program.find_buffer("w_t0") != nullptr);
  CHECK(e->program.find_buffer("w_t0")->shape == std::vector<int64_t>{2, 4, 3, 3, 4});
  require_same_outputs(p, e->program);
}

TEST_CASE("the sketch takes channels-last conv2d, its reductions in their order") {
  // R S C: the largest reduction, C, is innermost. Raising it above R and S would sum the terms
  // in another order, which swap_scopes refuses; k is R, and S, C run inside the register tile.
  const ir::Program p = load(R"(N = 1
H = 8
W = 4
C = 4
K = 16
HI = 10
WI = 6
R = 3
S = 3
input x: f32[N, HI, WI, C]
input w: f32[R, S, C, K]
output y: f32[N, H, W, K] = 0

N H W K R S C y[{0},{1},{2},{3}] += x[{0},{1}+{4},{2}+{5},{6}] * w[{4},{5},{6},{3}]
)");
  const auto g = transforms::gemm_nest_at(p, {0});
  REQUIRE_MESSAGE(g.ok(), g.error_text());
  CHECK(g->k == 4);
  CHECK(g->reductions == std::vector<int>{5, 6});
  const auto e = expand(p, {0}, MicrokernelParams{4, 16, 3, 8, 0, 8});
  REQUIRE(e.program.find_buffer("y_t0") != nullptr);
  require_same_outputs(p, e.program);
}

TEST_CASE("the transposed sketch puts conv2d's output channels in the vectors") {
  // 64 output channels by 8 output columns: W = 16 = 2 x 8 rows of the tile, K = 64 = 2 x 32
  // columns, two 16-lane vectors each.
  const ir::Program p = load(conv2d_3x3(64, 3));
  const auto plain = *transforms::gemm_nest_at(p, {0});
  CHECK(plain.transposable);
  CHECK(plain.inner == 9);
  const auto g = transforms::gemm_nest_at(p, {0}, true);
  REQUIRE_MESSAGE(g.ok(), g.error_text());
  CHECK(g->transposed);
  CHECK(g->i == 3);  // W, broadcast from x
  CHECK(g->j == 1);  // K, loaded as vectors from the packed filters
  CHECK((g->m == 16 && g->n == 64));
  MicrokernelParams m{8, 32, 4, 16, 0, 16};
  m.transposed = true;
  CHECK(transforms::print_params(m) == "mr=8 nr=32 kc=4 mc=16 lanes=16 transposed");
  auto e = transforms::expand_microkernel(p, {0}, m, *transforms::target_by_name("x86_avx512"));
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  const std::string text = ir::print_program(e->program);
  // The filters packed with the output channel innermost; x read where it lies (no x_t0).
  REQUIRE(e->program.find_buffer("w_t0") != nullptr);
  CHECK(e->program.find_buffer("w_t0")->shape == std::vector<int64_t>{2, 4, 3, 3, 32});
  CHECK(e->program.find_buffer("x_t0") == nullptr);
  // The 8 x 32 tile: set to y's initial value (each element is visited once), updated in vectors
  // of output channels, stored back element by element.
  REQUIRE(e->program.find_buffer("y_t0") != nullptr);
  CHECK(e->program.find_buffer("y_t0")->shape == std::vector<int64_t>{8, 32});
  CHECK(text.find("8:unroll 32:unroll y_t0[{4},{5}] = 0") != std::string::npos);
  CHECK(text.find("16:vec y_t0[") != std::string::npos);
  CHECK(text.find("= y_t0[{4},{5}]") != std::string::npos);
  require_same_outputs(p, e->program);
  // The candidates put a transposed tile last here (4 x 9 = 36 products per element: its
  // element-by-element copies would cost more than the 16 columns lose), first on conv2d-3x3
  // (56 output columns against 64 channels, 576 products), and last on matmul-1024 and
  // matmul-skinny (its 64 columns fit 8 x 32 tiles whole).
  const auto t = *transforms::target_by_name("x86_avx512");
  CHECK_FALSE(transforms::microkernel_candidates(plain, t).front().transposed);
  CHECK(transforms::microkernel_candidates(plain, t).back().transposed);
  for (const char* k : {"matmul-1024", "matmul-skinny"}) {
    const auto c =
        transforms::microkernel_candidates(*transforms::gemm_nest_at(load_kernel(k), {0}), t);
    CHECK_MESSAGE(!c.front().transposed, k);
    CHECK_MESSAGE(c.back().transposed, k);
  }
  CHECK(transforms::microkernel_candidates(
            *transforms::gemm_nest_at(load_kernel("conv2d-3x3"), {0}), t)
            .front()
            .transposed);
  // A stride-2 5 x 5 conv2d with 48 channels and 31 output columns: the plain tile leaves 15 of
  // the columns to narrower vectors, the transposed one keeps full vectors and leaves a 7-row
  // remainder of 8, which costs little; counted as lost whole, the remainder put it last.
  auto s2_file = ir::load_file(std::string(PERFDOJO_UNSEEN_DIR) + "/conv5x5-s2.pdj");
  REQUIRE_MESSAGE(s2_file.ok(), s2_file.error_text());
  const ir::Program s2 = transforms::isolate_gemm_nests(s2_file.value(), t).program;
  const auto s2_nests = transforms::gemm_nests(s2);
  REQUIRE_FALSE(s2_nests.empty());
  CHECK(transforms::microkernel_candidates(s2_nests.front(), t).front().transposed);
  // Nothing to load as vectors across a transposed tile: every operand uses the column too.
  const ir::Program q = load(R"(M = 16
N = 32
K = 8
input A: f32[M, N, K]
output C: f32[M, N] = 0

M N K C[{0},{1}] += A[{0},{1},{2}]
)");
  auto r = transforms::gemm_nest_at(q, {0}, true);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error_text().find("no operand uses the row iterator without the column one") !=
        std::string::npos);
}

TEST_CASE("the sketch's candidates fill the target's register file") {
  const auto g = *transforms::gemm_nest_at(load_kernel("matmul-1024"), {0});
  const auto avx512 =
      transforms::microkernel_candidates(g, *transforms::target_by_name("x86_avx512"));
  REQUIRE_FALSE(avx512.empty());
  // 8 x 32 (16 zmm accumulators) takes matmul-1024's 1024 columns whole, so it comes before
  // 8 x 48 (24), which leaves 16 columns to a remainder; each tile in both panel orders, rows
  // outer first. (A row remainder does not count: AVX2's 6 x 16 stays first, 1020 + 4 rows.)
  auto with = [](MicrokernelParams m, bool rows_outer) {
    m.rows_outer = rows_outer;
    return m;
  };
  CHECK(avx512[0] == with(MicrokernelParams{8, 32, 256, 64, 0, 16}, true));
  CHECK(avx512[1] == MicrokernelParams{8, 32, 256, 64, 0, 16});
  CHECK(std::find(avx512.begin(), avx512.end(),
                  with(MicrokernelParams{8, 48, 256, 64, 0, 16}, true)) != avx512.end());
  // conv2d-3x3's 56 output columns: 8 x 48 leaves less to a remainder than 8 x 32, so it is the
  // first plain tile there.
  const auto conv = transforms::gemm_nests(
      transforms::isolate_gemm_nests(load_kernel("conv2d-3x3"),
                                     *transforms::target_by_name("x86_avx512"))
          .program);
  REQUIRE_FALSE(conv.empty());
  const auto cc =
      transforms::microkernel_candidates(conv.front(), *transforms::target_by_name("x86_avx512"));
  const auto plain =
      std::find_if(cc.begin(), cc.end(), [](const MicrokernelParams& m) { return !m.transposed; });
  REQUIRE(plain != cc.end());
  CHECK(plain->nr == 48);
  const auto avx2 = transforms::microkernel_candidates(g, *transforms::target_by_name("x86_avx2"));
  REQUIRE_FALSE(avx2.empty());
  CHECK(avx2[0].mr * avx2[0].nr / avx2[0].lanes == 12);  // 12 of the 16 ymm registers
  CHECK(transforms::microkernel_candidates(g, *transforms::target_by_name("x86_64")).empty());
  // Each candidate, fitted, expands on every shipped GEMM-class kernel for both ISAs (after the
  // fission that exposes attention's Q K^T, whose K is read transposed and must be packed even
  // when its reduction of 64 is one block).
  for (const char* k : {"matmul-1024", "matmul-skinny", "matmul-tall-k", "bmm", "mlp", "attention",
                        "conv2d-3x3", "conv2d-3x3-s2"})
    for (const char* isa : {"x86_avx512", "x86_avx2"}) {
      const auto t = *transforms::target_by_name(isa);
      const ir::Program p = transforms::isolate_gemm_nests(load_kernel(k), t).program;
      for (const auto& n : transforms::gemm_nests(p))
        for (const auto& m : transforms::microkernel_candidates(n, t))
          CHECK_MESSAGE(transforms::expand_microkernel_fitted(p, n.path, m, t).ok(),
                        k << " " << isa << " " << transforms::print_params(m));
    }
}

TEST_CASE("an f64 nest's tiles count f64 registers: half the f32 lanes per vector") {
  std::string text = matmul_text(48, 48, 32);
  for (size_t at; (at = text.find("f32")) != std::string::npos;) text.replace(at, 3, "f64");
  const ir::Program p = load(text);
  const auto g = *transforms::gemm_nest_at(p, {0});
  CHECK(g.dtype == ir::DType::kF64);
  // AVX-512: a zmm holds 8 doubles, so 8 x 24 is 24 accumulators (as 8 x 48 is for f32); sized
  // in f32 lanes the first tile was 8 x 48 doubles, 48 zmm, twice the register file.
  const auto avx512 =
      transforms::microkernel_candidates(g, *transforms::target_by_name("x86_avx512"));
  REQUIRE_FALSE(avx512.empty());
  for (const auto& m : avx512) {
    CHECK(m.lanes == 8);
    CHECK(m.mr * m.nr / 8 <= 24);
  }
  // AVX2 has no 4-lane width: f64 vectors of 8 lanes, two ymm each; 6 x 8 is 12 ymm.
  const auto avx2 = transforms::microkernel_candidates(g, *transforms::target_by_name("x86_avx2"));
  REQUIRE_FALSE(avx2.empty());
  CHECK(avx2[0].lanes == 8);
  CHECK(avx2[0].mr * avx2[0].nr / 4 == 12);
  const auto t = *transforms::target_by_name("x86_avx512");
  auto e = transforms::expand_microkernel_fitted(p, {0}, avx512[0], t);
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  require_same_outputs(p, e->program);
  CHECK(ir::print_program(e->program).find("8:vec C_t0") != std::string::npos);
}

TEST_CASE("the fitted sketch splits off remainders the tile does not divide") {
  // 20 x 20 x 20 with an 8 x 16 tile of 8 lanes: four parts, each tiled with a tile of its size
  // (the 4-column remainders in 4 scalar columns: 4 lanes is no vector width of the target).
  const ir::Program p = load(matmul_text(20, 20, 20));
  auto e = transforms::expand_microkernel_fitted(p, {0}, MicrokernelParams{8, 16, 8, 16, 0, 8},
                                                 transforms::Target{});
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  int splits = 0;
  for (const auto& a : e->trace) splits += a.kind == transforms::Kind::kSplitRange;
  CHECK(splits == 3);  // columns 16 + 4, then the rows 16 + 4 of each column part
  require_same_outputs(p, e->program);
  // 28 rows take 7-row tiles (a divisor within 3/4 of the 8 wanted) rather than 3 x 8 + 4.
  const ir::Program rows28 = load(matmul_text(28, 16, 8));
  auto r = transforms::expand_microkernel_fitted(rows28, {0}, MicrokernelParams{8, 16, 8, 28, 0, 8},
                                                 transforms::Target{});
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  for (const auto& a : r->trace) CHECK(a.kind != transforms::Kind::kSplitRange);
  REQUIRE(r->program.find_buffer("C_t0") != nullptr);
  CHECK(r->program.find_buffer("C_t0")->shape == std::vector<int64_t>{7, 16});
  require_same_outputs(rows28, r->program);
  // 28 columns with 16 lanes (AVX-512, which also has 8): 16 + 12, and the 12 are not left
  // scalar: 8 of them in vectors of 8, the last 4 in a transposed tile (the 16 rows in a
  // vector): every update of a register tile is vectorised.
  const ir::Program cols28 = load(matmul_text(16, 28, 8));
  auto c = transforms::expand_microkernel_fitted(
      cols28, {0}, MicrokernelParams{8, 16, 8, 16, 0, 16}, transforms::Target{});
  REQUIRE_MESSAGE(c.ok(), c.error_text());
  std::map<int64_t, int> widths;
  int col_splits = 0;
  for (const auto& a : c->trace) {
    if (a.kind == transforms::Kind::kVectorize) ++widths[a.param];
    col_splits += a.kind == transforms::Kind::kSplitRange;
  }
  CHECK(col_splits == 2);  // 16 | 12, then 8 | 4
  CHECK(widths[16] > 0);
  CHECK(widths[8] > 0);
  CHECK(widths.size() == 2);
  int updates = 0, scalar_updates = 0;
  std::function<void(const ir::Node&, bool)> walk = [&](const ir::Node& n, bool vec) {
    if (n.is_scope) {
      for (const auto& b : n.body) walk(*b, vec || n.annot == ir::Annot::kVector);
    } else if (n.stmt.op == ir::Reduce::kAdd && n.stmt.lhs.buffer.rfind("C_t", 0) == 0) {
      ++updates;
      scalar_updates += !vec;
    }
  };
  for (const auto& n : c->program.body) walk(*n, false);
  CHECK(updates == 3);  // 16, 8 and the transposed 4
  CHECK(scalar_updates == 0);
  require_same_outputs(cols28, c->program);
  // matmul 1000^3 on AVX-512 (no interpreter at this size: the trace must replay).
  const ir::Program big = load(matmul_text(1000, 1000, 1000));
  auto f = transforms::expand_microkernel_fitted(big, {0}, MicrokernelParams{8, 32, 256, 64, 0, 16},
                                                 transforms::Target{});
  REQUIRE_MESSAGE(f.ok(), f.error_text());
  CHECK(transforms::print_trace(f->trace).find("split_range 0 32") != std::string::npos);
  CHECK(transforms::replay(big, f->trace, transforms::Target{}).ok());
}

TEST_CASE(
    "a nest with few rows takes the dot form first: partial sums in the lanes, nothing packed") {
  // y[b,n] = sum_k W[n,k] x[b,k] over 4 batches: both operands unit-stride in k.
  const ir::Program p = load(R"(BATCH = 4
N = 8
K = 64
input W: f32[N, K]
input x: f32[BATCH, K]
output y: f32[BATCH, N] = 0

N BATCH K y[{1},{0}] += W[{0},{2}] * x[{1},{2}]
)");
  const auto g = transforms::gemm_nest_at(p, {0});
  REQUIRE_MESSAGE(g.ok(), g.error_text());
  CHECK(g->operands_unit_k);
  const auto cands = transforms::microkernel_candidates(*g, transforms::Target{});
  REQUIRE_FALSE(cands.empty());
  CHECK(cands.front().dot);
  CHECK(cands.front().mr == 4);
  CHECK(cands.front().nr == 2);  // 2 columns x 4 rows: the 8 accumulator registers
  CHECK(transforms::print_params(cands.front()).find(" dot") != std::string::npos);
  auto e = transforms::expand_microkernel_fitted(p, {0}, cands.front(), transforms::Target{});
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  // No Ko above Ni and the rows: the chunk loop holds the unrolled 2 x 4 tile, the lanes inside.
  CHECK(ir::print_program(e->program).find("4 4 2:unroll BATCH:unroll 16:vec y[") !=
        std::string::npos);
  for (const auto& a : e->trace) CHECK(a.kind != transforms::Kind::kCreateTemporary);
  require_same_outputs(p, e->program);
  // A product whose second operand is strided in k (B[{k},{j}]) keeps the plain tiles.
  const auto plain = transforms::gemm_nest_at(load(matmul_text(4, 32, 32)), {0});
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->operands_unit_k);
  for (const auto& c : transforms::microkernel_candidates(*plain, transforms::Target{}))
    CHECK_FALSE(c.dot);
}

TEST_CASE("the fitted sketch keeps k blocks when a column operand is packed inside row blocks") {
  // A reduction of 24 with kc 16 wanted: a plain product takes it whole (C loaded once per
  // tile), C = A A^T blocks it in 12s so that A's column panel is packed once per k block, not
  // once per row block.
  auto kc_of = [](const ir::Program& p) {
    auto e = transforms::expand_microkernel_fitted(p, {0}, MicrokernelParams{4, 16, 16, 16, 0, 8},
                                                   transforms::Target{});
    REQUIRE_MESSAGE(e.ok(), e.error_text());
    require_same_outputs(p, e->program);
    // The reduction is the only extent of 24 (mr 4, nr 16, mc 16 tile the others).
    for (const auto& a : e->trace)
      if (a.kind == transforms::Kind::kTileScope && a.param == 12) return int64_t{12};
    return int64_t{24};
  };
  CHECK(kc_of(load(matmul_text(32, 32, 24))) == 24);
  CHECK(kc_of(load(R"(M = 32
K = 24
input A: f32[M, K]
output C: f32[M, M] = 0

M M K C[{0},{1}] += A[{0},{2}] * A[{1},{2}]
)")) == 12);
}

TEST_CASE("fission exposes a GEMM-class nest that shares its scopes, and refuses what it must") {
  // Attention's Q K^T shares its two outer scopes with the softmax's first statements.
  const ir::Program p = load(R"(L = 16
D = 8
input Q: f32[L, D]
input K: f32[L, D]
input V: f32[L, D]
output O: f32[L, D] = 0
temp qk: f32[L, L] = 0
temp s: f32[L, L]
temp m: f32[L] = -inf

L L D qk[{0},{1}] += Q[{0},{2}] * K[{1},{2}]
| | s[{0},{1}] = qk[{0},{1}] * 0.125
| | m[{0}] = max(s[{0},{1}])
| L D O[{0},{2}] += exp(s[{0},{1}] - m[{0}]) * V[{1},{2}]
)");
  CHECK(transforms::gemm_nests(p).empty());
  const auto iso = transforms::isolate_gemm_nests(p, transforms::Target{});
  // Inner L split after Q K^T's nest, outer L after it, then after the softmax statements: the
  // weighted sum of V is a (fused) GEMM-class nest of its own.
  CHECK(iso.trace.size() == 3);
  for (const auto& a : iso.trace) CHECK(a.kind == transforms::Kind::kSplitScope);
  const auto nests = transforms::gemm_nests(iso.program);
  REQUIRE(nests.size() == 2);
  CHECK(nests[0].path == transforms::Path{0});
  CHECK(nests[1].target == "O");
  require_same_outputs(p, iso.program);
  // The sketch then applies to it: 4 x 8 tile, kc 4 of D = 8, mc 8 of L = 16.
  const auto e = expand(iso.program, {0}, MicrokernelParams{4, 8, 4, 8, 0, 8});
  require_same_outputs(p, e.program);
  // A fission that would reverse a dependence is not taken: t[{0}] is read by the product of
  // the next row before this row's product is done.
  const ir::Program dep = load(R"(L = 16
D = 8
input Q: f32[L, D]
output qk: f32[L, L] = 0
temp t: f32[L] = 1

L L D qk[{0},{1}] += Q[{0},{2}] * t[{2}]
| | t[{1}] = qk[{0},{1}]
)");
  const auto none = transforms::isolate_gemm_nests(dep, transforms::Target{});
  CHECK(none.trace.empty());
}

TEST_CASE("a fitted trace with remainders has a small instance the interpreter can check") {
  // AVX2's 6 x 16 tile on matmul-1024: rows 1020 + 4, blocks of 60. Neither dividing every size
  // by a power of two nor halving one at a time keeps those residues; the smallest size per
  // dimension on which the trace replays does.
  const ir::Program p = load_kernel("matmul-1024");
  const auto t = *transforms::target_by_name("x86_avx2");
  const auto g = *transforms::gemm_nest_at(p, {0});
  auto e =
      transforms::expand_microkernel_fitted(p, {0}, transforms::microkernel_candidates(g, t)[0], t);
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  auto inst = transforms::small_instance(p, e->trace, t, 1.6e7);
  REQUIRE(inst.has_value());
  CHECK(inst->first.find_size("M")->value < 1024);
  auto inputs = ir::make_inputs(inst->first, 2);
  auto want = ir::interpret(inst->first, inputs);
  auto got = ir::interpret(inst->second, inputs);
  REQUIRE((want.ok() && got.ok()));
  CHECK(ir::max_relative_error(want->at("C"), got->at("C")) == 0);
}
