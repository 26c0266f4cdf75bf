// The generated OpenMP C of parallel schedules under ThreadSanitizer: the race detector of the
// interpreter (docs/ir.md, "Parallel scopes") proves the IR race-free; this checks the code the
// printer makes of it (each thread's own slices, the loops' shared buffers). Each schedule's C is
// compiled with clang -fsanitize=thread against LLVM's OpenMP runtime, whose Archer tool tells
// ThreadSanitizer about OpenMP's synchronisation, and run on two threads: any report fails.
// Skipped, with the reason, where clang or Archer (libomp-dev) is missing.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backends/codegen_c.h"
#include "ir/interp.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "support/scaled_kernels.h"
#include "support/skip.h"
#include "transforms/analysis.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/registry.h"
#include "util/process.h"

using namespace perfdojo;
namespace fs = std::filesystem;

namespace {

// LLVM's Archer tool for the OpenMP runtime clang links, or "" when not installed.
std::string archer_library() {
  for (int v = 20; v >= 11; --v) {
    const std::string p = "/usr/lib/llvm-" + std::to_string(v) + "/lib/libarcher.so";
    if (fs::exists(p)) return p;
  }
  return "";
}

// `p` with every nest's outermost scope that parallelize accepts made `:par`: the first in
// pre-order, one move at a time (a move may add a copy-out, shifting later paths; the scopes
// inside a :par one are refused as nested).
ir::Program parallelised(const ir::Program& p, const transforms::Target& t) {
  ir::Program cur = p;
  for (bool moved = true; moved;) {
    moved = false;
    for (const transforms::Path& at : transforms::scope_paths(cur))
      if (auto q = transforms::apply(cur, {transforms::Kind::kParallelize, at, "", "", 0}, t);
          q.ok()) {
        cur = std::move(q).value();
        moved = true;
        break;
      }
  }
  return cur;
}

// The kernel's C on two threads with a main that fills the inputs and calls it twice.
std::string program_with_main(const ir::Program& p) {
  backends::CodegenOptions o;
  o.threads = 2;
  o.native_vector_bytes = 32;
  std::string c = backends::generate_c(p, o).source;
  c += "\n#include <stdlib.h>\nint main(void) {\n  void* bufs[" +
       std::to_string(std::max<size_t>(1, backends::kernel_parameters(p).size())) + "];\n";
  int k = 0;
  for (const auto* b : backends::kernel_parameters(p)) {
    const std::string n = std::to_string(b->elements()),
                      bytes = std::to_string(ir::dtype_bytes(b->dtype));
    c += "  bufs[" + std::to_string(k) + "] = calloc(" + n + ", " + bytes + ");\n";
    if (b->role == ir::Role::kInput) {
      const std::string t = b->dtype == ir::DType::kF64   ? "double"
                            : b->dtype == ir::DType::kI32 ? "int"
                                                          : "float";
      c += "  for (long i = 0; i < " + n + "; ++i) ((" + t + "*)bufs[" + std::to_string(k) +
           "])[i] = (" + t + ")((i * 7919 % 1000) / 500.0 - 1.0);\n";
    }
    ++k;
  }
  c += "  perfdojo_entry(bufs);\n  perfdojo_entry(bufs);\n  return 0;\n}\n";
  return c;
}

}  // namespace

TEST_CASE("the generated OpenMP code of parallel schedules runs clean under ThreadSanitizer" *
          doctest::test_suite("slow")) {
  const std::string archer = archer_library();
  if (util::find_executable("clang").empty() || archer.empty()) {
    PERFDOJO_SKIP("needs clang and LLVM's OpenMP runtime with its Archer tool (libomp-dev)");
  }
  const transforms::Target target;
  std::vector<std::pair<std::string, ir::Program>> schedules;
  // Sketched GEMMs with every level of blocking, parallelised: each thread's own packed block
  // and register tile, the shared packed panels.
  transforms::MicrokernelParams m;
  m.mr = 4;
  m.nr = 16;
  m.kc = 16;
  m.mc = 8;
  auto gemm = ir::load_program(
      "M = 32\nN = 32\nK = 32\ninput A: f32[M, K]\ninput B: f32[K, N]\n"
      "output C: f32[M, N] = 0\n\nM N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n",
      "gemm.pdj");
  REQUIRE(gemm.ok());
  auto sk = transforms::expand_microkernel(*gemm, {0}, m, target);
  REQUIRE(sk.ok());
  schedules.push_back({"sketched gemm", parallelised(sk->program, target)});
  // Suite kernels: the sketch where it applies, else as written, and random legal trajectories
  // from there; each then parallelised.
  std::mt19937_64 rng(20261206);
  for (const std::string name :
       {"matmul", "softmax", "layernorm", "conv2d-3x3", "attention", "mlp"}) {
    auto p = testing::load_scaled_kernel(name);
    if (!p.ok()) continue;
    auto e = transforms::sketch_program(*p, target, 0);
    ir::Program base = e.trace.empty() ? *p : e.program;
    schedules.push_back({name, parallelised(base, target)});
    ir::Program walk = base;
    for (int s = 0; s < 12; ++s)
      if (auto a = transforms::sample_legal_action(walk, target, rng))
        walk = *transforms::apply(walk, *a, target);
    schedules.push_back({name + " after a random trajectory", parallelised(walk, target)});
  }
  const fs::path dir = fs::temp_directory_path() / ("perfdojo-tsan-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  setenv("OMP_TOOL_LIBRARIES", archer.c_str(), 1);
  setenv("TSAN_OPTIONS", "halt_on_error=1 exitcode=66 ignore_noninstrumented_modules=1", 1);
  // First the harness itself: a parallel sum into one element (what parallelize refuses) must
  // be reported, or a clean run below would prove nothing.
  {
    auto racy = ir::load_program(
        "input x: f32[4096]\noutput s: f32[1] = 0\n\n4096:par s[0] += x[{0}]\n", "racy.pdj");
    REQUIRE(racy.ok());
    const fs::path src = dir / "racy.c", exe = dir / "racy";
    std::ofstream(src) << program_with_main(*racy);
    auto cc = util::run_process(
        {"clang", "-O1", "-g", "-fsanitize=thread", "-fopenmp=libomp", "-march=native",
         "-std=gnu11", "-w", src.string(), "-o", exe.string(), "-lm"},
        {.timeout_s = 120});
    REQUIRE_MESSAGE(cc.ok(), "clang failed: " << cc.output.substr(0, 2000));
    auto run = util::run_process({exe.string()}, {.timeout_s = 120});
    CHECK(run.exit_code == 66);
    CHECK(run.output.find("ThreadSanitizer: data race") != std::string::npos);
  }
  int checked = 0;
  for (size_t i = 0; i < schedules.size(); ++i) {
    const std::string what =
        schedules[i].first;  // (plain variables: the check macros capture them)
    const ir::Program& p = schedules[i].second;
    if (transforms::parallel_scopes(p.body) == 0) continue;
    const fs::path src = dir / ("k" + std::to_string(i) + ".c"),
                   exe = dir / ("k" + std::to_string(i));
    std::ofstream(src) << program_with_main(p);
    auto cc = util::run_process(
        {"clang", "-O1", "-g", "-fsanitize=thread", "-fopenmp=libomp", "-march=native",
         "-std=gnu11", "-ffp-contract=off", "-w", src.string(), "-o", exe.string(), "-lm"},
        {.timeout_s = 120});
    REQUIRE_MESSAGE(cc.ok(), what << ": clang failed: " << cc.output.substr(0, 2000));
    auto run = util::run_process({exe.string()}, {.timeout_s = 120});
    CHECK_MESSAGE(run.ok(), what << ": ThreadSanitizer (exit " << run.exit_code << "):\n"
                                 << run.output.substr(0, 4000) << "\n"
                                 << ir::print_program(p));
    ++checked;
  }
  fs::remove_all(dir);
  MESSAGE(checked << " parallel schedules run under ThreadSanitizer");
  CHECK(checked >= 8);
}
