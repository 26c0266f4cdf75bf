// The x86 backends end to end: generated code compiles, runs in the worker and matches the
// interpreter; failures (crash, hang, runaway allocation, wrong result) are records; the cache.
#include "backends/x86_backend.h"

#include <dlfcn.h>
#include <doctest/doctest.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "backends/compiler.h"
#include "backends/x86_test_support.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "support/skip.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/registry.h"
#include "util/process.h"

using namespace perfdojo;
using backends::BackendConfig;
using backends::Measurement;
using testing::program_of;
using testing::quick;
using testing::scaled;
using testing::transformed;

namespace {

// The widest vector x86 backend this machine runs, else the last one tried (unavailable).
std::unique_ptr<backends::Backend> vector_backend() {
  std::unique_ptr<backends::Backend> b;
  for (const char* n : {"x86_avx512", "x86_avx2"}) {
    b = backends::make_backend(n);
    if (b->available().ok) break;
  }
  return b;
}

namespace fs = std::filesystem;

// Declares `var`, the backend made by make_backend(args...), and ends the test case as skipped
// when this machine cannot run it (no such CPU features, no C compiler).
#define BACKEND_OR_SKIP(var, ...)                 \
  auto var = backends::make_backend(__VA_ARGS__); \
  REQUIRE(var != nullptr);                        \
  if (!var->available().ok)                       \
  PERFDOJO_SKIP(var->name() << " cannot run on this machine: " << var->available().why)

void check_matches(backends::Backend& b, const ir::Program& p, const std::string& what,
                   uint64_t seed = 0) {
  Measurement m = b.measure(p, quick(seed));
  CHECK_MESSAGE(m.ok(), what << " on " << b.name() << ": " << m.error.value_or(""));
  CHECK_MESSAGE(m.verified, what << " on " << b.name() << " was not verified");
  CHECK(m.median_s > 0);
}

// Up to `steps` uniformly drawn legal moves applied to `p`; the trace as text.
std::string random_walk(ir::Program& p, const transforms::Target& target, std::mt19937_64& rng,
                        int steps) {
  std::string trace;
  for (int step = 0; step < steps; ++step) {
    auto legal = transforms::legal_actions(p, target);
    if (legal.empty()) break;
    auto a = legal[std::uniform_int_distribution<size_t>(0, legal.size() - 1)(rng)];
    trace += transforms::print_action(a) + "; ";
    p = transforms::apply(p, a, target).value();
  }
  return trace;
}

// check_matches on AVX-512 and on AVX2, each skipped (and said) where the CPU lacks it.
// check_matches on each vector ISA this CPU runs; how many that was (the caller skips, honestly,
// when none: a test with no assertion must not pass).
int check_matches_on_vector_isas(const char* text) {
  int checked = 0;
  for (const char* isa : {"x86_avx512", "x86_avx2"}) {
    auto b = backends::make_backend(isa);
    REQUIRE(b != nullptr);
    if (!b->available().ok) {
      MESSAGE(isa << " cannot run here: not checked on it");
      continue;
    }
    check_matches(*b, program_of(text), isa);
    ++checked;
  }
  return checked;
}

// A fresh directory under the temporary folder, removed at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "perfdojo-test-XXXXXX").string();
    std::vector<char> buf(t.begin(), t.end());
    buf.push_back('\0');
    REQUIRE(mkdtemp(buf.data()) != nullptr);
    path = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const char* kSmall = "input x: f32[64]\noutput y: f32[64]\n\n64 y[{0}] = x[{0}] * 2 + 1\n";
// Declares `crashme`, which the test hooks below key on.
const char* kCrashMe =
    "input x: f32[64]\noutput crashme: f32[64]\n\n64 crashme[{0}] = x[{0}] + 1\n";

}  // namespace

// Every kernel as written on the native vector ISA; the scalar and AVX2 builds share the suite
// (even and odd kernels: what differs between them is the compiler's flags, not our code).
TEST_CASE("the suite's even-numbered kernels at small size match the interpreter on x86_64" *
          doctest::test_suite("hw slow")) {
  BACKEND_OR_SKIP(b, "x86_64");
  for (const auto& name : testing::suite_kernel_share(0, 2)) check_matches(*b, scaled(name), name);
}

TEST_CASE("every suite kernel at small size matches the interpreter on x86_avx512" *
          doctest::test_suite("hw slow")) {
  BACKEND_OR_SKIP(b, "x86_avx512");
  for (const auto& name : testing::suite_kernel_names()) check_matches(*b, scaled(name), name);
}

TEST_CASE(
    "the suite's odd-numbered kernels (all where AVX-512 is missing) at small size match the "
    "interpreter on x86_avx2" *
    doctest::test_suite("hw slow")) {
  BACKEND_OR_SKIP(b, "x86_avx2");
  auto wide = backends::make_backend("x86_avx512");
  const bool native = !wide || !wide->available().ok;  // then AVX2 is the widest: every kernel
  for (const auto& name :
       native ? testing::suite_kernel_names() : testing::suite_kernel_share(1, 2))
    check_matches(*b, scaled(name), name);
}

TEST_CASE(
    "AVX-512 code for every suite kernel, vectorised where possible, compiles on any x86 machine" *
    doctest::test_suite("hw")) {
  // Where the CPU lacks AVX-512 the code cannot run, but it must still compile: the printer's
  // vector code for 16 lanes is exercised here even on AVX2-only machines.
  if (backends::find_executable("cc").empty()) PERFDOJO_SKIP("no C compiler (cc) on PATH");
  TempDir dir;
  auto flags = backends::x86_compile_flags(backends::X86Isa::kAvx512);
  for (const auto& name :
       {"softmax", "layernorm", "matmul-256", "rowsum", "maxpool", "bias-gelu"}) {
    ir::Program p = scaled(name);
    // Vectorise the innermost scope of the first nest when legal (16 lanes, tiling if needed).
    const ir::Node* n = p.body[0].get();
    transforms::Path path = {0};
    while (!n->body.empty() && n->body[0]->is_scope) {
      n = n->body[0].get();
      path.push_back(0);
    }
    transforms::Action a{transforms::Kind::kVectorize, path, "", "", 16};
    auto t = transforms::apply(p, a, *transforms::target_by_name("x86_avx512"));
    if (t.ok()) p = t.value();
    auto g = backends::x86_generate_c(backends::X86Isa::kAvx512, p);
    auto r = backends::compile_shared_object("cc", flags, g.source, dir.path);
    CHECK_MESSAGE(!r.error, name << ": " << r.error.value_or(""));
  }
}

// docs/ir.md, "Narrow types": bf16 and f16 kept as their bits and converted by the printed
// helpers, i8 and u8 saturated, bit for bit what the interpreter computes: rounding ties, f16
// overflow to infinity, subnormals of both, saturation.
TEST_CASE("narrow types: the generated code widens and narrows exactly as the interpreter" *
          doctest::test_suite("hw")) {
  BACKEND_OR_SKIP(b, "x86_64");
  const char* conversions =
      "N = 4096\ninput big: f32[N] in [-70000, 70000]\ninput tiny: f32[N] in [-1e-6, 1e-6]\n"
      "input mid: f32[N]\noutput hb: bf16[N]\noutput hh: f16[N]\noutput th: f16[N]\n"
      "output tb: bf16[N]\noutput i: i8[N]\noutput u: u8[N]\noutput back: f32[N]\n\n"
      "N hb[{0}] = big[{0}] * 3.1\n"
      "N hh[{0}] = big[{0}]\n"
      "N th[{0}] = tiny[{0}] * 0.5\n"
      "N tb[{0}] = mid[{0}] * 1e-38\n"
      "N i[{0}] = i32(big[{0}] * 0.01)\n"
      "N u[{0}] = i32(big[{0}] * 0.01)\n"
      "N back[{0}] = hh[{0}] + th[{0}] + tb[{0}] + hb[{0}]\n";
  // A bf16 GEMM with f32 accumulation stored as bf16, a u8 x i8 dot product in i32 dequantised
  // to f32, a bf16 reduction into bf16 (every partial sum rounded), and a hand-written :vec
  // scope over bf16, which the printer keeps scalar.
  const char* kernels[] = {
      "M = 8\nN = 16\nK = 32\ninput A: bf16[M, K]\ninput B: bf16[K, N]\ntemp acc: f32[M, N] = 0\n"
      "output C: bf16[M, N]\n\nM N K acc[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n"
      "M N C[{0},{1}] = acc[{0},{1}]\n",
      "M = 4\nN = 16\nK = 64\ninput X: u8[M, K]\ninput W: i8[N, K]\ninput s: f32[N]\n"
      "temp acc: i32[M, N] = 0\noutput Y: f32[M, N]\n\n"
      "M N K acc[{0},{1}] += X[{0},{2}] * W[{1},{2}]\nM N Y[{0},{1}] = f32(acc[{0},{1}]) * "
      "s[{1}]\n",
      "N = 256\ninput x: bf16[N] in [0, 4]\noutput s: bf16[1] = 0\n\nN s[0] += x[{0}]\n",
      "N = 64\ninput x: bf16[N]\noutput y: bf16[N]\noutput z: f16[N]\n\n"
      "64:vec y[{0}] = x[{0}] * 3 + 1\n64:vec z[{0}] = x[{0}]\n",
  };
  std::vector<std::string> all = {conversions};
  all.insert(all.end(), std::begin(kernels), std::end(kernels));
  for (const auto& text : all) {
    const ir::Program p = program_of(text);
    Measurement m = b->measure(p, quick());
    CHECK_MESSAGE(m.ok(), m.error.value_or(""), "\n", text);
    CHECK_MESSAGE(m.verified, text);
    // Scalar code keeps the IR's order: bit for bit (a :vec scope may be checked to a bound).
    if (text.find(":vec") == std::string::npos)
      CHECK_MESSAGE(m.verification == "exact", m.verification, "\n", text);
  }
  // The vector ISAs print the same scalar code for them (their :vec scopes stay loops).
  CHECK(check_matches_on_vector_isas(kernels[3]) >= 0);

  // Random legal trajectories of the GEMM and the quantised product (narrow temporaries, tiles,
  // unrolled and parallel scopes), compiled for the widest ISA here and checked as above.
  std::unique_ptr<backends::Backend> wide;
  for (const char* n : {"x86_avx512", "x86_avx2", "x86_64"})
    if ((wide = backends::make_backend(n))->available().ok) break;
  const auto target = *transforms::target_by_name(wide->name());
  std::mt19937_64 rng(11);
  for (int k = 0; k < 2; ++k)
    for (int t = 0; t < 4; ++t) {
      ir::Program p = program_of(kernels[k]);
      const std::string trace = random_walk(p, target, rng, 12);
      check_matches(*wide, p, std::string(k ? "int8 linear" : "bf16 GEMM") + " after " + trace,
                    rng() % 5);
    }
}

// transforms/dot_product.h: a :vec scope of 4-term u8 x i8 dot products is one vpdpbusd per
// register where the CPU has VNNI (integer sums: bit for bit), a loop with the reason where not;
// the instruction's code compiles on any x86 machine (a target attribute on the kernel).
TEST_CASE("u8 x i8 dot products print as vpdpbusd where the CPU has VNNI, bit for bit" *
          doctest::test_suite("hw")) {
  if (backends::find_executable("cc").empty()) PERFDOJO_SKIP("no C compiler (cc) on PATH");
  const char* gemm =
      "M = 8\nN = 48\nK = 64\nKB = 16\ninput A: u8[M, K]\ninput B4: i8[KB, N, 4]\n"
      "output C: i32[M, N] = 5\n\nM N KB 4 C[{0},{1}] += A[{0},{2}*4+{3}] * B4[{2},{1},{3}]\n";
  const auto target = *transforms::target_by_name("x86_avx512");
  auto with = [&](const char* moves) {
    auto trace = transforms::parse_trace(moves);
    REQUIRE_MESSAGE(trace.ok(), trace.error_text());
    auto r = transforms::replay(program_of(gemm), trace.value(), target);
    REQUIRE_MESSAGE(r.ok(), r.error_text());
    return r.value();
  };
  // 16 lanes; 8 lanes (tiled); 16 lanes with the rows unrolled around them.
  const std::vector<ir::Program> dots = {
      with("swap_scopes 0.0\ndot_product 0.0.0 16\n"),
      with("swap_scopes 0.0\ndot_product 0.0.0 8\n"),
      with("swap_scopes 0.0\ndot_product 0.0.0 16\nunroll 0.0.0 3\n"),
  };
  TempDir dir;
  for (size_t k = 0; k < dots.size(); ++k) {
    const ir::Program& p = dots[k];
    backends::CodegenOptions co;
    co.vnni_bytes = 64;
    auto g = backends::generate_c(p, co);
    CHECK(g.source.find("_dpbusd_epi32(") != std::string::npos);
    CHECK(g.exact);
    auto r = backends::compile_shared_object(
        "cc", backends::x86_compile_flags(backends::X86Isa::kAvx2), g.source, dir.path);
    CHECK_MESSAGE(!r.error, r.error.value_or(""), "\n", g.source);
    co.vnni_bytes = 32;  // AVX-VNNI: the 256-bit form only
    g = backends::generate_c(p, co);
    CHECK((g.source.find("_mm256_dpbusd_avx_epi32(") != std::string::npos) == (k == 1));
    co.vnni_bytes = 0;
    g = backends::generate_c(p, co);
    CHECK(g.source.find("_dpbusd_") == std::string::npos);
    CHECK(g.source.find("which this target lacks") != std::string::npos);
  }
  // Where the CPU has no VNNI the backend prints loops (PERFDOJO_HIDE_CPU_FEATURES hides it),
  // and they compute the same.
  BACKEND_OR_SKIP(b, "x86_avx512");
  {
    setenv("PERFDOJO_HIDE_CPU_FEATURES", "avx512vnni,avxvnni", 1);
    auto hidden = backends::make_backend("x86_avx512");
    Measurement m = hidden->measure(dots[0], quick());
    unsetenv("PERFDOJO_HIDE_CPU_FEATURES");
    CHECK_MESSAGE(m.verified, m.error.value_or(""));
    const bool printed =
        backends::x86_generate_c(backends::X86Isa::kAvx512, dots[0]).source.find("dpbusd") !=
        std::string::npos;
    CHECK(printed == backends::cpu_has("avx512vnni"));
  }
  if (!backends::cpu_has("avx512vnni"))
    PERFDOJO_SKIP("this CPU has no AVX-512 VNNI: vpdpbusd compiled, not run");
  for (const auto& p : dots) {
    Measurement m = b->measure(p, quick());
    CHECK_MESSAGE(m.verified, m.error.value_or(""));
    CHECK(m.verification == "exact");
  }
  // Random legal moves after the dot products (tiles, unrolls, temporaries, parallel scopes),
  // printed again and checked bit for bit.
  std::mt19937_64 rng(5);
  for (int t = 0; t < 4; ++t) {
    ir::Program p = dots[t % dots.size()];
    const std::string trace = random_walk(p, target, rng, 8);
    check_matches(*b, p, "the dot products after " + trace, rng() % 5);
  }
}

// transforms/widen_buffer.h: the sketch packs a bf16 GEMM's panels widened to f32, so the tile
// is the f32 one; a vector statement reads bf16 as widened vectors or broadcasts; every value
// as the interpreter's.
TEST_CASE(
    "bf16 and i32 loads widen lane by lane in vector code, and the sketched bf16 GEMM is exact" *
    doctest::test_suite("hw")) {
  const ir::Program p = program_of(
      "M = 64\nN = 64\nK = 96\ninput A: bf16[M, K]\ninput B: bf16[K, N]\n"
      "temp acc: f32[M, N] = 0\noutput C: bf16[M, N]\n\n"
      "M N K acc[{0},{1}] += A[{0},{2}] * B[{2},{1}]\nM N C[{0},{1}] = acc[{0},{1}]\n");
  const auto target = *transforms::target_by_name("x86_avx512");
  const auto e = transforms::sketch_program(p, target, 0);
  // (transforms_test checks the sketch widens both panels)
  const std::string c = backends::x86_generate_c(backends::X86Isa::kAvx512, e.program).source;
  CHECK(c.find("no vector form") == std::string::npos);          // the tile is vector code
  CHECK(c.find("_splat(pd_bf16_to_f32(") == std::string::npos);  // no narrow broadcast left
  CHECK(c.find("stay scalar") == std::string::npos);
  BACKEND_OR_SKIP(b, "x86_avx512");
  Measurement m = b->measure(e.program, quick());
  CHECK_MESSAGE(m.verified, m.error.value_or(""));
  CHECK(m.verification == "exact");
  // A broadcast bf16 operand and a widened vector one in one statement.
  const ir::Program axpy = program_of(
      "N = 64\ninput a: bf16[1]\ninput x: bf16[N]\noutput y: f32[N] = 1\n\n"
      "64:vec y[{0}] += a[0] * x[{0}]\n");
  const std::string ca = backends::x86_generate_c(backends::X86Isa::kAvx512, axpy).source;
  CHECK(ca.find("_splat(pd_bf16_to_f32(a[0]))") != std::string::npos);
  CHECK(ca.find("_ldbf16(&x[") != std::string::npos);
  m = b->measure(axpy, quick());
  CHECK_MESSAGE(m.verified, m.error.value_or(""));
  // A dequantisation: i32 elements converted lane by lane (rounded as the cast rounds, values
  // past 2^24 included) or broadcast, bit for bit.
  const ir::Program deq = program_of(
      "M = 8\nN = 64\ninput acc: i32[M, N] in [-100000000, 100000000]\ninput s: f32[N]\n"
      "input z: i32[M]\noutput Y: f32[M, N]\noutput Z: f32[M, N]\n\n"
      "M 64:vec Y[{0},{1}] = f32(acc[{0},{1}]) * s[{1}] + 1\n"
      "M 64:vec Z[{0},{1}] = f32(z[{0}]) * s[{1}]\n");
  const std::string cd = backends::x86_generate_c(backends::X86Isa::kAvx512, deq).source;
  CHECK(cd.find("_cvti32(&acc") != std::string::npos);
  CHECK(cd.find("_splat((float)z[") != std::string::npos);
  m = b->measure(deq, quick());
  CHECK_MESSAGE(m.verified, m.error.value_or(""));
  CHECK(m.verification == "exact");
}

TEST_CASE("GCC is told not to unroll-and-jam, and clang gets no flag it refuses" *
          doctest::test_suite("hw")) {
  // Blocking a loop is a move (tile_scope, unroll): GCC's -O3 unroll-and-jam would add one the
  // cost model never sees (it halved the cold read of a vectorised sum over a sequence).
  auto has = [](const std::vector<std::string>& flags) {
    return std::find(flags.begin(), flags.end(), "-fno-loop-unroll-and-jam") != flags.end();
  };
  int tried = 0;
  for (const char* compiler : {"gcc", "clang"}) {
    if (backends::find_executable(compiler).empty()) continue;
    ++tried;
    const bool clang = backends::compiler_version(compiler).find("clang") != std::string::npos;
    CHECK_MESSAGE(clang == (std::string(compiler) == "clang"),
                  backends::compiler_version(compiler));
    for (auto isa : {backends::X86Isa::kAvx512, backends::X86Isa::kAvx2}) {
      const auto flags = backends::x86_compile_flags(isa, compiler);
      CHECK_MESSAGE(has(flags) == !clang, compiler);
      TempDir dir;
      auto r = backends::compile_shared_object(compiler, flags, "void f(float* x) { x[0] += 1; }\n",
                                               dir.path);
      if (clang)  // clang links -fopenmp against libomp, which a machine may lack: only no refusal
        CHECK_MESSAGE(r.error.value_or("").find("unknown argument") == std::string::npos,
                      r.error.value_or(""));
      else
        CHECK_MESSAGE(!r.error, compiler << ": " << r.error.value_or(""));
    }
  }
  if (tried == 0) PERFDOJO_SKIP("neither gcc nor clang on PATH");
}

TEST_CASE(
    "the micro-kernel sketch's code compiles for AVX-512 and AVX2 anywhere and matches the "
    "interpreter where it runs" *
    doctest::test_suite("hw slow")) {
  if (backends::find_executable("cc").empty()) PERFDOJO_SKIP("no C compiler (cc) on PATH");
  const char* kernels[] = {
      // the default blocks with two of each
      "M = 128\nN = 64\nK = 512\ninput A: f32[M, K]\ninput B: f32[K, N]\noutput C: f32[M, N] = "
      "0\n\n"
      "M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n",
      // remainders on every side
      "M = 21\nN = 45\nK = 30\ninput A: f32[M, K]\ninput B: f32[K, N]\noutput C: f32[M, N] = 0\n\n"
      "M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n",
      // a convolution: batch scopes outside, kh and kw inside the tile (transposed: output
      // channels as vectors, output columns 16 + 4 broadcast)
      "C = 4\nK = 16\ninput x: f32[1, C, 8, 22]\ninput w: f32[K, C, 3, 3]\noutput y: f32[1, K, 6, "
      "20] = 0\n\n"
      "1 K 6 20 C 3 3 y[{0},{1},{2},{3}] += x[{0},{4},{2}+{5},{3}+{6}] * w[{1},{4},{5},{6}]\n"};
  TempDir dir;
  std::string skipped;
  for (auto isa : {backends::X86Isa::kAvx512, backends::X86Isa::kAvx2}) {
    const char* name = backends::x86_isa_name(isa);
    const auto target = *transforms::target_by_name(name);
    auto b = backends::make_backend(name);
    for (const char* text : kernels) {
      auto p = ir::load_program(text, "sketch.pdj");
      REQUIRE_MESSAGE(p.ok(), p.error_text());
      const auto nests = transforms::gemm_nests(*p);
      REQUIRE(nests.size() == 1);
      const auto cands = transforms::microkernel_candidates(nests[0], target);
      REQUIRE_FALSE(cands.empty());
      // The first candidate, and the first transposed one (every kernel here has one).
      std::vector<transforms::MicrokernelParams> tried = {cands[0]};
      for (const auto& c : cands)
        if (c.transposed && !cands[0].transposed) {
          tried.push_back(c);
          break;
        }
      CHECK(tried.size() + cands[0].transposed == 2);
      for (const auto& m : tried) {
        auto e = transforms::expand_microkernel_fitted(*p, nests[0].path, m, target);
        REQUIRE_MESSAGE(e.ok(), e.error_text());
        auto g = backends::x86_generate_c(isa, e->program);
        auto r = backends::compile_shared_object("cc", backends::x86_compile_flags(isa), g.source,
                                                 dir.path, backends::x86_link_libraries());
        CHECK_MESSAGE(!r.error, name << ": " << r.error.value_or(""));
        if (b->available().ok)
          check_matches(*b, e->program,
                        std::string("sketch ") + transforms::print_params(m) + " on " + text);
        else if (skipped.find(name) == std::string::npos)
          skipped += std::string(skipped.empty() ? "" : "; ") + name + ": " + b->available().why;
      }
    }
  }
  if (!skipped.empty()) PERFDOJO_SKIP("compiled for both, ran where the CPU can: " << skipped);
}

TEST_CASE("transformed programs still match the interpreter" * doctest::test_suite("hw slow")) {
  // Runs on every backend this machine has; ends as skipped (after checking the others) when
  // one of the three cannot run here.
  std::string unavailable;
  for (const char* backend : {"x86_avx512", "x86_avx2", "x86_64"}) {
    auto b = backends::make_backend(backend);
    REQUIRE(b != nullptr);
    if (!b->available().ok) {
      unavailable +=
          std::string(unavailable.empty() ? "" : "; ") + backend + ": " + b->available().why;
      continue;
    }
    CAPTURE(backend);
    // matmul (M 8, N 16, K 8): K moved out, N vectorised.
    check_matches(*b, transformed(scaled("matmul-256"), "swap_scopes 0.0\nvectorize 0.0.0 16\n"),
                  "matmul vectorised");
    // The brief's shape on a 32^3 matmul: 32-blocks, K outward, register temporary, vectors,
    // unrolling.
    ir::Program mm32 = program_of(
        "M = 32\nN = 32\nK = 32\ninput A: f32[M, K]\ninput B: f32[K, N]\noutput C: f32[M, N] = "
        "0\n\nM N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n");
    check_matches(
        *b,
        transformed(mm32,
                    "tile_scope 0 8\nswap_scopes 0.0.0\nswap_scopes 0.0\ncreate_temporary 0 C\n"
                    "vectorize 0.0.0 16\nunroll 0.0.0 2\nunroll 0.0 8\n"
                    "vectorize 0.1.0.0 16\nunroll 0.1.0.0 2\nunroll 0.1.0 8\n"
                    "vectorize 0.2.0 16\nunroll 0.2.0 2\nunroll 0.2 8\n"),
        "matmul with a register tile");
    // Row sums: a reduction over vector lanes.
    check_matches(*b, transformed(scaled("rowsum"), "vectorize 0.0 16\n"), "rowsum vectorised");
    check_matches(*b, transformed(scaled("global-sum"), "vectorize 0 16\n"),
                  "global sum vectorised");
    check_matches(
        *b,
        transformed(scaled("softmax"), "vectorize 0.0 16\nvectorize 0.1 16\nvectorize 1.1 16\n"),
        "softmax vectorised");
    check_matches(*b, transformed(scaled("rowsum"), "tile_scope 0.0 8\nvectorize 0.0.0 8\n"),
                  "rowsum tiled and vectorised");
    // Threads and unrolling.
    check_matches(*b, transformed(scaled("layernorm"), "parallelize 0\nunroll 0.0 4\n"),
                  "layernorm parallel and unrolled");
    check_matches(*b, transformed(scaled("matmul-256"), "parallelize 0\nunroll 0.0.0 8\n"),
                  "matmul parallel and unrolled");
    check_matches(*b, transformed(scaled("bias-relu"), "parallelize 0\nvectorize 0.0 16\n"),
                  "bias-relu parallel and vectorised");
    check_matches(*b, transformed(scaled("maxpool"), "parallelize 0.0\nunroll 0.0.0.0.0 2\n"),
                  "maxpool parallel and unrolled");
  }
  if (!unavailable.empty()) PERFDOJO_SKIP("not run on " << unavailable);
}

TEST_CASE(
    "iterator values, masks from them and sin/cos compile, vectorised and not, and match the "
    "interpreter" *
    doctest::test_suite("hw")) {
  std::unique_ptr<backends::Backend> b;
  for (const char* n : {"x86_avx512", "x86_avx2", "x86_64"}) {
    b = backends::make_backend(n);
    if (b->available().ok) break;
  }
  if (!b->available().ok) PERFDOJO_SKIP("no x86 backend runs here: " << b->available().why);
  const auto target = *transforms::target_by_name(b->name());
  const std::string text =
      "N = 64\ninput x: f32[N, N]\noutput y: f32[N, N]\noutput z: f64[N, N]\n"
      "output c: f32[N] = inf\noutput w: f32[N, N]\n\n"
      "N N y[{0},{1}] = {1} <= {0} ? x[{0},{1}] * ({1}+1) : -inf\n"
      "| | z[{0},{1}] = f64(x[{0},{1}]) + sin({0}*N+{1}) - cos({1} * 0.25)\n"
      "| | c[{0}] = min(x[{0},{1}] > 0.5 ? {1} : N)\n"
      "| | w[{0},{1}] = {0}-{1} < 5 ? x[{0},{1}] - ({0}-{1}) * 0.5 + {1}*3 : 0\n";  // strides -1, 3
  const ir::Program p = program_of(text);
  check_matches(*b, p, "as written");
  // The widths the backend's target vectorises this mix of f32 and f64 at: AVX-512 16 and 8,
  // AVX2 8 (a Zen 3 has no AVX-512), scalar x86-64 none.
  const std::string name = b->name();
  const std::vector<std::string> widths = name == "x86_avx512" ? std::vector<std::string>{"16", "8"}
                                          : name == "x86_avx2" ? std::vector<std::string>{"8"}
                                                               : std::vector<std::string>{};
  std::vector<std::string> moves = {"tile_scope 0.0 16"};
  for (const auto& w : widths) moves.push_back("vectorize 0.0 " + w);
  for (const auto& actions : moves) {
    auto q = transforms::apply(p, transforms::parse_action(actions).value(), target);
    REQUIRE_MESSAGE(q.ok(), actions << " on " << name);
    check_matches(*b, q.value(), actions);
  }
  if (widths.empty()) return;
  // Vectorised after tiling: the lanes' iota starts at the tile's first element.
  auto t =
      transforms::apply(p, transforms::parse_action("tile_scope 0.0 16").value(), target).value();
  auto v = transforms::apply(t, transforms::parse_action("vectorize 0.0.0 " + widths[0]).value(),
                             target);
  REQUIRE_MESSAGE(v.ok(), "vectorize 0.0.0 " << widths[0] << " on " << name);
  check_matches(*b, v.value(), "tiled and vectorised");
}

TEST_CASE(
    "a register tile of vector partial sums across the k loop compiles and matches the "
    "interpreter" *
    doctest::test_suite("hw")) {
  std::unique_ptr<backends::Backend> b = vector_backend();
  if (!b->available().ok) PERFDOJO_SKIP("no vector x86 backend runs here: " << b->available().why);
  // A 4-row GEMV: 2 rows x 4 batches of partial sums (codegen_c_test has the source's form),
  // and a max over the lanes with 2 x 2 copies.
  check_matches(*b,
                program_of("input W: f32[6, 128]\ninput x: f32[4, 128]\noutput y: f32[4, 6] = 0\n\n"
                           "3 16 2:unroll 4:unroll 8:vec y[{3},{0}*2+{2}] += "
                           "W[{0}*2+{2},{1}*8+{4}] * x[{3},{1}*8+{4}]\n"),
                "2 x 4 tile of sums");
  check_matches(
      *b,
      program_of(
          "input x: f32[4, 4, 64]\noutput y: f32[4, 4] = -inf\n\n"
          "2 8 2:unroll 4:unroll 8:vec y[{0}*2+{2},{3}] = max(x[{0}*2+{2},{3},{1}*8+{4}])\n"),
      "2 x 4 tile of maxima");
}

TEST_CASE("streamed stores compile and match the interpreter, aligned or not, parallel or not" *
          doctest::test_suite("hw")) {
  std::unique_ptr<backends::Backend> b = vector_backend();
  if (!b->available().ok) PERFDOJO_SKIP("no vector x86 backend runs here: " << b->available().why);
  const auto target = *transforms::target_by_name(b->name());
  // y's rows are 100 floats: most rows start off the 64-byte boundary (plain stores there).
  const ir::Program p = program_of(
      "input x: f32[8, 100]\noutput y: f32[8, 100]\noutput d: f64[8, 96]\n\n"
      "8 100 y[{0},{1}] = x[{0},{1}] * 2 + {1}\n"
      "8:par 96 d[{0},{1}] = f64(x[{0},{1}]) - 1\n");
  const std::string w = std::to_string(target.vector_widths.front());
  for (const std::string& trace :
       {"stream_stores y\nstream_stores d\nsplit_range 0.0 96\nvectorize 0.0 " + w +
            "\nvectorize 1.0 " + w + "\n",
        "split_range 0.0 96\nvectorize 0.0 " + w +
            "\nvectorize 1.0 8\nstream_stores d\nstream_stores y\n"}) {
    auto q = transforms::replay(p, transforms::parse_trace(trace).value(), target);
    REQUIRE_MESSAGE(q.ok(), trace << q.error_text());
    CHECK(q->find_buffer("y")->stream);
    check_matches(*b, q.value(), trace);
  }
}

TEST_CASE(
    "bounded scopes tiled and vectorised: whole tiles as vectors, partial ones as loops, as the "
    "interpreter" *
    doctest::test_suite("hw")) {
  std::unique_ptr<backends::Backend> b = vector_backend();
  if (!b->available().ok) PERFDOJO_SKIP("no vector x86 backend runs here: " << b->available().why);
  const auto target = *transforms::target_by_name(b->name());
  // A triangle (an upper bound), a band clamped at both ends (20 below, 3 above the diagonal),
  // and a row sum over the triangle, whose one-element reduction stays a loop.
  const ir::Program p = program_of(
      "N = 40\ninput x: f32[N, N]\noutput y: f32[N, N] = 0\noutput z: f32[N, N] = 0\n"
      "output r: f32[N] = 0\n\n"
      "N N(..{0}+1) y[{0},{1}] = x[{0},{1}] * 2 + {1}\n"
      "N N({0}-20..{0}+3) z[{0},{1}] += x[{0},{1}] * x[{0},{1}] + {0}\n"
      "N N(..{0}+1) r[{0}] += x[{0},{1}]\n");
  const std::string trace =
      "tile_scope 0.0 8\nvectorize 0.0.0 8\nvectorize 1.0 8\nvectorize 2.0 8\n";
  auto replayed = transforms::replay(p, transforms::parse_trace(trace).value(), target);
  REQUIRE_MESSAGE(replayed.ok(), replayed.error_text());
  const ir::Program q = std::move(replayed).value();
  // tile_scope gave the inner scope the bounds less the tile's start.
  CHECK(ir::print_program(q).find("8(..{0}-{1}*8+1):vec y") != std::string::npos);
  const auto g = backends::x86_generate_c(
      b->name() == "x86_avx512" ? backends::X86Isa::kAvx512 : backends::X86Isa::kAvx2, q);
  CHECK(g.source.find("every lane of the bounded") != std::string::npos);
  CHECK(g.source.find("f32x8_store") != std::string::npos);
  CHECK(g.source.find("reduction into one element of r stays a loop") != std::string::npos);
  check_matches(*b, q, "tiled and vectorised bounded scopes");
  // Random walks over the bounded suite kernels, whose moves now include these.
  std::mt19937_64 rng(57);
  for (const char* name : {"trmm", "syrk-lower", "causal-attention-bounded",
                           "sliding-window-attention-bounded", "trsv-lower-bounded"}) {
    for (int t = 0; t < 3; ++t) {
      ir::Program w = scaled(name);
      const std::string trace = random_walk(w, target, rng, 12);
      check_matches(*b, w, std::string(name) + " after " + trace, rng() % 5);
    }
  }
}

TEST_CASE("random legal trajectories compile to code that matches the interpreter" *
          doctest::test_suite("hw slow")) {
  // A few seeded trajectories per kernel (PERFDOJO_X86_TRAJECTORIES raises it,
  // PERFDOJO_X86_SEED draws other ones), on the best backend this machine runs.
  int per_kernel = std::getenv("PERFDOJO_X86_TRAJECTORIES")
                       ? std::atoi(std::getenv("PERFDOJO_X86_TRAJECTORIES"))
                       : 1;
  std::unique_ptr<backends::Backend> b;
  for (const char* n : {"x86_avx512", "x86_avx2", "x86_64"}) {
    b = backends::make_backend(n);
    if (b->available().ok) break;
  }
  if (!b->available().ok) PERFDOJO_SKIP("no x86 backend runs here: " << b->available().why);
  auto target = *transforms::target_by_name(b->name());
  std::mt19937_64 rng(7 + (std::getenv("PERFDOJO_X86_SEED")
                               ? std::strtoull(std::getenv("PERFDOJO_X86_SEED"), nullptr, 10)
                               : 0));
  for (const auto& name : testing::suite_kernel_names()) {
    for (int t = 0; t < per_kernel; ++t) {
      ir::Program p = scaled(name);
      const std::string trace = random_walk(p, target, rng, 12);
      check_matches(*b, p, name + " after " + trace, rng() % 5);
    }
  }
}

TEST_CASE("a crashing kernel yields an error record and the next measurement succeeds" *
          doctest::test_suite("hw")) {
  BackendConfig c;
  c.inject = "segv:crashme";  // test hook: crash programs that declare `crashme`
  BACKEND_OR_SKIP(b, "x86_64", c);
  Measurement before = b->measure(program_of(kSmall), quick());
  REQUIRE_MESSAGE(before.ok(), before.error.value_or(""));
  Measurement crash = b->measure(program_of(kCrashMe), quick());
  REQUIRE_FALSE(crash.ok());
  CHECK_MESSAGE(crash.error->find("crashed: signal 11") != std::string::npos, *crash.error);
  Measurement after = b->measure(program_of(kSmall), quick(1));
  CHECK_MESSAGE(after.ok(), after.error.value_or(""));
  CHECK(after.verified);
}

TEST_CASE("a hanging kernel is killed within its timeout and the backend goes on" *
          doctest::test_suite("hw")) {
  BackendConfig c;
  c.inject = "hang:crashme";
  BACKEND_OR_SKIP(b, "x86_64", c);
  auto o = quick();
  o.timeout_s = 0.5;
  auto t0 = std::chrono::steady_clock::now();
  Measurement hang = b->measure(program_of(kCrashMe), o);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(hang.ok());
  CHECK_MESSAGE(hang.error->find("timed out") != std::string::npos, *hang.error);
  CHECK(took < 0.5 + 5.0);  // the timeout plus compiling, never the hang
  Measurement after = b->measure(program_of(kSmall), quick());
  CHECK_MESSAGE(after.ok(), after.error.value_or(""));
}

TEST_CASE("a compiler that hangs is killed at the compile time limit with what it started" *
          doctest::test_suite("hw slow")) {
  TempDir dir;
  // A "compiler" that never finishes and holds the output pipe through a child process.
  std::string cc = dir.path + "/hanging-cc";
  {
    std::ofstream f(cc);
    f << "#!/bin/sh\nsleep 60 &\nsleep 60\n";
  }
  fs::permissions(cc, fs::perms::owner_all);
  auto t0 = std::chrono::steady_clock::now();
  auto r = backends::compile_shared_object(cc, {"-O2"}, "int x;\n", dir.path, {}, 0.5);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(r.error);
  CHECK_MESSAGE(r.error->find("compile timed out") != std::string::npos, *r.error);
  CHECK(took < 5.0);
  CHECK_FALSE(fs::exists(r.so_path));
  // One that closes its output first and then hangs is held to the same limit.
  std::string quiet_cc = dir.path + "/quiet-hanging-cc";
  {
    std::ofstream f(quiet_cc);
    f << "#!/bin/sh\nexec >/dev/null 2>&1\nsleep 60\n";
  }
  fs::permissions(quiet_cc, fs::perms::owner_all);
  t0 = std::chrono::steady_clock::now();
  auto q = backends::compile_shared_object(quiet_cc, {"-O2"}, "int y;\n", dir.path, {}, 0.5);
  took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(q.error);
  CHECK_MESSAGE(q.error->find("compile timed out") != std::string::npos, *q.error);
  CHECK(took < 5.0);
  // Through a backend, the same limit is an error record and the backend goes on.
  BackendConfig c;
  c.compiler = cc;
  c.compile_timeout_s = 0.5;
  BACKEND_OR_SKIP(b, "x86_64", c);
  Measurement m = b->measure(program_of(kSmall), quick());
  REQUIRE_FALSE(m.ok());
  CHECK_MESSAGE(m.error->find("timed out") != std::string::npos, *m.error);
}

TEST_CASE("a runaway allocation is stopped by the worker's memory limit" *
          doctest::test_suite("hw")) {
  BackendConfig c;
  c.inject = "alloc:crashme";
  c.worker_memory_mb = 512;
  BACKEND_OR_SKIP(b, "x86_64", c);
  Measurement m = b->measure(program_of(kCrashMe), quick());
  REQUIRE_FALSE(m.ok());
  CHECK_MESSAGE(m.error->find("crashed") != std::string::npos, *m.error);
  CHECK(b->measure(program_of(kSmall), quick()).ok());
}

TEST_CASE("a wrong result is an error, not a time" * doctest::test_suite("hw")) {
  BackendConfig c;
  c.inject = "wrong:crashme";
  BACKEND_OR_SKIP(b, "x86_64", c);
  Measurement m = b->measure(program_of(kCrashMe), quick());
  REQUIRE_FALSE(m.ok());
  CHECK_MESSAGE(m.error->find("wrong result: output 'crashme' element [0]") != std::string::npos,
                *m.error);
  CHECK_MESSAGE(m.error->find("bit for bit") != std::string::npos, *m.error);  // exact code
  CHECK(m.median_s == 0);
  auto o = quick();
  o.verify = false;
  Measurement unchecked = b->measure(program_of(kCrashMe), o);
  CHECK(unchecked.ok());
  CHECK_FALSE(unchecked.verified);
}

TEST_CASE(
    "large programs are verified against their sequential C, which catches wrong vector code" *
    doctest::test_suite("hw")) {
  // Force the large-program path on a small program: no interpreter verification at all.
  BackendConfig c;
  c.verify_interpreter_max_flops = 0;
  BACKEND_OR_SKIP(b, "x86_64", c);
  auto vec =
      transformed(scaled("softmax"), "vectorize 0.0 16\nvectorize 0.1 16\nvectorize 1.1 16\n");
  Measurement ok = b->measure(vec, quick());
  CHECK_MESSAGE(ok.ok(), ok.error.value_or(""));
  CHECK(ok.verified);
  // Without annotations there is nothing to compare: not verified, but measured.
  Measurement plain = b->measure(scaled("softmax"), quick());
  CHECK(plain.ok());
  CHECK_FALSE(plain.verified);
  c.inject = "wrong:d";  // softmax's output is d
  auto bad = backends::make_backend("x86_64", c);
  Measurement wrong = bad->measure(vec, quick());
  REQUIRE_FALSE(wrong.ok());
  CHECK_MESSAGE(wrong.error->find("wrong result") != std::string::npos, *wrong.error);
}

TEST_CASE("a cache hit returns cached=true with the stored time, and misses on another seed" *
          doctest::test_suite("hw")) {
  TempDir dir;
  BackendConfig c;
  c.cache_dir = dir.path;
  BACKEND_OR_SKIP(b, "x86_64", c);
  ir::Program p = program_of(kSmall);
  Measurement first = b->measure(p, quick());
  REQUIRE_MESSAGE(first.ok(), first.error.value_or(""));
  CHECK_FALSE(first.cached);
  auto t0 = std::chrono::steady_clock::now();
  Measurement hit = b->measure(p, quick());
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(hit.cached);
  CHECK(hit.median_s == first.median_s);
  CHECK(hit.min_s == first.min_s);
  CHECK(hit.verified == first.verified);
  CHECK(hit.flags == first.flags);
  CHECK(hit.compile_s == 0);
  CHECK(took < 0.05);
  // Another instance (a clone) shares the directory.
  CHECK(b->clone()->measure(p, quick()).cached);
  CHECK_FALSE(b->measure(p, quick(3)).cached);
}

TEST_CASE("clones are independent: a crash in one leaves the other's worker alone" *
          doctest::test_suite("hw")) {
  BackendConfig c;
  c.inject = "segv:crashme";
  BACKEND_OR_SKIP(a, "x86_64", c);
  auto b = a->clone();
  CHECK(b->name() == a->name());
  REQUIRE(a->measure(program_of(kSmall), quick()).ok());
  CHECK_FALSE(b->measure(program_of(kCrashMe), quick()).ok());
  CHECK(a->measure(program_of(kSmall), quick(2)).ok());
  CHECK(b->measure(program_of(kSmall), quick(2)).ok());
}

TEST_CASE("unavailable backends say why, and measuring on one is an error record") {
  BackendConfig c;
  c.compiler = "perfdojo-no-such-compiler";
  auto b = backends::make_backend("x86_64", c);
  REQUIRE(b);
  CHECK_FALSE(b->available().ok);
  CHECK(b->available().why.find("no C compiler") != std::string::npos);
  Measurement m = b->measure(program_of(kSmall), quick());
  REQUIRE_FALSE(m.ok());
  CHECK(m.error->find("perfdojo-no-such-compiler") != std::string::npos);
  auto avx512 = backends::make_backend("x86_avx512");
  __builtin_cpu_init();
  CHECK(avx512->available().ok == backends::cpu_has("avx512f"));
  if (!avx512->available().ok) CHECK(avx512->available().why.find("avx512f") != std::string::npos);
}

TEST_CASE("PERFDOJO_HIDE_CPU_FEATURES makes an AVX-512 machine look like an AVX2 one") {
  const char* before = std::getenv("PERFDOJO_HIDE_CPU_FEATURES");
  const std::string saved = before ? before : "";
  setenv("PERFDOJO_HIDE_CPU_FEATURES", "sse9,avx512f", 1);
  CHECK_FALSE(backends::cpu_has("avx512f"));
  auto avx512 = backends::make_backend("x86_avx512");
  CHECK_FALSE(avx512->available().ok);
  CHECK(avx512->available().why.find("avx512f") != std::string::npos);
  // Only the named features are hidden.
  __builtin_cpu_init();
  CHECK(backends::cpu_has("avx2") == static_cast<bool>(__builtin_cpu_supports("avx2")));
  setenv("PERFDOJO_HIDE_CPU_FEATURES", "", 1);
  CHECK(backends::cpu_has("avx512f") == static_cast<bool>(__builtin_cpu_supports("avx512f")));
  if (before)
    setenv("PERFDOJO_HIDE_CPU_FEATURES", saved.c_str(), 1);
  else
    unsetenv("PERFDOJO_HIDE_CPU_FEATURES");
}

TEST_CASE("the backend's threads follow the process's CPU affinity, not the core count") {
  cpu_set_t saved;
  REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  CHECK(backends::usable_cores() == 1);
  const auto caps = backends::make_backend("x86_avx2")->capabilities();
  CHECK(caps.threads == 1);
  CHECK_FALSE(caps.parallel);
  REQUIRE(sched_setaffinity(0, sizeof saved, &saved) == 0);
  CHECK(backends::usable_cores() == CPU_COUNT(&saved));
}

TEST_CASE("capabilities follow the instruction set") {
  CHECK(backends::make_backend("x86_avx512")->capabilities().vector_widths ==
        std::vector<int>{16, 8});
  CHECK(backends::make_backend("x86_avx2")->capabilities().vector_widths == std::vector<int>{8});
  CHECK(backends::make_backend("x86_64")->capabilities().vector_widths.empty());
  // Parallel scopes need a second core the process may run on (taskset -c 0: none).
  CHECK(backends::make_backend("x86_64")->capabilities().parallel ==
        (backends::usable_cores() > 1));
  CHECK_FALSE(backends::make_backend("x86_64")->deterministic());
}

TEST_CASE("measurements record the compiler flags and respect the repetition bounds" *
          doctest::test_suite("hw")) {
  BACKEND_OR_SKIP(b, "x86_64");
  auto o = quick();
  o.min_reps = 4;
  o.max_reps = 6;
  // Never satisfied: runs until the budget or max_reps. Zero is not enough: a tiny kernel's
  // batched timings can quantise to identical values, a spread of exactly 0.
  o.target_spread = -1;
  o.time_budget_s = 10;
  Measurement m = b->measure(program_of(kSmall), o);
  // This case failed twice in loaded full runs and never alone; say everything if it fails again.
  REQUIRE_MESSAGE(m.ok(), m.error.value_or(""));
  INFO("reps=" << m.reps << " min_s=" << m.min_s << " median_s=" << m.median_s
               << " spread=" << m.spread << " noisy=" << m.noisy << " compile_s=" << m.compile_s
               << " flags=" << m.flags);
  CHECK(m.reps == 6);
  CHECK(m.min_s <= m.median_s);
  CHECK(m.spread >= 0);
  CHECK(m.flags.find("-mno-avx") != std::string::npos);
  CHECK(m.compile_s > 0);
}

TEST_CASE(
    "with flush_cache every timed call starts with the kernel's data evicted: measured, "
    "compared and verified alike" *
    doctest::test_suite("hw")) {
  BACKEND_OR_SKIP(b, "x86_64");
  auto o = quick();
  o.flush_cache = true;
  o.min_reps = 3;
  o.max_reps = 5;
  const ir::Program small = program_of(kSmall);
  const ir::Program big =
      program_of("input x: f32[65536]\noutput y: f32[65536]\n\n65536 y[{0}] = x[{0}] * 2 + 1\n");
  Measurement m = b->measure(big, o);
  REQUIRE_MESSAGE(m.ok(), m.error.value_or(""));
  CHECK(m.verified);
  CHECK(m.reps >= 3);
  CHECK(m.min_s <= m.median_s);
  auto ms = b->compare({&small, &big}, o);
  REQUIRE(ms.size() == 2);
  for (const auto& x : ms) {
    REQUIRE_MESSAGE(x.ok(), x.error.value_or(""));
    CHECK(x.verified);
    CHECK(x.reps >= 3);
  }
  // The worker goes on with warm timing afterwards.
  o.flush_cache = false;
  Measurement warm = b->measure(small, o);
  CHECK_MESSAGE(warm.ok(), warm.error.value_or(""));
}

TEST_CASE("an invalid program is an error record, not a crash" * doctest::test_suite("hw")) {
  BACKEND_OR_SKIP(b, "x86_64");
  ir::Program p = program_of(kSmall);
  p.buffers[1].role = ir::Role::kInput;  // now nothing is an output and an input is written
  Measurement m = b->measure(p, quick());
  REQUIRE_FALSE(m.ok());
  CHECK(m.error->find("invalid program") != std::string::npos);
}

TEST_CASE(
    "the verification tolerance is 1e-4 for f32 and grows with the square root of long "
    "reductions") {
  using backends::x86_verification_tolerance;
  // matmul-256 sums K = 256 terms per element; rowsum 4096; global-sum 4194304.
  auto kernel = [](const std::string& name) {
    auto r = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/" + name + ".pdj");
    REQUIRE(r.ok());
    return r.value();
  };
  CHECK(x86_verification_tolerance(ir::DType::kF32, kernel("matmul-256")) == doctest::Approx(1e-4));
  CHECK(x86_verification_tolerance(ir::DType::kF32, kernel("bias-relu")) == doctest::Approx(1e-4));
  CHECK(x86_verification_tolerance(ir::DType::kF32, kernel("rowsum")) == doctest::Approx(2e-4));
  CHECK(x86_verification_tolerance(ir::DType::kF32, kernel("global-sum")) ==
        doctest::Approx(6.4e-3));
  CHECK(x86_verification_tolerance(ir::DType::kF64, kernel("rowsum")) == doctest::Approx(2e-9));
  CHECK(x86_verification_tolerance(ir::DType::kI32, kernel("rowsum")) == 0);
  // Tiling the reduction does not change its length.
  CHECK(x86_verification_tolerance(ir::DType::kF32,
                                   transformed(kernel("rowsum"), "tile_scope 0.0 16\n")) ==
        doctest::Approx(2e-4));
}

TEST_CASE("compare times programs interleaved, each verified, a failing one an error record" *
          doctest::test_suite("hw")) {
  BackendConfig c;
  c.inject = "segv:crashme";
  BACKEND_OR_SKIP(b, "x86_64", c);
  const ir::Program small = program_of(kSmall);
  const ir::Program big =
      program_of("input x: f32[65536]\noutput y: f32[65536]\n\n65536 y[{0}] = x[{0}] * 2 + 1\n");
  const ir::Program crash = program_of(kCrashMe);
  auto o = quick();
  o.min_reps = 5;
  o.max_reps = 7;
  auto ms = b->compare({&small, &crash, &big}, o);
  REQUIRE(ms.size() == 3);
  REQUIRE_MESSAGE(ms[0].ok(), ms[0].error.value_or(""));
  REQUIRE_MESSAGE(ms[2].ok(), ms[2].error.value_or(""));
  REQUIRE_FALSE(ms[1].ok());
  CHECK_MESSAGE(ms[1].error->find("signal 11") != std::string::npos, *ms[1].error);
  for (int i : {0, 2}) {
    CHECK(ms[i].verified);
    CHECK(ms[i].reps >= 5);
    CHECK(ms[i].reps <= 14);  // a noisy first attempt is repeated once
    CHECK(ms[i].min_s <= ms[i].median_s);
    CHECK_FALSE(ms[i].cached);
  }
  // 1024 times the work: slower by far more than any noise.
  CHECK(ms[2].median_s > 20 * ms[0].median_s);
  // More programs than the worker keeps loaded are refused, not timed wrongly.
  auto many = b->compare({&small, &small, &small, &small, &small}, o);
  REQUIRE(many.size() == 5);
  CHECK_FALSE(many[0].ok());
}

TEST_CASE("the cost model's compare is its measure, one by one") {
  auto b = backends::make_backend("cost_model");
  const ir::Program small = program_of(kSmall);
  auto ms = b->compare({&small, &small}, quick());
  REQUIRE(ms.size() == 2);
  REQUIRE(ms[0].ok());
  CHECK(ms[0].median_s == b->measure(small, quick()).median_s);
  CHECK(ms[1].median_s == ms[0].median_s);
}

TEST_CASE("two threads building the same source at once both get a whole shared object" *
          doctest::test_suite("hw")) {
  if (backends::find_executable("cc").empty()) PERFDOJO_SKIP("no C compiler (cc) on this machine");
  TempDir dir;
  // The optimiser compiles ahead on a second core what a measurement may be compiling too.
  const std::string source = "float twice(float x) { return 2 * x; }\n";
  for (int round = 0; round < 4; ++round) {
    const std::string src = source + "int round_" + std::to_string(round) + ";\n";
    backends::CompileResult a, b;
    std::thread other([&] { a = backends::compile_shared_object("cc", {"-O2"}, src, dir.path); });
    b = backends::compile_shared_object("cc", {"-O2"}, src, dir.path);
    other.join();
    REQUIRE_MESSAGE(!a.error, a.error.value_or(""));
    REQUIRE_MESSAGE(!b.error, b.error.value_or(""));
    CHECK(a.so_path == b.so_path);
    void* h = dlopen(a.so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE_MESSAGE(h != nullptr, dlerror());
    CHECK(dlsym(h, "twice") != nullptr);
    dlclose(h);
  }
  // No temporary file is left behind.
  for (const auto& e : fs::directory_iterator(dir.path))
    CHECK_MESSAGE(e.path().string().find(".tmp") == std::string::npos, e.path());
}

TEST_CASE("prepare compiles ahead: the measurement after it finds the build" *
          doctest::test_suite("hw")) {
  BACKEND_OR_SKIP(b, "x86_64");
  const ir::Program p = program_of(kSmall);
  b->prepare({p});
  Measurement m = b->measure(p, quick());
  REQUIRE_MESSAGE(m.ok(), m.error.value_or(""));
  CHECK(m.compile_s == 0);  // reused: nothing compiled in the measurement
  CHECK(m.verified);
}

TEST_CASE("a reference program too large to interpret is run sequentially and compared with" *
          doctest::test_suite("hw")) {
  // Force the large-program path: the transformed program carries no annotation, so without a
  // reference nothing would be compared; with the original as reference its sequential build is.
  BackendConfig c;
  c.verify_interpreter_max_flops = 0;
  BACKEND_OR_SKIP(b, "x86_64", c);
  CHECK(b->capabilities().verify_against_reference);
  const ir::Program original = scaled("softmax");
  auto tiled = transformed(original, "tile_scope 0 2\n");
  auto o = quick();
  o.reference = &original;
  Measurement ok = b->measure(tiled, o);
  CHECK_MESSAGE(ok.ok(), ok.error.value_or(""));
  CHECK(ok.verified);
  // A reference whose inputs and outputs differ cannot stand in.
  const ir::Program other = scaled("matmul-256");
  o.reference = &other;
  Measurement mismatch = b->measure(tiled, o);
  REQUIRE_FALSE(mismatch.ok());
  CHECK_MESSAGE(
      mismatch.error->find("reference program's inputs and outputs differ") != std::string::npos,
      *mismatch.error);
  // A wrong result in the measured kernel: the reference's build carries no test hook.
  c.inject = "wrong:d";
  auto bad = backends::make_backend("x86_64", c);
  o.reference = &original;
  Measurement wrong = bad->measure(tiled, o);
  REQUIRE_FALSE(wrong.ok());
  CHECK_MESSAGE(wrong.error->find("wrong result") != std::string::npos, *wrong.error);
}

TEST_CASE("vector exp matches the interpreter at -inf, in the denormal range and near overflow" *
          doctest::test_suite("hw")) {
  // Row r masks its first 4r columns with -inf; the rest run from about 88 (above libmvec's fast
  // range, still finite) down to -115 (results denormal, then 0): vectors wholly inside the
  // range, wholly below it, and mixed.
  const char* text =
      "input x: f32[4, 64]\noutput y: f32[4, 64]\n\n"
      "4 4 16:vec y[{0},{1}*16+{2}] = exp({1}*16+{2} < {0} * 4 ? -inf : 86 + x[{0},{1}*16+{2}] * 2 "
      "- "
      "({1}*16+{2}) * 3.2)\n";
  if (check_matches_on_vector_isas(text) == 0) PERFDOJO_SKIP("neither AVX-512 nor AVX2 runs here");
}

TEST_CASE("reductions whose unrolled updates rotate over register sets match the interpreter" *
          doctest::test_suite("hw")) {
  // A max (exact under any order), a sum of squares and a sum under an unroll that does not
  // divide evenly into the register sets, a dot product in f64.
  const char* text =
      "input x: f32[4, 240]\ninput z: f64[4, 96]\noutput m: f32[4] = -inf\noutput a: f32[4] = 0\n"
      "output b: f32[4] = 1\noutput c: f64[4] = 0\n\n"
      "4 15:unroll 16:vec m[{0}] = max(x[{0},{1}*16+{2}])\n"
      "| 3 5:unroll 16:vec a[{0}] += x[{0},{1}*80+{2}*16+{3}] * x[{0},{1}*80+{2}*16+{3}]\n"
      "| 5:unroll 32:vec b[{0}] += x[{0},{1}*32+{2}]\n"
      "| 12:unroll 8:vec c[{0}] += z[{0},{1}*8+{2}] * z[{0},{1}*8+{2}]\n";
  if (check_matches_on_vector_isas(text) == 0) PERFDOJO_SKIP("neither AVX-512 nor AVX2 runs here");
}

// docs/ir.md, "Indirect indices": the generated code reads through the index as the interpreter
// does (the suite's embedding kernels are among those matched above); built with
// PERFDOJO_CHECK_INDICES it stops at a value outside the declared range, naming the buffer and
// the value, where a normal build would read outside the table.
TEST_CASE("a debug build of a gather kernel stops at an index outside its range" *
          doctest::test_suite("hw")) {
  if (backends::find_executable("cc").empty()) PERFDOJO_SKIP("no C compiler (cc) on PATH");
  TempDir dir;
  const ir::Program p = testing::transformed(
      program_of("B = 2\nL = 3\nD = 8\nV = 5\ninput W: f32[V, D]\ninput idx: i32[B, L] in [0, V)\n"
                 "output out: f32[B, D] = 0\n\nB L D out[{0},{2}] += W[idx[{0},{1}],{2}]\n"),
      "vectorize 0.0.0 8", "x86_avx2");
  auto g = backends::x86_generate_c(backends::X86Isa::kPortable, p);
  const std::string driver =
      "\nint main(int argc, char** argv) {\n"
      "  static float W[40], out[16];\n"
      "  static int32_t idx[6] = {0, 4, 2, 1, 3, 0};\n"
      "  idx[4] = argc > 1 ? atoi(argv[1]) : 3;\n"
      "  kernel(W, idx, out);\n"
      "  return 0;\n"
      "}\n";
  const std::string src = dir.path + "/gather.c", exe = dir.path + "/gather";
  { std::ofstream(src) << g.source << driver; }
  auto built =
      util::run_process({"cc", "-O1", "-DPERFDOJO_CHECK_INDICES", "-o", exe, src, "-lm"}, {60});
  REQUIRE_MESSAGE(built.ok(), built.output);
  CHECK(util::run_process({exe, "4"}, {20}).ok());
  for (const char* bad : {"5", "-1"}) {
    auto r = util::run_process({exe, bad}, {20});
    CHECK_FALSE(r.ok());
    CHECK(r.output.find(std::string("perfdojo: index buffer 'idx' holds ") + bad +
                        ", outside the range [0, 5) it declares") != std::string::npos);
  }
}
