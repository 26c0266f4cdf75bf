// The cost model: deterministic, finite, ordered the way the machine orders the classic cases,
// and its machine profile survives a file round trip or says clearly why it does not.
#include "backends/cost_model.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "backends/backend.h"
#include "backends/machine_profile.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "support/scaled_kernels.h"
#include "transforms/registry.h"

using namespace perfdojo;
namespace fs = std::filesystem;

namespace {

// Matmul bodies of size S (rows of A, columns of B and the reduction all S).
std::string matmul(int s, const std::string& body) {
  return "S = " + std::to_string(s) +
         "\ninput A: f32[S, S]\ninput B: f32[S, S]\noutput C: f32[S, S] = 0\n\n" + body + "\n";
}

const char* kIJK = "S S S C[{0},{1}] += A[{0},{2}] * B[{2},{1}]";
const char* kIKJ = "S S S C[{0},{2}] += A[{0},{1}] * B[{1},{2}]";
const char* kJKI = "S S S C[{2},{0}] += A[{2},{1}] * B[{1},{0}]";
// C = A B^T: the reduction runs along unit-stride rows of both operands, so only explicit
// vectors (which may reassociate the sum) vectorise it; GCC keeps it a scalar chain.
const char* kIJKBt = "S S S C[{0},{1}] += A[{0},{2}] * B[{1},{2}]";

ir::Program load(const std::string& text) {
  auto r = ir::load_program(text, "test.pdj");
  REQUIRE_MESSAGE(r.ok(), r.error_text() << "\n" << text);
  return r.value();
}

double estimate(const std::string& text) {
  return backends::estimate_cost(load(text), backends::default_profile()).time_s;
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("perfdojo_cost_model_test_" + name)).string();
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("the same program gets a bit-identical estimate, also from a clone") {
  auto backend = backends::make_backend("cost_model");
  REQUIRE(backend);
  CHECK(backend->deterministic());
  for (const auto& name : testing::suite_kernel_names()) {
    auto p = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/" + name + ".pdj");
    REQUIRE(p.ok());
    auto a = backend->measure(p.value(), {});
    auto b = backend->measure(p.value(), {});
    auto clone = backend->clone();
    auto c = clone->measure(p.value(), {});
    REQUIRE_MESSAGE(a.ok(), name);
    CHECK_MESSAGE(a.median_s == b.median_s, name);
    CHECK_MESSAGE(a.median_s == c.median_s, name);
    CHECK_MESSAGE(a.min_s == a.median_s, name);
  }
}

TEST_CASE(
    "an estimate is reported as an unverified, repetition-free measurement naming the profile") {
  auto backend = backends::make_backend("cost_model");
  auto m = backend->measure(load(matmul(64, kIKJ)), {});
  REQUIRE(m.ok());
  CHECK(m.median_s > 0);
  CHECK(m.reps == 0);
  CHECK_FALSE(m.verified);
  CHECK(m.flags == "cost_model " + backends::default_profile().name);
  auto caps = backend->capabilities();
  CHECK(caps.vector_widths == std::vector<int>{16, 8});
  CHECK(caps.parallel);
  CHECK(caps.threads == backends::default_profile().cores);
  CHECK(backend->available().ok);
}

TEST_CASE("cost_model:zen3 is one AVX2 core: 8 lanes, no 16, and the Zen 3's FMA peak") {
  auto zen3 = backends::make_backend("cost_model:zen3");
  REQUIRE(zen3);
  REQUIRE(zen3->available().ok);
  CHECK(zen3->capabilities().vector_widths == std::vector<int>{8});
  auto m = zen3->measure(load(matmul(64, kIKJ)), {});
  REQUIRE(m.ok());
  CHECK(m.flags == "cost_model builtin-zen3");
  CHECK(m.median_s > 0);
  CHECK(backends::builtin_profile("zen3")->vector_peak_gflops() == doctest::Approx(102.4));
}

TEST_CASE("vectorising matmul's inner scope with 16 lanes lowers the estimate") {
  double scalar = estimate(matmul(256, kIJKBt));
  double vec =
      estimate(matmul(256, "S S 16 16:vec C[{0},{1}] += A[{0},{2}*16+{3}] * B[{1},{2}*16+{3}]"));
  CHECK(vec < scalar / 4);
}

TEST_CASE("a vector of u8 x i8 dot products costs one vpdpbusd per register where VNNI is") {
  // An int8 GEMM with packed weights, 16 columns as lanes of 4-term dot products: priced as one
  // instruction per register at the profile's VNNI rate; without VNNI (the printer's loops) as
  // the four multiply-adds per lane it is.
  const std::string gemm =
      "M = 64\nN = 64\nK = 256\nKB = 64\ninput A: u8[M, K]\ninput B4: i8[KB, N, 4]\n"
      "output C: i32[M, N] = 0\n\n";
  const ir::Program dots =
      load(gemm + "M KB 4 16:vec 4 C[{0},{2}*16+{3}] += A[{0},{1}*4+{4}] * B4[{1},{2}*16+{3},{4}]");
  backends::MachineProfile with = backends::default_profile(), without = with;
  with.peak_gops_vnni = 4 * with.peak_gflops_avx512;  // 4x the f32 FMA rate, as on Xeons
  without.peak_gops_vnni = 0;
  const double t_with = backends::estimate_cost(dots, with).time_s;
  const double t_without = backends::estimate_cost(dots, without).time_s;
  MESSAGE((t_with * 1e6) << " us with VNNI, " << (t_without * 1e6) << " us without");
  CHECK(t_with * 2.5 < t_without);
  // Not a dot product (f32 operands): the VNNI rate changes nothing.
  const ir::Program f32 = load(
      "M = 64\nN = 64\nK = 256\nKB = 64\ninput A: f32[M, K]\ninput B4: f32[KB, N, 4]\n"
      "output C: f32[M, N] = 0\n\n"
      "M KB 4 16:vec 4 C[{0},{2}*16+{3}] += A[{0},{1}*4+{4}] * B4[{1},{2}*16+{3},{4}]");
  CHECK(backends::estimate_cost(f32, with).time_s == backends::estimate_cost(f32, without).time_s);
}

TEST_CASE("parallelizing matmul's outer scope lowers the estimate") {
  double serial = estimate(matmul(256, kIKJ));
  double par = estimate(matmul(256, "S:par S S C[{0},{2}] += A[{0},{1}] * B[{1},{2}]"));
  CHECK(par < serial * 0.75);
}

TEST_CASE("parallelizing a scope of one iteration gains nothing and pays the fork") {
  double serial = estimate(matmul(64, "1 S S S C[{1},{3}] += A[{1},{2}] * B[{2},{3}]"));
  double par = estimate(matmul(64, "1:par S S S C[{1},{3}] += A[{1},{2}] * B[{2},{3}]"));
  CHECK(par > serial);
}

TEST_CASE("a parallel scope entered inside a loop pays a fork and join per entry") {
  double outer = estimate(matmul(256, "S:par S S C[{0},{2}] += A[{0},{1}] * B[{1},{2}]"));
  double inner = estimate(matmul(256, "S S:par S C[{0},{2}] += A[{0},{1}] * B[{1},{2}]"));
  auto prof = backends::default_profile();
  CHECK(inner > outer + 200 * prof.fork_join_hot_us * 1e-6);
}

TEST_CASE("a fork after long serial work pays for waking idle threads, back-to-back forks do not") {
  auto prof = backends::default_profile();
  REQUIRE(prof.fork_join_us > 4 * prof.fork_join_hot_us);
  // A heavy serial nest, then a parallel scope with next to nothing to do: its threads have
  // been idle for the whole matmul.
  const std::string serial = matmul(256, std::string(kIJKBt) + "\n2 C[0,{0}] = A[0,{0}] * 2");
  const std::string after_serial =
      matmul(256, std::string(kIJKBt) + "\n2:par C[0,{0}] = A[0,{0}] * 2");
  double cold = estimate(after_serial) - estimate(serial);
  CHECK(cold > 0.9 * prof.fork_join_us * 1e-6);
  // The same tiny parallel scope entered 256 times in a row, with nothing in between.
  const std::string loop = matmul(256, "S 2 C[{0},{1}] = A[{0},{1}] * 2");
  const std::string loop_par = matmul(256, "S 2:par C[{0},{1}] = A[{0},{1}] * 2");
  double per_entry = (estimate(loop_par) - estimate(loop)) / 256;
  CHECK(per_entry < 2 * prof.fork_join_hot_us * 1e-6);
  CHECK(per_entry > 0.5 * prof.fork_join_hot_us * 1e-6);
}

TEST_CASE(
    "inside a parallel scope a loop storing to a parameter loses GCC's outer-loop vectorisation") {
  // Plain i,j,k runs vectorised across j (outer-loop vectorisation); in the OpenMP region the
  // pointers lose `restrict`, the j loop stays scalar and two threads do not win it back.
  double serial = estimate(matmul(256, kIJK));
  double parallel = estimate(matmul(256, "S:par S S C[{0},{1}] += A[{0},{2}] * B[{2},{1}]"));
  CHECK(parallel > serial);
  // The i,k,j order vectorises its innermost loop (versioned for aliasing): parallel helps.
  CHECK(estimate(matmul(256, "S:par S S C[{0},{2}] += A[{0},{1}] * B[{1},{2}]")) <
        estimate(matmul(256, kIKJ)));
}

TEST_CASE("a column walk whose stride is a power of two crowds into a few cache sets") {
  // Rows of 256 floats put a column's elements 1 KiB apart: 4 of the L1's 64 sets. Rows of 260
  // spread them over every set. The traffic per flop from L2 shows the difference.
  auto walk = [](int row) {
    return "S = 256\nR = " + std::to_string(row) +
           "\ninput A: f32[S, R]\ninput B: f32[S, R]\noutput C: f32[S, R] = 0\n\n"
           "S S S C[{1},{0}] += A[{1},{2}] * B[{2},{0}]\n";
  };
  auto pow2 = backends::estimate_cost(load(walk(256)), backends::default_profile());
  auto odd = backends::estimate_cost(load(walk(260)), backends::default_profile());
  CHECK(pow2.bytes[1] > 4 * odd.bytes[1]);
}

TEST_CASE("a loop GCC vectorises by itself is estimated as vector code") {
  // i,k,j: the j loop is unit-stride everywhere, so -O3 vectorises it without a :vec.
  double auto_vec = estimate(matmul(256, kIKJ));
  double chain = estimate(matmul(256, kIJKBt));
  double explicit_vec =
      estimate(matmul(256, "S S 16 16:vec C[{0},{2}*16+{3}] += A[{0},{1}] * B[{1},{2}*16+{3}]"));
  CHECK(auto_vec < chain / 4);
  CHECK(auto_vec < explicit_vec * 2);
}

TEST_CASE("strided matmul orderings are slower than the unit-stride ordering i,k,j") {
  double ikj = estimate(matmul(256, kIKJ));
  CHECK(estimate(matmul(256, kIJK)) > ikj);
  CHECK(estimate(matmul(256, kJKI)) > ikj);
  // At a size where B no longer fits in L2 the column walk costs a line per element.
  auto big_jki = backends::estimate_cost(load(matmul(1024, kJKI)), backends::default_profile());
  auto big_ikj = backends::estimate_cost(load(matmul(1024, kIKJ)), backends::default_profile());
  CHECK(big_jki.bytes[1] > 4 * big_ikj.bytes[1]);
  CHECK(big_jki.time_s > big_ikj.time_s);
}

TEST_CASE(
    "a reduction chain in an innermost loop is latency bound until independent accumulators "
    "relieve it") {
  // Every FMA waits for the previous one into C[i][j].
  double chained = estimate(matmul(128, kIJKBt));
  // Unrolling j by 8 inside k gives eight independent accumulators.
  double relieved =
      estimate(matmul(128, "S 16 S 8:unroll C[{0},{1}*8+{3}] += A[{0},{2}] * B[{1}*8+{3},{2}]"));
  CHECK(relieved < chained / 2);
  // Unrolling the reduction scope itself keeps one chain: no such gain.
  double unrolled_k =
      estimate(matmul(128, "S S 32 4:unroll C[{0},{1}] += A[{0},{2}*4+{3}] * B[{1},{2}*4+{3}]"));
  CHECK(unrolled_k > chained * 0.7);
}

TEST_CASE(
    "unrolled updates of a vector accumulator are as many chains as the register sets they rotate "
    "over") {
  // A row maximum in one register updated by 32 unrolled copies: the generated code rotates them
  // over 8 registers (codegen_c.cpp), so its chain is an eighth of the rolled loop's (the
  // compute part: the data would bound both from L3).
  const std::string head = "R = 64\nN = 4096\ninput x: f32[R, N]\noutput m: f32[R] = -inf\n\n";
  auto cost = [&](const std::string& body) {
    return backends::estimate_cost(load(head + body), backends::default_profile()).compute_s;
  };
  const double rolled = cost("R 8 32 16:vec m[{0}] = max(x[{0},{1}*512+{2}*16+{3}])\n");
  const double rotated = cost("R 8 32:unroll 16:vec m[{0}] = max(x[{0},{1}*512+{2}*16+{3}])\n");
  CHECK(rotated < rolled * 0.3);
  // A target that changes with the lanes (column sums) is no accumulator the code rotates: its
  // chain through the unrolled copies stays whole.
  const std::string cols = "input x: f32[512, 16]\noutput y: f32[16] = 0\n\n";
  auto col_cost = [&](const std::string& body) {
    return backends::estimate_cost(load(cols + body), backends::default_profile()).compute_s;
  };
  CHECK(col_cost("64 8:unroll 16:vec y[{2}] += x[{0}*8+{1},{2}]\n") >=
        0.9 * col_cost("64 8 16:vec y[{2}] += x[{0}*8+{1},{2}]\n"));
}

TEST_CASE("a temporary small enough for registers moves no memory traffic") {
  // The same computation through a 16-element temporary (registers: indexed by the vector
  // lanes only) and through a full-size one (memory).
  const std::string head = "S = 512\ninput A: f32[S, S]\noutput C: f32[S, S]\n";
  auto regs = backends::estimate_cost(load(head + "temp t: f32[16]\n\n"
                                                  "S 32 16:vec t[{2}] = A[{0},{1}*16+{2}]\n"
                                                  "| | 16:vec C[{0},{1}*16+{2}] = t[{2}] * 2\n"),
                                      backends::default_profile());
  auto memory =
      backends::estimate_cost(load(head + "temp t: f32[S, S]\n\n"
                                          "S 32 16:vec t[{0},{1}*16+{2}] = A[{0},{1}*16+{2}]\n"
                                          "| | 16:vec C[{0},{1}*16+{2}] = t[{0},{1}*16+{2}] * 2\n"),
                              backends::default_profile());
  const double matrix = 512.0 * 512 * 4;
  CHECK(regs.bytes[0] == 2 * matrix);    // A loaded, C stored, t never
  CHECK(memory.bytes[0] == 4 * matrix);  // t stored and loaded too
  CHECK(regs.bytes[1] < memory.bytes[1]);
  CHECK(regs.time_s < memory.time_s);
}

TEST_CASE("a larger kernel costs more") {
  CHECK(estimate(matmul(128, kIKJ)) > estimate(matmul(64, kIKJ)));
  CHECK(estimate(matmul(512, kIJK)) > estimate(matmul(256, kIJK)));
  auto small = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/matmul-256.pdj");
  auto large = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/matmul-1024.pdj");
  REQUIRE(small.ok());
  REQUIRE(large.ok());
  auto prof = backends::default_profile();
  CHECK(backends::estimate_cost(large.value(), prof).time_s >
        8 * backends::estimate_cost(small.value(), prof).time_s);
  for (const auto& name : testing::suite_kernel_names()) {
    auto full = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/" + name + ".pdj");
    auto scaled = testing::load_scaled_kernel(name);
    REQUIRE(full.ok());
    REQUIRE(scaled.ok());
    CHECK_MESSAGE(backends::estimate_cost(full.value(), prof).time_s >
                      backends::estimate_cost(scaled.value(), prof).time_s,
                  name);
  }
}

TEST_CASE(
    "estimates are finite and positive on every suite kernel and on random trajectories of them") {
  const transforms::Target target;
  const auto prof = backends::default_profile();
  int checked = 0;
  for (const auto& name : testing::suite_kernel_names()) {
    for (bool scaled : {false, true}) {
      auto loaded = scaled ? testing::load_scaled_kernel(name)
                           : ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/" + name + ".pdj");
      REQUIRE(loaded.ok());
      std::mt19937_64 rng(std::hash<std::string>{}(name) + scaled);
      for (int t = 0; t < 12; ++t) {
        ir::Program cur = loaded.value();
        int steps = std::uniform_int_distribution<int>(0, 12)(rng);
        for (int s = 0; s < steps; ++s) {
          auto legal = transforms::legal_actions(cur, target);
          if (legal.empty()) break;
          auto a = legal[std::uniform_int_distribution<size_t>(0, legal.size() - 1)(rng)];
          auto next = transforms::apply(cur, a, target);
          REQUIRE(next.ok());
          cur = std::move(next).value();
        }
        auto e = backends::estimate_cost(cur, prof);
        CHECK_MESSAGE((std::isfinite(e.time_s) && e.time_s > 0), name << " trajectory " << t);
        CHECK_MESSAGE(e.time_s >= e.compute_s * 0.999, name);
        for (double b : e.bytes) CHECK_MESSAGE((std::isfinite(b) && b >= 0), name);
        ++checked;
      }
    }
  }
  CHECK(checked > 100);
}

TEST_CASE("a machine profile survives a save and load round trip in both formats") {
  backends::MachineProfile p = backends::default_profile();
  p.name = "round-trip";
  p.peak_gflops_avx512 = 0;  // zero is allowed here: no AVX-512
  p.peak_gflops_avx2 = 123.456789012345;
  p.l2_bytes = 2 * 1024 * 1024;
  p.dram_bw_gbs = 1.0 / 3.0;
  p.cores = 7;
  for (const std::string ext : {".txt", ".json"}) {
    std::string path = temp_path("profile" + ext);
    std::string err;
    REQUIRE_MESSAGE(backends::save_profile(p, path, &err), err);
    auto back = backends::load_profile(path, &err);
    REQUIRE_MESSAGE(back.has_value(), err);
    CHECK(backends::profile_to_text(*back) == backends::profile_to_text(p));
    CHECK(back->dram_bw_gbs == p.dram_bw_gbs);
    CHECK(back->cores == 7);
    CHECK(back->name == "round-trip");
    CHECK(back->isa == p.isa);
    // The backend reads it and names it.
    backends::BackendConfig c;
    c.machine_profile = path;
    auto backend = backends::make_backend("cost_model", c);
    CHECK(backend->capabilities().threads == 7);
    CHECK(backend->measure(load(matmul(32, kIKJ)), {}).flags == "cost_model round-trip");
    fs::remove(path);
  }
}

TEST_CASE("a vectorised loop's remainder runs as GCC's epilogue: a scalar chain per element") {
  // A 3x3 convolution over rows of W outputs: GCC vectorises the W loop across its iterations
  // (outer-loop), each vector a chain of C*9 FMAs; the W mod 16 left over run one scalar chain
  // each. 28 columns: 1 vector + 12 scalar chains per row; 32 columns: 2 vectors.
  auto conv = [](int w) {
    return "C = 32\nK = 8\nH = 8\nW = " + std::to_string(w) + "\nWI = " + std::to_string(w + 2) +
           "\ninput x: f32[C, 10, WI]\ninput w: f32[K, C, 3, 3]\noutput y: f32[K, H, W] = 0\n\n"
           "K H W C 3 3 y[{0},{1},{2}] += x[{3},{1}+{4},{2}+{5}] * w[{0},{3},{4},{5}]\n";
  };
  const double w28 = estimate(conv(28)), w32 = estimate(conv(32));
  CHECK_MESSAGE(w28 > 4 * w32, w28 << " vs " << w32);
  // An innermost loop of 24 at 16 lanes: one full step and one 8-lane epilogue step; of 23:
  // one full step and 7 scalar ones.
  auto rows = [](int n) {
    return "N = " + std::to_string(n) +
           "\ninput x: f32[4096, N]\noutput y: f32[4096, N]\n\n4096 N y[{0},{1}] = x[{0},{1}] * 2 "
           "+ 1\n";
  };
  auto compute = [&](int n) {
    return backends::estimate_cost(load(rows(n)), backends::default_profile()).compute_s;
  };
  CHECK_MESSAGE(compute(23) > 2 * compute(24), compute(23) << " vs " << compute(24));
}

TEST_CASE(
    "a sequential sum chains adds, a fused dot product chains FMAs: each at its own latency") {
  const std::string sum =
      "input x: f32[64, 4096]\noutput s: f32[64] = 0\n\n64 4096 s[{0}] += x[{0},{1}]\n";
  // The fused update (what contraction makes of s += x * z) waits on the FMA, not the add.
  const std::string dot =
      "input x: f32[64, 4096]\ninput z: f32[64, 4096]\noutput s: f32[64] = 0\n\n"
      "64 4096 s[{0}] = fma(x[{0},{1}], z[{0},{1}], s[{0}])\n";
  const std::string unfused =
      "input x: f32[64, 4096]\ninput z: f32[64, 4096]\noutput s: f32[64] = 0\n\n"
      "64 4096 s[{0}] += x[{0},{1}] * z[{0},{1}]\n";
  backends::MachineProfile slow = backends::default_profile(), fast = slow;
  slow.add_latency_cycles = 4;
  fast.add_latency_cycles = 2;
  const double sum_slow = backends::estimate_cost(load(sum), slow).time_s;
  const double sum_fast = backends::estimate_cost(load(sum), fast).time_s;
  CHECK(sum_fast < 0.6 * sum_slow);
  CHECK(backends::estimate_cost(load(dot), fast).time_s ==
        backends::estimate_cost(load(dot), slow).time_s);
  // Unfused, the multiply is off the chain and the add is on it.
  CHECK(backends::estimate_cost(load(unfused), fast).time_s <
        0.6 * backends::estimate_cost(load(unfused), slow).time_s);
}

TEST_CASE("calibration rounds merge at each figure's better value; a worse one is named") {
  backends::MachineProfile a = backends::default_profile(), b = a;
  a.peak_gflops_avx512 = 170;
  b.peak_gflops_avx512 = 120;  // a busy round
  a.l3_bw_gbs = 20;
  b.l3_bw_gbs = 60;
  a.fork_join_us = 50;
  b.fork_join_us = 5;
  a.exp_cycles_scalar = 10;
  b.exp_cycles_scalar = 30;
  b.l2_bytes = 123;  // sizes are the hardware's, never merged
  const auto best = backends::best_of(a, b);
  CHECK(best.peak_gflops_avx512 == 170);
  CHECK(best.l3_bw_gbs == 60);
  CHECK(best.fork_join_us == 5);
  CHECK(best.exp_cycles_scalar == 10);
  CHECK(best.l2_bytes == a.l2_bytes);
  // b against a: 30% less peak, and only that, is a regression; a small difference is not.
  const std::string why = backends::profile_regression(a, b);
  CHECK_MESSAGE(why.find("peak_gflops_avx512 120.0 vs 170.0") != std::string::npos, why);
  CHECK(why.find("l3_bw") == std::string::npos);
  backends::MachineProfile close = a;
  close.peak_gflops_avx512 = 160;
  CHECK(backends::profile_regression(a, close).empty());
  // Profiles of different ISAs describe different machines: nothing to compare.
  b.isa = "x86_avx2";
  CHECK(backends::profile_regression(a, b).empty());
  // A profile fits this machine only with this machine's ISA and that ISA's peak.
  backends::MachineProfile here = backends::default_profile();
  here.isa = backends::this_machine_isa();
  CHECK(backends::profile_fits_this_machine(here));
  here.peak_gflops_avx512 = here.isa == "x86_avx512" ? 0 : here.peak_gflops_avx512;
  here.peak_gflops_avx2 = here.isa == "x86_avx512" ? here.peak_gflops_avx2 : 0;
  CHECK_FALSE(backends::profile_fits_this_machine(here));
  here = backends::default_profile();
  here.isa = backends::this_machine_isa() == "x86_64" ? "x86_avx2" : "x86_64";
  CHECK_FALSE(backends::profile_fits_this_machine(here));
}

TEST_CASE(
    "the L3 size follows the bandwidth sweep where the reported one is larger than it streams") {
  const double MiB = 1024.0 * 1024.0;
  // The VM this was seen on: 2 MiB of L2, 480 MiB of L3 reported, L3 speed to 64 MiB, memory
  // speed from 256 MiB.
  const std::vector<std::pair<long, double>> vm = {
      {16L << 10, 313}, {64L << 10, 168}, {1L << 20, 166}, {4L << 20, 30},
      {16L << 20, 29},  {64L << 20, 29},  {256L << 20, 15}};
  CHECK(backends::effective_l3_bytes(2 * MiB, 480 * MiB, 29.5, 14.9, vm) == 64 * MiB);
  // A sweep that never leaves the L3, or an L3 as slow as memory: the reported size stands.
  const std::vector<std::pair<long, double>> inside = {{4L << 20, 30}, {16L << 20, 29}};
  CHECK(backends::effective_l3_bytes(2 * MiB, 32 * MiB, 29.5, 14.9, inside) == 32 * MiB);
  CHECK(backends::effective_l3_bytes(2 * MiB, 480 * MiB, 16, 14.9, vm) == 480 * MiB);
  // A real 32 MiB L3 whose sweep leaves it at 64 MiB, past the share the model uses: kept.
  CHECK(backends::effective_l3_bytes(2 * MiB, 32 * MiB, 29.5, 14.9, vm) == 32 * MiB);
  const std::vector<std::pair<long, double>> real = {
      {4L << 20, 30}, {16L << 20, 28}, {64L << 20, 15}};
  CHECK(backends::effective_l3_bytes(2 * MiB, 48 * MiB, 29.5, 14.9, real) == 48 * MiB);
}

TEST_CASE("a profile changes the estimate the way its figures say") {
  auto p = load(matmul(256, kIJK));
  auto slow = backends::default_profile();
  slow.freq_ghz /= 2;
  CHECK(backends::estimate_cost(p, slow).time_s >
        backends::estimate_cost(p, backends::default_profile()).time_s);
}

TEST_CASE("a corrupt profile file gives an error naming the file, the line and the problem") {
  struct Case {
    std::string text;
    std::string expect;
  };
  const Case cases[] = {
      {"name = x\nl1_bytes = banana\n", "p.txt:2: 'l1_bytes' must be a number, got 'banana'"},
      {"l2_bytes = -5\n", "p.txt:1: 'l2_bytes' must be positive"},
      {"freq_ghz = 0\n", "p.txt:1: 'freq_ghz' must be positive"},
      {"warp_drive = 3\n", "p.txt:1: unknown key 'warp_drive'"},
      {"# ok\n\nl3_bytes 42\n", "p.txt:3: expected 'key = value'"},
      {"cores = 2.5\n", "'cores' must be a whole number"},
      // Found by fuzzing: a name that printing and parsing again would change.
      {"name = \"a\\\"b\"\n",
       "p.txt:1: 'name' may not hold control characters, '#', quotes or backslashes"},
      {"isa = x86_sse\n",
       "p.txt:1: 'isa' must be x86_avx512, x86_avx2, x86_64, aarch64_neon, aarch64_sve, "
       "riscv64_rvv or cuda"},
      {"", "p.txt: empty machine profile"},
      {"{\"l1_bytes\": {\"nested\": 1}}", "one flat object"},
      {"{\"l1_bytes\": 32768", "does not end with '}'"},
      {"{\"l1_bytes\": \"a lot\"}", "'l1_bytes' must be a number, got 'a lot'"},
  };
  for (const auto& c : cases) {
    std::string err;
    auto p = backends::parse_profile(c.text, "p.txt", &err);
    CHECK_MESSAGE(!p.has_value(), c.text);
    CHECK_MESSAGE(err.find(c.expect) != std::string::npos,
                  "got: " << err << "\nexpected: " << c.expect);
  }
  std::string err;
  CHECK_FALSE(backends::load_profile(temp_path("does_not_exist"), &err).has_value());
  CHECK(err.find("cannot read machine profile") != std::string::npos);

  // The backend refuses to estimate with it, and says why.
  std::string path = temp_path("corrupt.txt");
  write_file(path, "l1_bytes = banana\n");
  backends::BackendConfig c;
  c.machine_profile = path;
  auto backend = backends::make_backend("cost_model", c);
  CHECK_FALSE(backend->available().ok);
  auto m = backend->measure(load(matmul(32, kIKJ)), {});
  REQUIRE_FALSE(m.ok());
  CHECK(m.error->find("'l1_bytes' must be a number") != std::string::npos);
  CHECK_FALSE(backend->clone()->measure(load(matmul(32, kIKJ)), {}).ok());
  fs::remove(path);
}

TEST_CASE("a partially given profile keeps the defaults for the rest") {
  std::string err;
  auto p = backends::parse_profile("{\"name\": \"half\", \"l1_bytes\": 49152}", "p.json", &err);
  REQUIRE_MESSAGE(p.has_value(), err);
  CHECK(p->l1_bytes == 49152);
  CHECK(p->name == "half");
  CHECK(p->l2_bytes == backends::default_profile().l2_bytes);
}

TEST_CASE("a fill no statement can observe is not charged") {
  // y = 0 then every element stored before anything reads it: the generated code leaves the
  // fill out (ir::initial_value_dead), so the estimate is the one without an initial value.
  const std::string body = "input x: f32[512, 512]\noutput y: f32[512, 512]";
  const std::string nest = "\n\n512 512 y[{0},{1}] = x[{0},{1}] * 2\n";
  const auto& prof = backends::default_profile();
  const auto dead = backends::estimate_cost(load(body + " = 0" + nest), prof);
  const auto none = backends::estimate_cost(load(body + nest), prof);
  CHECK(dead.overhead_s == none.overhead_s);
  // Half the columns stored: the fill stays, and costs.
  const std::string half = "\n\n512 256 y[{0},{1}] = x[{0},{1}] * 2\n";
  CHECK(backends::estimate_cost(load(body + " = 0" + half), prof).overhead_s >
        backends::estimate_cost(load(body + half), prof).overhead_s);
}

TEST_CASE("a nest tiled past 64 scopes still gets a finite estimate") {
  // The parser takes at most 64 nested scopes; tiling makes deeper ones, whose cache lines the
  // model counts one depth cut at a time (the 64-stride limit of its one-pass count).
  std::string body;
  for (int k = 0; k < 64; ++k) body += "4 ";
  body += "x[{63}] += 1";
  const ir::Program p = load("output x: f32[4] = 0\n\n" + body + "\n");
  transforms::Path inner;
  for (int k = 0; k < 64; ++k) inner.push_back(0);
  auto tiled =
      transforms::apply(p, {transforms::Kind::kTileScope, inner, "", "", 2}, transforms::Target{});
  REQUIRE_MESSAGE(tiled.ok(), tiled.error_text());
  const double shallow = backends::estimate_cost(p, backends::default_profile()).time_s;
  const double deep = backends::estimate_cost(tiled.value(), backends::default_profile()).time_s;
  CHECK(std::isfinite(deep));
  CHECK(deep > 0);
  CHECK(deep == backends::estimate_cost(tiled.value(), backends::default_profile()).time_s);
  CHECK(std::isfinite(shallow));
}

namespace {

// Every figure of two estimates, bit for bit.
void check_identical(const backends::CostEstimate& a, const backends::CostEstimate& b,
                     const std::string& what) {
  CHECK_MESSAGE(std::memcmp(&a.time_s, &b.time_s, sizeof(double)) == 0, what);
  CHECK_MESSAGE(a.compute_s == b.compute_s, what);
  CHECK_MESSAGE(a.overhead_s == b.overhead_s, what);
  CHECK_MESSAGE(a.flops == b.flops, what);
  for (int k = 0; k < 4; ++k) {
    CHECK_MESSAGE(a.bytes[k] == b.bytes[k], what << " level " << k);
    CHECK_MESSAGE(a.level_s[k] == b.level_s[k], what << " level " << k);
  }
  CHECK_MESSAGE(a.bound == b.bound, what);
}

}  // namespace

TEST_CASE("a memo of unchanged nests gives bit-identical estimates along random trajectories") {
  const transforms::Target target;
  const auto prof = backends::default_profile();
  uint64_t reused = 0;
  for (const auto& name : testing::suite_kernel_names()) {
    auto loaded = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/" + name + ".pdj");
    REQUIRE(loaded.ok());
    std::mt19937_64 rng(std::hash<std::string>{}(name));
    backends::CostMemo memo;  // one memo for every trajectory, as an env keeps its own
    for (int t = 0; t < 4; ++t) {
      ir::Program cur = loaded.value();
      for (int s = 0; s < 25; ++s) {
        check_identical(backends::estimate_cost(cur, prof, &memo),
                        backends::estimate_cost(cur, prof),
                        name + " trajectory " + std::to_string(t) + " step " + std::to_string(s));
        CHECK(memo.size() <= cur.body.size());
        auto legal = transforms::legal_actions(cur, target);
        if (legal.empty()) break;
        auto next = transforms::apply(
            cur, legal[std::uniform_int_distribution<size_t>(0, legal.size() - 1)(rng)], target);
        REQUIRE(next.ok());
        cur = std::move(next).value();
      }
    }
    reused += memo.hits();
  }
  CHECK(reused > 0);  // the memo did copy nests
}

TEST_CASE("a memo notices a changed buffer declaration and another machine's caches") {
  const ir::Program p = load(
      "S = 64\ninput A: f32[S, S]\ninput B: f32[S, S]\noutput C: f32[S, S] = 0\noutput D: f32[S, "
      "S] = 0\n\n"
      "S S S C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\nS S D[{0},{1}] = B[{1},{0}]\n");
  backends::CostMemo memo;
  const auto prof = backends::default_profile();
  check_identical(backends::estimate_cost(p, prof, &memo), backends::estimate_cost(p, prof),
                  "first");
  CHECK(memo.size() == 2);
  // The same nodes over a buffer of another shape: every nest reading B is analysed again.
  ir::Program wide = p;
  wide.buffers[1].shape = {64, 128};
  check_identical(backends::estimate_cost(wide, prof, &memo), backends::estimate_cost(wide, prof),
                  "reshaped B");
  const uint64_t hits = memo.hits();
  check_identical(backends::estimate_cost(wide, prof, &memo), backends::estimate_cost(wide, prof),
                  "again");
  CHECK(memo.hits() == hits + 2);
  // Another cache geometry: nothing remembered applies.
  backends::MachineProfile small = prof;
  small.l1_bytes /= 4;
  small.l2_bytes /= 4;
  check_identical(backends::estimate_cost(wide, small, &memo), backends::estimate_cost(wide, small),
                  "small caches");
  CHECK(memo.hits() == hits + 2);
  // A copy of a memo starts empty.
  backends::CostMemo copy = memo;
  CHECK(copy.size() == 0);
  CHECK(memo.size() == 2);
}

// docs/cost_model.md: a data-bounded scope runs an even split of its extent among the index
// elements its bounds read, so a CSR product counts the flops of its non-zeros.
TEST_CASE("a CSR kernel's flops are those of its non-zeros, and its estimate is finite") {
  const ir::Program spmv = testing::load_scaled_kernel("csr-spmv").value();  // NNZ = 12
  CHECK(backends::flop_count(spmv) == doctest::Approx(2 * 12));
  const ir::Program spmm = testing::load_scaled_kernel("csr-spmm").value();  // K = 16
  CHECK(backends::flop_count(spmm) == doctest::Approx(2 * 12 * 16));
  const auto e = backends::estimate_cost(spmm, backends::default_profile());
  CHECK(std::isfinite(e.time_s));
  CHECK(e.time_s > 0);
}
