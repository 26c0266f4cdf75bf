// x86_matmul_bench: what the x86 backend's generated code reaches on matmul 1024^3, next to the
// machine's FMA peak and OpenBLAS, and what the backend's machinery costs (compile latency,
// measurement overhead, cache hits). Every figure is measured in this one run; compare the
// ratios, not the absolute times (the machines are shared and noisy).
//
//   build/bin/x86_matmul_bench [--quick]
//
// Programs, all from kernels/matmul-1024.pdj through transforms::replay:
//   as written        M N K C += A B, no transformation (the RL episode's starting point)
//   brief trace       tests/data/traces/matmul-brief.trace: 32^3 tiles, K outward, a 32-float
//                     register row (create_temporary), 16 lanes, the row's vectors unrolled
//   register tile     the brief's tiles and order, A and B blocks packed into local temporaries,
//                     and an R x CN block of C in registers (create_temporary; 8 x 32 = 16 zmm
//                     accumulators on AVX-512, 4 x 16 = 8 ymm on AVX2), 16 lanes, unrolled
//   micro-kernel      the fitted micro-kernel sketch's first candidate for the ISA
//   sketch            (docs/microkernel.md): kc 256 panels of B and blocks of A packed, an 8 x 32
//                     (AVX-512) or 6 x 16 (AVX2) register tile, row panels outside column
//                     panels, remainders split off
//
// No parallel variant of the register tile: create_temporary is refused inside (and parallelize
// around) a scope holding a temporary, since the IR has no thread-private storage; OpenBLAS is
// also shown with all threads for scale.
//
// OpenBLAS: cblas_sgemm on the same sizes, 1 thread and all threads. OpenBLAS picks its kernel
// when the library loads; the program re-executes itself so that OpenBLAS chooses by CPUID, and
// once more with OPENBLAS_CORETYPE set when CPUID gave a generic core on a CPU with AVX-512 or
// AVX2 (blas_reference.h), and prints the core and how it was chosen.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/x86_backend.h"
#include "blas_reference.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/registry.h"
#include "util/args.h"

using namespace perfdojo;

namespace {

using bench::now_s;

// ----- programs

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ir::Program replay(const ir::Program& p, const std::string& trace_text) {
  auto t = transforms::parse_trace(trace_text);
  if (!t.ok()) {
    std::fprintf(stderr, "bad trace: %s\n", t.error_text().c_str());
    std::exit(1);
  }
  auto r = transforms::replay(p, t.value(), transforms::Target{});
  if (!r.ok()) {
    std::fprintf(stderr, "trace refused: %s\n", r.error_text().c_str());
    std::exit(1);
  }
  return r.value();
}

// The brief's first seven steps (32^3 tiles, K outward), then the 32x32 blocks of A and B copied
// into local temporaries (packing: rows of 1024 floats are 4 KiB apart and alias in L1), then an
// R x CN register tile of C: rows tiled by R and moved inside K; when CN < 32 the columns are
// tiled by CN and that tile loop moved outside K; create_temporary caches the R x CN block; its
// three nests are vectorised (16 lanes) and unrolled.
std::string register_tile_trace(int rows, int cols) {
  std::string t =
      "tile_scope 0 32\ntile_scope 0.0.0 32\ntile_scope 0.0.0.0.0 32\n"
      "swap_scopes 0.0\nswap_scopes 0.0.0.0\nswap_scopes 0.0.0\nswap_scopes 0.0.0.0.0\n"
      "create_temporary 0.0.0 B\ncreate_temporary 0.0.0 A\nvectorize 0.0.0.0.0 16\nvectorize "
      "0.0.0.1.0 16\n";
  const std::string c = "0.0.0.2";  // the compute nest M K N inside the K block
  t += "tile_scope " + c + " " + std::to_string(rows) + "\nswap_scopes " + c + ".0\n";
  std::string s = c;  // the scope whose iteration owns one register tile
  if (cols < 32) {
    t += "tile_scope " + c + ".0.0.0 " + std::to_string(cols) + "\nswap_scopes " + c +
         ".0.0\nswap_scopes " + c + ".0\n";
    s = c + ".0";
  }
  t += "create_temporary " + s + " C\n";
  const int chunks = cols / 16;
  for (const std::string& nest : {s + ".0", s + ".1.0", s + ".2"}) {  // copy-in, compute, copy-out
    t += "vectorize " + nest + ".0 16\n";
    if (chunks > 1) t += "unroll " + nest + ".0 " + std::to_string(chunks) + "\n";
    t += "unroll " + nest + " " + std::to_string(rows) + "\n";
  }
  return t;
}

struct Row {
  std::string name;
  double gflops = 0;
  double fraction = 0;  // of the measured peak of the cores used
  std::string note;
};

void print_row(const Row& r) {
  std::printf("  %-34s %8.1f GFLOP/s  %6.1f%% of peak  %s\n", r.name.c_str(), r.gflops,
              100 * r.fraction, r.note.c_str());
}

// ----- OpenBLAS

double sgemm_gflops(int n, int threads, int reps) {
  return 2.0 * n * n * static_cast<double>(n) / bench::sgemm_seconds(n, n, n, threads, reps) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  // OpenBLAS chose its kernel when it loaded: make it its best for this CPU (see the header).
  util::choose_openblas_core(argv, "x86_matmul_bench");
  util::ArgSpec spec;
  spec.program = "x86_matmul_bench";
  spec.usage = "x86_matmul_bench [--quick]";
  spec.switch_options = {"quick"};
  util::Args args;
  if (auto e = util::parse_args(spec, argc, argv, &args); !e.empty()) {
    std::fprintf(stderr, "x86_matmul_bench: %s\n", e.c_str());
    return 2;
  }
  if (args.help) {
    std::printf("usage: %s\n", spec.usage.c_str());
    return 0;
  }
  const bool quick = args.has("quick");

  const char* isa_name = nullptr;
  for (const char* n : {"x86_avx512", "x86_avx2"}) {
    if (backends::make_backend(n)->available().ok) {
      isa_name = n;
      break;
    }
  }
  if (!isa_name) {
    std::printf("no AVX-512 or AVX2 backend available here: %s\n",
                backends::make_backend("x86_avx2")->available().why.c_str());
    return 1;
  }
  auto isa = *backends::x86_isa_by_name(isa_name);
  int threads = backends::usable_cores();
  std::printf(
      "x86_matmul_bench: backend %s, %d usable cores, matmul 1024^3 f32 (2.15 GFLOP per "
      "call)\n",
      isa_name, threads);

  double peak = bench::peak_gflops(isa == backends::X86Isa::kAvx512 ? 16 : 8);
  std::printf(
      "\nFMA peak of one core, measured (12 chains): %.1f GFLOP/s (machine.md: %.0f on the "
      "project's AVX-512 machines)\n",
      peak, backends::x86_peak_gflops_per_core(isa));

  auto base = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/matmul-1024.pdj");
  if (!base.ok()) {
    std::fprintf(stderr, "%s\n", base.error_text().c_str());
    return 1;
  }
  const double flops = backends::flop_count(*base);
  int rows = isa == backends::X86Isa::kAvx512 ? 8 : 4,
      cols = isa == backends::X86Isa::kAvx512 ? 32 : 16;
  std::string tile = register_tile_trace(rows, cols);
  struct Prog {
    std::string name;
    ir::Program p;
    bool parallel;
  };
  std::vector<Prog> progs = {
      {"as written", *base, false},
      {"brief trace",
       replay(*base, read_file(std::string(PERFDOJO_SOURCE_DIR) +
                               "/tests/data/traces/matmul-brief.trace")),
       false},
      {"register tile " + std::to_string(rows) + "x" + std::to_string(cols), replay(*base, tile),
       false},
  };
  {  // the micro-kernel sketch for this ISA (docs/microkernel.md): packed panels, register tile
    const auto target = *transforms::target_by_name(isa_name);
    const auto nest = transforms::gemm_nest_at(*base, {0});
    const auto cands = transforms::microkernel_candidates(*nest, target);
    auto e = transforms::expand_microkernel_fitted(*base, {0}, cands.front(), target);
    if (e.ok())
      progs.push_back({"micro-kernel sketch " + std::to_string(cands.front().mr) + "x" +
                           std::to_string(cands.front().nr),
                       e->program, false});
    else
      std::printf("micro-kernel sketch refused: %s\n", e.error_text().c_str());
  }

  auto backend = backends::make_backend(isa_name);
  backends::MeasureOptions o;
  o.time_budget_s = quick ? 0.3 : 1.0;
  o.timeout_s = 60;
  std::printf(
      "\nGenerated code (measure(): verified, median of warm runs; fraction of the measured peak "
      "of the cores used)\n");
  std::vector<double> compile_s;
  double tile_gflops = 0, sketch_gflops = 0;
  for (const auto& pr : progs) {
    double t0 = now_s();
    backends::Measurement m = backend->measure(pr.p, o);
    double wall = now_s() - t0;
    if (!m.ok()) {
      std::printf("  %-34s error: %s\n", pr.name.c_str(), m.error->c_str());
      continue;
    }
    compile_s.push_back(m.compile_s);
    Row r{pr.name, flops / m.median_s * 1e-9, 0, ""};
    r.fraction = r.gflops / (peak * (pr.parallel ? threads : 1));
    char note[160];
    std::snprintf(
        note, sizeof note, "(%s, spread %.1f%%, %d reps, compile %.2f s, measure() %.1f s)",
        m.verified ? "verified" : "not verified", 100 * m.spread, m.reps, m.compile_s, wall);
    r.note = note;
    print_row(r);
    if (pr.name.find("register tile") == 0) tile_gflops = r.gflops;
    if (pr.name.find("micro-kernel sketch") == 0) sketch_gflops = r.gflops;
  }

  std::printf("\nOpenBLAS cblas_sgemm (core %s, %s)\n", openblas_get_corename(),
              util::openblas_core_note());
  double blas1 = sgemm_gflops(1024, 1, quick ? 3 : 9);
  double blasn = sgemm_gflops(1024, threads, quick ? 3 : 9);
  print_row({"sgemm 1 thread", blas1, blas1 / peak, ""});
  print_row({"sgemm " + std::to_string(threads) + " threads", blasn, blasn / (peak * threads), ""});
  if (tile_gflops > 0)
    std::printf("  register tile / OpenBLAS, 1 core: %.2f\n", tile_gflops / blas1);
  if (sketch_gflops > 0)
    std::printf(
        "  micro-kernel sketch / OpenBLAS, 1 core: %.2f (timed apart; kernel_bench times them "
        "interleaved)\n",
        sketch_gflops / blas1);

  // ----- the machinery's own costs, on a tiny kernel (its run time is negligible)
  std::printf(
      "\nBackend machinery (a 4096-element kernel, so the kernel's own time is negligible)\n");
  auto tiny =
      ir::load_program("input x: f32[4096]\noutput y: f32[4096]\n\n4096 y[{0}] = x[{0}] * 2 + 1\n");
  backends::MeasureOptions fast;  // the defaults an RL environment would use
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("perfdojo-bench-cache-" + std::to_string(getpid())))
                        .string();
  backends::BackendConfig cached_config;
  cached_config.cache_dir = dir;
  auto b2 = backends::make_backend(isa_name, cached_config);
  double t0 = now_s();
  backends::Measurement first = b2->measure(*tiny, fast);
  double first_wall = now_s() - t0;
  t0 = now_s();
  backends::Measurement again = b2->measure(*tiny, fast);  // a cache hit
  double hit_wall = now_s() - t0;
  // Same program, another seed: compiled object reused, worker warm; what is left is verification
  // and the timed repetitions.
  std::vector<double> overhead;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    fast.seed = seed;
    t0 = now_s();
    backends::Measurement m = b2->measure(*tiny, fast);
    overhead.push_back(now_s() - t0);
    if (!m.ok()) std::printf("  error: %s\n", m.error->c_str());
  }
  std::sort(overhead.begin(), overhead.end());
  std::printf(
      "  first measure() (print, compile, start the worker, verify, time): %.3f s, of which "
      "compile %.3f s\n",
      first_wall, first.compile_s);
  std::sort(compile_s.begin(), compile_s.end());
  if (!compile_s.empty())
    std::printf("  compile latency of the matmul programs: %.3f s min, %.3f s max\n",
                compile_s.front(), compile_s.back());
  std::printf(
      "  measure() of an already compiled program (verify + timing to 2%% spread): %.1f ms median "
      "(kernel %.2f us)\n",
      1e3 * overhead[overhead.size() / 2], 1e6 * again.median_s);
  std::printf("  cache hit: %.1f us (cached=%s)\n", 1e6 * hit_wall,
              again.cached ? "true" : "false");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
