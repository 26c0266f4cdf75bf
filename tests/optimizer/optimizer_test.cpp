#include "optimizer/optimizer.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "backends/cost_model.h"
#include "backends/x86_backend.h"
#include "ir/check.h"
#include "ir/interp.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "optimizer/search.h"
#include "optimizer/setup.h"
#include "support/skip.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/registry.h"

using namespace perfdojo;

namespace {

const char* kSmallMatmul =
    "# 64^3 matmul\nM = 64\nN = 64\nK = 64\ninput A: f32[M, K]\ninput B: f32[K, N]\n"
    "output C: f32[M, N] = 0\n\nM N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n";

std::string portable_arch() { return "x86_64"; }

// The built-in profile: no calibration run per test (one test below covers calibration).
backends::BackendConfig quick_config() {
  backends::BackendConfig c;
  c.calibrate = false;
  return c;
}

// What a SearchRun built by hand needs, kept here because it holds references to all of it:
// the small matmul on the portable target, the cost model as its model.
struct HandRun {
  ir::Program program = ir::parse_program(kSmallMatmul, "m.pdj").value();
  transforms::Target target = *transforms::target_by_name(portable_arch());
  std::unique_ptr<backends::Backend> model = backends::make_backend("cost_model");
  const std::string arch = portable_arch();
  const backends::BackendConfig config = quick_config();
  optimizer::Progress progress;
  optimizer::detail::SearchRun run(backends::Backend& timer, optimizer::Result& res,
                                   double timeout_s) {
    return optimizer::detail::SearchRun(program, timeout_s, progress, nullptr,
                                        optimizer::Mode::kBalanced, target, arch, config, timer,
                                        *model, res, optimizer::detail::Clock::now());
  }
};

const char* kSoftmax =
    "B = 8\nN = 64\ninput s: f32[B, N]\noutput d: f32[B, N]\ntemp m: f32[B] = -inf\n"
    "temp e: f32[B, N]\ntemp a: f32[B] = 0\n\nB N m[{0}] = max(s[{0},{1}])\n"
    "| N e[{0},{1}] = exp(s[{0},{1}] - m[{0}])\n| | a[{0}] += e[{0},{1}]\n"
    "| N d[{0},{1}] = e[{0},{1}] / a[{0}]\n";

}  // namespace

TEST_CASE("modes and architectures are validated by name") {
  CHECK(optimizer::mode_by_name("aggressive") == optimizer::Mode::kAggressive);
  CHECK_FALSE(optimizer::mode_by_name("reckless"));
  auto bad = optimizer::Optimizer::make("riscv_snitch", optimizer::Mode::kBalanced);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error_text().find("unknown architecture") != std::string::npos);
  CHECK_FALSE(optimizer::settings_for(optimizer::Mode::kConservative).allow_reassociation);
}

TEST_CASE("the optimiser returns a verified kernel that computes what the original computes" *
          doctest::test_suite("hw slow")) {
  auto p = ir::load_program(kSmallMatmul, "mm.pdj");
  REQUIRE(p.ok());
  auto opt =
      optimizer::Optimizer::make(portable_arch(), optimizer::Mode::kConservative, quick_config());
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

TEST_CASE("a cancelled search still returns the best program so far" * doctest::test_suite("hw")) {
  auto p = ir::load_program(kSmallMatmul, "mm.pdj");
  auto opt =
      optimizer::Optimizer::make(portable_arch(), optimizer::Mode::kBalanced, quick_config());
  REQUIRE(opt.ok());
  std::atomic<bool> cancel{true};
  auto r = opt.value()->transform(p.value(), 60.0, {}, &cancel);
  CHECK(r.report.interrupted);
  CHECK(r.program.body.size() > 0);
  CHECK(r.report.verified);
}

TEST_CASE(
    "proposals are replayed step by step: illegal steps skipped, the rest searched and verified" *
    doctest::test_suite("hw slow")) {
  auto p = ir::load_program(kSoftmax, "softmax.pdj");
  REQUIRE(p.ok());
  auto opt =
      optimizer::Optimizer::make(portable_arch(), optimizer::Mode::kBalanced, quick_config());
  REQUIRE(opt.ok());
  auto good = transforms::parse_trace("shrink_buffer e 0\nswap_scopes 7.7\nunroll 0.0 4\n");
  auto bogus = transforms::parse_trace("swap_scopes 9\n");  // nothing legal: no proposal at all
  REQUIRE((good.ok() && bogus.ok()));
  opt.value()->add_proposals({good.value(), bogus.value()});
  auto r = opt.value()->transform(p.value(), 6.0);
  CHECK(r.report.proposals_used == 1);
  CHECK(r.report.verified);
  auto replayed = transforms::replay(p.value(), r.trace, transforms::Target{"x86_64", {}, true});
  REQUIRE_MESSAGE(replayed.ok(), replayed.error_text());
  auto inputs = ir::make_inputs(p.value(), 5);
  auto a = ir::interpret(p.value(), inputs);
  auto b = ir::interpret(r.program, inputs);
  REQUIRE((a.ok() && b.ok()));
  CHECK(ir::max_relative_error(a->at("d"), b->at("d")) < 1e-5);
}

TEST_CASE("policy-only: the proposal measured against the original, no sketch, no search" *
          doctest::test_suite("hw")) {
  auto p = ir::load_program(kSmallMatmul, "m.pdj");
  REQUIRE(p.ok());
  auto opt =
      optimizer::Optimizer::make(portable_arch(), optimizer::Mode::kBalanced, quick_config());
  REQUIRE(opt.ok());
  // A loop order with unit-stride columns innermost (what a policy might play).
  auto trace = transforms::parse_trace("swap_scopes 0.0\n");
  REQUIRE(trace.ok());
  opt.value()->add_proposals({trace.value()});
  opt.value()->set_policy_only(true);
  auto r = opt.value()->transform(p.value(), 20.0);
  CHECK(r.report.verified);
  CHECK(r.report.sketches_used == 0);  // the matmul would take the sketch otherwise
  CHECK(r.report.proposals_used == 1);
  CHECK(r.report.evaluations <= 2);  // the original and the proposal: no beam search
  // Either the proposal won the measurement or the original stayed: nothing else was tried.
  CHECK((r.trace.empty() || r.trace == trace.value()));
  CHECK(r.report.interleaved);
}

TEST_CASE("an f64 kernel's peak is half the f32 FMA peak") {
  auto f64 = ir::load_file(std::string(PERFDOJO_UNSEEN_DIR) + "/dgemm.pdj");
  auto f32 = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/matmul-256.pdj");
  REQUIRE((f64.ok() && f32.ok()));
  CHECK(optimizer::kernel_peak_gflops(f64.value(), 100, 2) == doctest::Approx(100));
  CHECK(optimizer::kernel_peak_gflops(f32.value(), 100, 2) == doctest::Approx(200));
}

TEST_CASE("an int8 GEMM is held to the VNNI peak, and without one the report says why not") {
  auto i8 = ir::load_file(std::string(PERFDOJO_UNSEEN_DIR) + "/gemm-u8i8-packed.pdj");
  auto f32 = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/matmul-256.pdj");
  REQUIRE((i8.ok() && f32.ok()));
  CHECK(optimizer::kernel_peak_gflops(i8.value(), 100, 1, 400) == doctest::Approx(400));
  CHECK(optimizer::int8_peak_note(i8.value(), 400).empty());
  // A CPU without VNNI (a Zen 3): the f32 peak, and the note naming the missing instruction.
  CHECK(optimizer::kernel_peak_gflops(i8.value(), 100, 1, 0) == doctest::Approx(100));
  CHECK(optimizer::int8_peak_note(i8.value(), 0).find("no int8 dot-product instruction") !=
        std::string::npos);
  CHECK(optimizer::int8_peak_note(f32.value(), 0).empty());
}

TEST_CASE(
    "auto times memory-bound kernels larger than half the last-level cache cold, the rest warm") {
  backends::MachineProfile prof;  // built in: 15 GB/s from memory, 223 GFLOP/s
  prof.l3_bytes = 64.0 * 1024 * 1024;
  auto load = [](const std::string& name) {
    auto p = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/" + name + ".pdj");
    REQUIRE_MESSAGE(p.ok(), p.error_text());
    return p.value();
  };
  const double peak = prof.peak_gflops_avx512;
  // rmsnorm (64 MB in and out, about a flop per byte): its time is its traffic.
  CHECK(optimizer::cold_timing(load("rmsnorm"), prof, peak));
  // layernorm (8 MB) and softmax (2 MB) stay in the last-level cache beside their neighbours.
  CHECK_FALSE(optimizer::cold_timing(load("layernorm"), prof, peak));
  CHECK_FALSE(optimizer::cold_timing(load("softmax"), prof, peak));
  prof.l3_bytes = 8.0 * 1024 * 1024;
  CHECK(optimizer::cold_timing(load("layernorm"), prof, peak));
  // matmul-1024 (12 MB, 170 flops per byte) and conv2d are compute-bound: warm however small
  // the cache.
  prof.l3_bytes = 1.0 * 1024 * 1024;
  CHECK_FALSE(optimizer::cold_timing(load("matmul-1024"), prof, peak));
  CHECK_FALSE(optimizer::cold_timing(load("conv2d-3x3"), prof, peak));
  // The setting is parsed once, by name; an unknown one is refused.
  CHECK(backends::parse_cache_flush("on") == backends::CacheFlush::kOn);
  CHECK(backends::parse_cache_flush("off") == backends::CacheFlush::kOff);
  CHECK(backends::parse_cache_flush("auto") == backends::CacheFlush::kAuto);
  CHECK_FALSE(backends::parse_cache_flush("sometimes").has_value());
  CHECK(std::string(backends::cache_flush_name(backends::CacheFlush::kOn)) == "on");
}

TEST_CASE(
    "cache_flush on: the report says every timing evicted the kernel's data, and the kernel is "
    "verified" *
    doctest::test_suite("hw slow")) {
  auto p = ir::load_program(kSoftmax, "softmax.pdj");
  REQUIRE(p.ok());
  for (const char* how : {"on", "off"}) {
    backends::BackendConfig c = quick_config();
    c.threads = 1;
    c.cache_flush = *backends::parse_cache_flush(how);
    auto opt = optimizer::Optimizer::make(portable_arch(), optimizer::Mode::kBalanced, c);
    REQUIRE(opt.ok());
    auto r = opt.value()->transform(p.value(), 4.0);
    CAPTURE(how);
    CHECK(r.report.cache_flushed == (std::string(how) == "on"));
    CHECK(r.report.verified);
    CHECK(r.report.baseline_s > 0);
    CHECK(r.report.final_s > 0);
  }
}

TEST_CASE("one thread means no parallel scopes, and the report says so" *
          doctest::test_suite("hw slow")) {
  auto p = ir::load_program(kSmallMatmul, "mm.pdj");
  backends::BackendConfig c = quick_config();
  c.threads = 1;
  auto opt = optimizer::Optimizer::make(portable_arch(), optimizer::Mode::kBalanced, c);
  REQUIRE(opt.ok());
  auto r = opt.value()->transform(p.value(), 5.0);
  CHECK(r.report.threads == 1);
  for (const auto& a : r.trace) CHECK(a.kind != transforms::Kind::kParallelize);
}

TEST_CASE(
    "the parallel proposal divides a sketched GEMM's row blocks and B packing among the threads") {
  auto p = ir::load_program(kSmallMatmul, "mm.pdj");
  REQUIRE(p.ok());
  auto target = *transforms::target_by_name("x86_avx512");
  transforms::MicrokernelParams m;
  m.mr = 4;
  m.nr = 16;
  m.kc = 16;
  m.mc = 16;
  auto sketch = transforms::expand_microkernel(*p, {0}, m, target);
  REQUIRE(sketch.ok());
  // Ko (4 k blocks, carrying C's sum) stays; inside it the B panels' packing and the row blocks.
  target.threads = 2;
  std::vector<std::string> moves;
  for (const auto& a : optimizer::parallel_moves(sketch->program, target))
    moves.push_back(transforms::print_action(a));
  CHECK(moves == std::vector<std::string>{"parallelize 0.0", "parallelize 0.1"});
  // More threads than row blocks: the loops inside are divided instead.
  target.threads = 8;
  for (const auto& a : optimizer::parallel_moves(sketch->program, target)) CHECK(a.path.size() > 2);
  // No threads, no moves.
  target.parallel = false;
  CHECK(optimizer::parallel_moves(sketch->program, target).empty());
}

TEST_CASE("a kernel no scope of which can run on threads says so in the report" *
          doctest::test_suite("hw slow")) {
  if (backends::usable_cores() < 2) PERFDOJO_SKIP("needs two usable cores");
  // A prefix sum: every iteration reads what the one before wrote.
  auto p = ir::load_program(
      "N = 4096\nN1 = 4097\ninput x: f32[N]\noutput a: f32[N1] = 0\n\n"
      "N a[{0}+1] = a[{0}] + x[{0}]\n",
      "scan.pdj");
  REQUIRE_MESSAGE(p.ok(), p.error_text());
  backends::BackendConfig c = quick_config();
  c.threads = 2;
  auto opt = optimizer::Optimizer::make(portable_arch(), optimizer::Mode::kBalanced, c);
  REQUIRE(opt.ok());
  auto r = opt.value()->transform(p.value(), 3.0);
  CHECK(r.report.threads == 2);
  CAPTURE(r.report.parallel);
  CHECK(r.report.parallel.rfind("one thread: no scope can run its iterations on threads (", 0) ==
        0);
  CHECK(r.report.parallel.find("dependence") != std::string::npos);
  for (const auto& a : r.trace) CHECK(a.kind != transforms::Kind::kParallelize);
}

TEST_CASE("a calibration is kept and reused on an idle machine, and never kept on a busy one" *
          doctest::test_suite("hw slow")) {
  // The machine's load comes from the test, so both branches run whatever else the machine does.
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("perfdojo-load-test-" + std::to_string(::getpid())))
                              .string();
  unsetenv("PERFDOJO_MACHINE_PROFILE");
  backends::MachineProfile prof;
  {
    backends::BackendConfig busy;
    busy.cache_dir = dir;
    const std::string how = optimizer::detail::resolve_profile(busy, &prof, [] { return 1e4; });
    CHECK_MESSAGE(how.find("busy machine, load 10000.0: not kept") != std::string::npos, how);
    CHECK_FALSE(std::filesystem::exists(optimizer::cached_profile_path(dir)));
    CHECK(prof.peak_gflops_avx2 > 0);
  }
  {
    backends::BackendConfig idle;
    idle.cache_dir = dir;
    const std::string how = optimizer::detail::resolve_profile(idle, &prof, [] { return 0.0; });
    CHECK_MESSAGE(how.find("calibrated now, kept in") != std::string::npos, how);
    CHECK(std::filesystem::exists(optimizer::cached_profile_path(dir)));
  }
  {
    backends::BackendConfig again;
    again.cache_dir = dir;
    // Busy or not, a kept calibration is read, not measured again.
    const std::string how = optimizer::detail::resolve_profile(again, &prof, [] { return 1e4; });
    CHECK_MESSAGE(how.find("calibrated earlier") != std::string::npos, how);
    CHECK(again.machine_profile == optimizer::cached_profile_path(dir));
  }
  {
    // The optimiser itself takes the kept calibration and says so in its report.
    backends::BackendConfig c;
    c.cache_dir = dir;
    auto p = ir::load_program(kSmallMatmul, "mm.pdj");
    REQUIRE(p.ok());
    auto opt = optimizer::Optimizer::make(portable_arch(), optimizer::Mode::kConservative, c);
    REQUIRE(opt.ok());
    std::atomic<bool> cancel{true};
    auto r = opt.value()->transform(p.value(), 5.0, {}, &cancel);
    CHECK_MESSAGE(r.report.profile.find("calibrated earlier") != std::string::npos,
                  r.report.profile);
    CHECK(r.report.peak_gflops > 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("every shipped kernel has a scaled-down instance the verification can interpret") {
  for (const auto& entry : std::filesystem::directory_iterator(PERFDOJO_KERNEL_DIR)) {
    if (entry.path().extension() != ".pdj") continue;
    CAPTURE(entry.path().string());
    auto p = ir::load_file(entry.path().string());
    REQUIRE(p.ok());
    auto small =
        transforms::small_instance(p.value(), {}, transforms::Target{"x86_64", {}, true}, 2e6);
    REQUIRE(small.has_value());
    CHECK(ir::check_program(small->first).empty());
  }
}

TEST_CASE("the optimiser proposes the micro-kernel sketch on a GEMM-class kernel and measures it" *
          doctest::test_suite("hw slow")) {
  // 128 x 128 x 512: the smallest the default blocks (kc 256, mc 64) tile with two of each.
  const char* kMatmul =
      "M = 128\nN = 128\nK = 512\ninput A: f32[M, K]\ninput B: f32[K, N]\n"
      "output C: f32[M, N] = 0\n\nM N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n";
  auto p = ir::load_program(kMatmul, "mm.pdj");
  REQUIRE(p.ok());
  std::string arch;
  for (const char* a : {"x86_avx512", "x86_avx2"})
    if (backends::make_backend(a)->available().ok) {
      arch = a;
      break;
    }
  if (arch.empty()) PERFDOJO_SKIP("no AVX-512 or AVX2 here: the sketch needs vector registers");
  backends::BackendConfig c = quick_config();
  c.threads = 1;
  auto opt = optimizer::Optimizer::make(arch, optimizer::Mode::kBalanced, c);
  REQUIRE(opt.ok());
  auto r = opt.value()->transform(p.value(), 10.0);
  CHECK(r.report.sketches_used >= 1);
  // Whichever program wins (the clock decides, and speed goals live in benchmarks/), it is
  // verified and replays from the original.
  CHECK(r.report.verified);
  CHECK(transforms::replay(p.value(), r.trace, *transforms::target_by_name(arch)).ok());
}

TEST_CASE("timed cold, the optimiser also proposes the fused form with its outputs streamed" *
          doctest::test_suite("hw slow")) {
  // A memory-bound kernel: with every timed call starting from evicted caches, the stores'
  // reads for ownership are the cost the streamed proposal removes (docs/optimizer.md).
  auto p = ir::load_program(
      "N = 65536\ninput x: f32[N]\ninput y: f32[N]\noutput z: f32[N]\n\n"
      "N z[{0}] = 2.5 * x[{0}] + y[{0}]\n",
      "saxpy.pdj");
  REQUIRE(p.ok());
  std::string arch;  // a target with streaming stores
  for (const char* a : {"x86_avx512", "x86_avx2"})
    if (backends::make_backend(a)->available().ok) {
      arch = a;
      break;
    }
  if (arch.empty()) PERFDOJO_SKIP("no AVX-512 or AVX2 here: no streaming stores to propose");
  std::map<std::string, optimizer::Report> by_flush;
  for (const char* flush : {"off", "on"}) {
    backends::BackendConfig c = quick_config();
    c.cache_flush = *backends::parse_cache_flush(flush);
    auto opt = optimizer::Optimizer::make(arch, optimizer::Mode::kBalanced, c);
    REQUIRE(opt.ok());
    std::atomic<bool> cancel{true};  // the seeded proposals only: no search after them
    by_flush[flush] = opt.value()->transform(p.value(), 30.0, {}, &cancel).report;
  }
  CHECK_FALSE(by_flush["off"].cache_flushed);
  CHECK(by_flush["on"].cache_flushed);
  // Seeding does not depend on the clock: the same proposals, and the streamed one besides.
  CHECK(by_flush["on"].sketches_used == by_flush["off"].sketches_used + 1);
  CHECK(by_flush["on"].verified);
}

TEST_CASE(
    "a sketch whose remainders unroll past the general code limit still replays whole under "
    "the limit it raises") {
  // 500 x 700 x 300: remainder nests for 4 rows and 16 + 8 + 4 columns, each with its register
  // tile unrolled. Under the general limit (96 statements) the replay dropped their unrolls and
  // left the tiles in memory.
  auto p = ir::load_program(
      "M = 500\nN = 700\nK = 300\ninput A: f32[M, K]\ninput B: f32[K, N]\n"
      "output C: f32[M, N] = 0\n\nM N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n",
      "odd.pdj");
  REQUIRE(p.ok());
  const auto target = *transforms::target_by_name("x86_avx512");
  const auto sketches = optimizer::detail::sketch_proposals(p.value(), target);
  REQUIRE_FALSE(sketches.empty());
  auto q = transforms::replay(p.value(), sketches[0], target);
  REQUIRE_MESSAGE(q.ok(), q.error_text());
  const int64_t n = optimizer::detail::unrolled_statements(q.value());
  CHECK(n > optimizer::detail::kMaxUnrolledStatements);
  CHECK(n <= optimizer::detail::kMaxSketchStatements);
  CHECK(optimizer::detail::too_much_code(q.value()));
  CHECK_FALSE(optimizer::detail::too_much_code(q.value(), n));
  CHECK_FALSE(
      optimizer::detail::replay_as_searched(p.value(), sketches[0], target, true).has_value());
  auto whole = optimizer::detail::replay_as_searched(p.value(), sketches[0], target, true, n);
  REQUIRE(whole.has_value());
  CHECK(ir::structurally_equal(*whole, q.value()));
}

TEST_CASE("the fusion proposal fuses a row's passes and vectorises them, every step checked") {
  auto p = ir::load_file(std::string(PERFDOJO_TEST_DATA_DIR) + "/../../kernels/rmsnorm.pdj");
  REQUIRE_MESSAGE(p.ok(), p.error_text());
  const auto target = *transforms::target_by_name("x86_avx512");
  const auto trace = optimizer::detail::fusion_proposal(p.value(), target);
  REQUIRE(trace.size() == 3);
  CHECK(transforms::print_action(trace[0]) == "join_scopes 0");
  CHECK(trace[1].kind == transforms::Kind::kVectorize);
  CHECK(trace[2].kind == transforms::Kind::kVectorize);
  auto q = transforms::replay(p.value(), trace, target);
  REQUIRE_MESSAGE(q.ok(), q.error_text());
  auto small = transforms::small_instance(p.value(), trace, target, 2e6);
  REQUIRE(small.has_value());
  auto inputs = ir::make_inputs(small->first, 4);
  auto a = ir::interpret(small->first, inputs);
  auto b = ir::interpret(small->second, inputs);
  REQUIRE((a.ok() && b.ok()));
  CHECK(ir::max_relative_error(a->at("y"), b->at("y")) < 1e-5);  // the vectorised sum reassociates
}

TEST_CASE("the fusion proposal splits off a remainder no vector width divides, then vectorises") {
  // 1025 columns: 1024 in 64 vectors of 16, the last column a scalar scope after them.
  auto p = ir::load_program(
      "input x: f32[3, 1025]\noutput y: f32[3, 1025]\n\n"
      "3 1025 y[{0},{1}] = x[{0},{1}] / (1 + exp(-x[{0},{1}]))\n",
      "silu.pdj");
  REQUIRE_MESSAGE(p.ok(), p.error_text());
  const auto target = *transforms::target_by_name("x86_avx512");
  const auto trace = optimizer::detail::fusion_proposal(p.value(), target);
  REQUIRE(trace.size() == 2);
  CHECK(transforms::print_action(trace[0]) == "split_range 0.0 16");
  CHECK(transforms::print_action(trace[1]) == "vectorize 0.0 16");
  auto q = transforms::replay(p.value(), trace, target);
  REQUIRE_MESSAGE(q.ok(), q.error_text());
  auto inputs = ir::make_inputs(p.value(), 5);
  auto a = ir::interpret(p.value(), inputs);
  auto b = ir::interpret(q.value(), inputs);
  REQUIRE((a.ok() && b.ok()));
  CHECK(ir::max_relative_error(a->at("y"), b->at("y")) == 0);
}

TEST_CASE("the streamed proposal adds stream_stores to every output that may take it") {
  // y is written once and never read back: it may stream; t is read, and is no output.
  auto p = ir::load_program(
      "input x: f32[4, 64]\noutput y: f32[4, 64]\ntemp t: f32[4, 64]\n\n"
      "4 64 t[{0},{1}] = 2 * x[{0},{1}]\n"
      "4 64 y[{0},{1}] = t[{0},{1}] + x[{0},{1}]\n",
      "axpy.pdj");
  REQUIRE_MESSAGE(p.ok(), p.error_text());
  const auto target = *transforms::target_by_name("x86_avx512");
  const auto fused = optimizer::detail::fusion_proposal(p.value(), target);
  const auto trace = optimizer::detail::streamed(p.value(), fused, target);
  REQUIRE(trace.size() == fused.size() + 1);
  CHECK(std::equal(fused.begin(), fused.end(), trace.begin()));
  CHECK(transforms::print_action(trace.back()) == "stream_stores y");
  auto q = transforms::replay(p.value(), trace, target);
  REQUIRE_MESSAGE(q.ok(), q.error_text());
  CHECK(q->find_buffer("y")->stream);
  // Without a target that streams, nothing to propose.
  CHECK(
      optimizer::detail::streamed(p.value(), fused, *transforms::target_by_name("x86_64")).empty());
}

TEST_CASE("the pool puts the shorter trace first among estimates within 1%, the estimate beyond") {
  auto p = ir::load_program(kSmallMatmul, "mm.pdj");
  REQUIRE(p.ok());
  const transforms::Action a{transforms::Kind::kSwapScopes, {0}, "", "", 0};
  using optimizer::detail::Candidate;
  const Candidate short_trace{p.value(), {a}, 1.002e-4};
  const Candidate long_trace{p.value(), {a, a, a, a}, 1.0e-4};
  const Candidate much_faster{p.value(), {a, a, a, a}, 0.9e-4};
  CHECK(optimizer::detail::by_estimate_then_length(short_trace, long_trace));
  CHECK_FALSE(optimizer::detail::by_estimate_then_length(long_trace, short_trace));
  CHECK(optimizer::detail::by_estimate_then_length(much_faster, short_trace));
  CHECK_FALSE(optimizer::detail::by_estimate_then_length(short_trace, much_faster));
}

TEST_CASE("minimisation drops the actions the model does not miss and keeps those it does") {
  auto p = ir::load_program(kSmallMatmul, "mm.pdj");
  REQUIRE(p.ok());
  const transforms::Target target{"x86_avx512", {16, 8, 4, 2}, true};
  // The loop order and the vectorisation carry the speed-up; unrolling the 4-step loop by 2
  // changes nothing the model sees, and the copy of A's element into a temporary costs a
  // store and a load per step.
  auto trace = transforms::parse_trace(
      "swap_scopes 0.0\nvectorize 0.0.0 16\nunroll 0.0.0 2\ncreate_temporary 0 A\n");
  REQUIRE(trace.ok());
  const backends::MachineProfile profile;  // the built-in AVX-512 profile
  auto estimate = [&](const ir::Program& q) { return backends::estimate_cost(q, profile).time_s; };
  auto full = optimizer::detail::replay_as_searched(p.value(), trace.value(), target, true);
  REQUIRE(full);
  ir::Program result = *full;
  auto shorter = optimizer::detail::drop_unneeded(p.value(), trace.value(), result, target, true,
                                                  estimate, [] { return false; });
  CHECK(transforms::print_trace(shorter) == "swap_scopes 0.0\nvectorize 0.0.0 16\n");
  auto kept = optimizer::detail::replay_as_searched(p.value(), shorter, target, true);
  REQUIRE(kept);
  CHECK(ir::structurally_equal(result, *kept));
  CHECK(estimate(*kept) <= estimate(*full));
  // Out of time before it starts: the trace as it was.
  ir::Program untouched = *full;
  auto unchanged = optimizer::detail::drop_unneeded(p.value(), trace.value(), untouched, target,
                                                    true, estimate, [] { return true; });
  CHECK(unchanged.size() == trace.value().size());
  // An action refused on the way (a scope that is not there) makes the replay fail, not throw.
  auto bad = transforms::parse_trace("swap_scopes 7.7\n");
  REQUIRE(bad.ok());
  CHECK_FALSE(optimizer::detail::replay_as_searched(p.value(), bad.value(), target, true));
}

TEST_CASE(
    "the unit-stride proposal moves the scope most accesses step along innermost, then vectorises "
    "it") {
  const transforms::Target target{"x86_avx512", {16, 8, 4, 2}, true};
  auto trace_of = [&](const char* text) {
    auto p = ir::load_program(text, "k.pdj");
    REQUIRE_MESSAGE(p.ok(), p.error_text());
    auto t = optimizer::detail::unit_stride_proposal(p.value(), target);
    REQUIRE(transforms::replay(p.value(), t, target).ok());
    return transforms::print_trace(t);
  };
  // A^T x: y[j] and A[i,j] step along j, x[i] along i; j is outside.
  CHECK(trace_of("M = 64\nN = 48\ninput A: f32[M, N]\ninput x: f32[M]\noutput y: f32[N] = 0\n\n"
                 "N M y[{0}] += A[{1},{0}] * x[{1}]\n") == "swap_scopes 0\nvectorize 0.0 16\n");
  // A^T B: C and B step along j (the middle scope): it goes below k.
  CHECK(trace_of("M = 32\nN = 32\nK = 16\ninput A: f32[K, M]\ninput B: f32[K, N]\noutput C: f32[M, "
                 "N] = 0\n\n"
                 "M N K C[{0},{1}] += A[{2},{0}] * B[{2},{1}]\n") ==
        "swap_scopes 0.0\nvectorize 0.0.0 16\n");
  // i, j, k: C and B step along j, A along k: the i-k-j order.
  CHECK(trace_of(kSmallMatmul) == "swap_scopes 0.0\nvectorize 0.0.0 16\n");
  // No nest of two scopes, or the innermost already the best: nothing to propose.
  CHECK(trace_of("N = 64\ninput x: f32[N]\noutput y: f32[N]\n\nN y[{0}] = 2 * x[{0}]\n").empty());
  CHECK(
      trace_of(
          "M = 8\nN = 64\ninput x: f32[M, N]\noutput y: f32[M, N]\n\nM N y[{0},{1}] = x[{0},{1}]\n")
          .empty());
}

TEST_CASE(
    "the layout proposal relays buffers so that a scope of whole vectors runs along every access") {
  const transforms::Target target{"x86_avx512", {16, 8, 4, 2}, true};
  auto trace_of = [&](const char* text) {
    auto p = ir::load_program(text, "k.pdj");
    REQUIRE_MESSAGE(p.ok(), p.error_text());
    auto t = optimizer::detail::layout_proposal(p.value(), target);
    auto q = transforms::replay(p.value(), t, target);
    REQUIRE(q.ok());
    if (!t.empty()) {  // the interpreter agrees bit for bit (the order of every sum is kept)
      auto inputs = ir::make_inputs(p.value(), 3);
      auto want = ir::interpret(p.value(), inputs);
      auto got = ir::interpret(q.value(), inputs);
      REQUIRE(want.ok());
      REQUIRE(got.ok());
      CHECK(ir::max_relative_error(want->at("y"), got->at("y")) == 0);
    }
    return transforms::print_trace(t);
  };
  // A transposed convolution: no scope runs along y and w at once until y is staged with its
  // channels last and w packed that way; then c2 goes innermost (below c1, t and r) in lanes.
  CHECK(trace_of("C1 = 4\nC2 = 32\nT = 8\nR = 4\nTO = 18\ninput x: f32[C1, T]\n"
                 "input w: f32[C1, C2, R]\noutput y: f32[C2, TO] = 0\n\n"
                 "C2 C1 T R y[{0},{2}*2+{3}] += x[{1},{2}] * w[{1},{0},{3}]\n") ==
        "swap_buffer_dims w 1\nswap_buffer_dims y 0\nswap_scopes 1\nswap_scopes 1.0\n"
        "swap_scopes 1.0.0\nvectorize 1.0.0.0 16\n");
  // An output without an initial value cannot be staged: nothing to propose.
  CHECK(trace_of("C1 = 4\nC2 = 32\nT = 8\ninput x: f32[C1, T]\ninput w: f32[C1, C2]\n"
                 "output y: f32[C2, T]\n\nC2 T y[{0},{1}] = x[0,{1}] * w[0,{0}]\n")
            .empty());
  // A scope the interchange alone vectorises is unit_stride_proposal's: nothing here.
  CHECK(trace_of(kSmallMatmul).empty());
  // An iterator's value in an expression is an access of no buffer: it asks no layout.
  CHECK(trace_of("T = 32\nP = 16\ninput x: f32[T, P]\noutput y: f32[T, P]\n\n"
                 "T P y[{0},{1}] = x[{0},{1}] + f32({0})\n")
            .empty());
  // A scope shorter than one vector is not worth a relayout.
  CHECK(trace_of("M = 8\nN = 4\ninput x: f32[N, M]\noutput y: f32[M, N] = 0\n\n"
                 "N M y[{1},{0}] += x[{0},{1}]\n")
            .empty());
}

TEST_CASE(
    "a trace no small instance replays is verified at full size against the original's sequential "
    "build" *
    doctest::test_suite("hw")) {
  // Blocks of 256 on every scope of a 512^3 matmul: no size below 512 keeps them, and 512^3
  // statement executions are more than the interpreter check takes.
  const std::string text =
      "M = 512\nN = 512\nK = 512\ninput A: f32[M, K]\ninput B: f32[K, N]\noutput C: f32[M, N] = "
      "0\n\n"
      "M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n";
  auto p = ir::parse_program(text, "big.pdj");
  REQUIRE(p.ok());
  auto trace =
      transforms::parse_trace("tile_scope 0 256\ntile_scope 0.0.0 256\ntile_scope 0.0.0.0.0 256\n");
  REQUIRE(trace.ok());
  const auto target = transforms::target_by_name(portable_arch());
  REQUIRE(target);
  CHECK_FALSE(transforms::small_instance(*p, *trace, *target, 6.4e7));
  if (!backends::make_backend(portable_arch())->available().ok)
    PERFDOJO_SKIP("no C compiler for x86_64 here");
  std::string how;
  CHECK(optimizer::detail::verify_small(*p, *trace, *target, portable_arch(), quick_config(),
                                        nullptr, &how));
  CHECK(how == "full size, against the original's sequential build");
  // A wrong result at full size is caught: the test hook corrupts C in the measured kernel.
  auto bad = quick_config();
  bad.inject = "wrong:C";
  CHECK_FALSE(optimizer::detail::verify_small(*p, *trace, *target, portable_arch(), bad));
}

TEST_CASE(
    "the curve's measured best never rises, even when minimisation keeps a slightly slower trace") {
  HandRun h;
  optimizer::Result res;
  optimizer::detail::SearchRun run = h.run(*h.model, res, 1.0);
  run.r.final_s = 2.0;
  run.record_curve();
  run.r.final_s = 1.0;
  run.record_curve();
  run.r.final_s =
      1.0 * (1 + optimizer::detail::SearchRun::kTidyTolerance);  // a tidier trace, 1% slower
  run.record_curve();
  const auto& c = run.r.curve;
  REQUIRE(c.size() >= 3);
  CHECK(c[c.size() - 2].best_measured_s == doctest::Approx(1.0));
  CHECK(c.back().best_measured_s == doctest::Approx(1.0));
}

namespace {
// A backend whose interleaved comparison gives fixed medians, in order: what the final
// re-timing sees, without a clock.
class FixedCompare : public backends::Backend {
 public:
  explicit FixedCompare(std::vector<double> medians) : medians_(std::move(medians)) {}
  std::string name() const override { return "fixed"; }
  backends::Availability available() const override { return {}; }
  backends::Capabilities capabilities() const override { return {}; }
  bool deterministic() const override { return false; }
  backends::Measurement measure(const ir::Program&, const backends::MeasureOptions&) override {
    backends::Measurement m;
    m.median_s = m.min_s = medians_.front();
    return m;
  }
  std::vector<backends::Measurement> compare(const std::vector<const ir::Program*>& programs,
                                             const backends::MeasureOptions&) override {
    std::vector<backends::Measurement> out(programs.size());
    for (size_t i = 0; i < out.size(); ++i)
      out[i].median_s = out[i].min_s = medians_.at(i), out[i].reps = 5;
    return out;
  }
  std::unique_ptr<backends::Backend> clone() const override {
    return std::make_unique<FixedCompare>(medians_);
  }

 private:
  std::vector<double> medians_;
};
}  // namespace

TEST_CASE("the final re-timing returns the original when it times faster side by side") {
  HandRun h;
  auto trace = transforms::parse_trace("tile_scope 0 4\n");
  REQUIRE(trace.ok());
  auto tiled = transforms::replay(h.program, *trace, h.target);
  REQUIRE(tiled.ok());
  for (const double found : {1.1, 0.5}) {  // the found kernel's median, against the original's 1.0
    CAPTURE(found);
    FixedCompare timer({1.0, found});
    optimizer::Result res;
    optimizer::detail::SearchRun run = h.run(timer, res, 10.0);
    res.program = tiled.value();
    res.trace = *trace;
    run.r.baseline_s = 1.0;
    run.r.final_s = 0.9;  // what the search had measured
    run.r.first_measured_s = 3.0;
    run.retime_final();
    if (found > 1.0) {
      CHECK(res.trace.empty());
      CHECK(run.r.first_measured_s == 0);  // no faster kernel is returned: none arrived
      CHECK(ir::structurally_equal(res.program, h.program));
      CHECK(run.r.final_s == doctest::Approx(1.0));
      CHECK(run.r.verified);
      CHECK(run.r.note.find("slower than the original") != std::string::npos);
    } else {
      CHECK(res.trace.size() == 1);
      CHECK(run.r.first_measured_s == 3.0);
      CHECK(run.r.final_s == doctest::Approx(0.5));
      CHECK(run.r.note.empty());
    }
  }
}
