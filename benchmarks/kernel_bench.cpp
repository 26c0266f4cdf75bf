// kernel_bench: the optimised kernels against the libraries users would reach for, each timed
// interleaved with its baseline in one process on one core: a call of ours, a call of theirs, and
// again, warm, at least 10 repetitions each, min and median reported.
//
//   kernel_bench [--budget S] [--kernels a,b,...|FILE.pdj,...] [--reps N] [--threads N] [--arch A]
//                [--python PY] [--json FILE] [--out DIR] [--trace FILE]
//
// --threads N (default 1): ours, OpenBLAS and PyTorch all on N threads (the cores the process may
// use, at most), the optimiser searching and measuring on N; our kernel is also timed built for one
// thread, the same schedule, interleaved with its N-thread build: the parallel efficiency
// (one-thread time / (N x N-thread time)).
//
// For each kernel the optimiser searches for at most --budget seconds on one thread (default 300;
// 0: no search, the micro-kernel sketch's first expansion on GEMM-class kernels and the program
// as written elsewhere; --trace FILE: that schedule, replayed on the one kernel named, instead of
// any search, e.g. a `perfdojo sketch` with other block sizes). The returned program is verified
// against the interpreter on a scaled-down instance, compiled to a shared object with the
// backend's compiler and flags, and loaded into this process.
//
// OpenBLAS (GEMM-class kernels; its best core for this CPU, blas_reference.h): cblas_sgemm timed
// interleaved with our kernel here. matmul*: one sgemm; bmm: one sgemm per batch; mlp: sgemm then
// the bias + ReLU pass (what a C user would write around the library).
//
// PyTorch (one thread, Debian's /usr/bin/python3 with python3-torch): benchmarks/torch_baseline.py
// loads the same shared object with ctypes and times our kernel and PyTorch's best form
// interleaved in its own process (PyTorch cannot live in this one); its ratio is taken there.
//
// The FMA peak of one core is measured at the start and at the end (the best counts), and so is
// the register-tile ceiling (tile_ceiling.h: the same rate with the micro-kernel's loads). The
// process's CPU affinity is respected; pin it with taskset for figures worth keeping:
//   taskset -c 1 build/bin/kernel_bench --budget 300
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backends/codegen_c.h"
#include "backends/compiler.h"
#include "backends/host_buffers.h"
#include "backends/x86_backend.h"
#include "bench_text.h"
#include "blas_reference.h"
#include "ir/interp.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "optimizer/optimizer.h"
#include "tile_ceiling.h"
#include "transforms/contract.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/registry.h"
#include "util/args.h"
#include "util/json.h"
#include "util/process.h"

using namespace perfdojo;
using bench::draw_bar;
using bench::ms;
using bench::ratio;
using bench::split;
namespace fs = std::filesystem;

namespace {

struct Options {
  double budget = 300;
  int reps = 30;
  int threads = 1;
  std::vector<std::string> kernels = {"matmul-1024", "mlp",     "bmm",       "attention",
                                      "conv2d-3x3",  "softmax", "layernorm", "rmsnorm"};
  std::string arch, python = "/usr/bin/python3", json, out;
  std::string trace;  ///< a trace file to replay instead of searching (one kernel)
};

constexpr const char* kUsage =
    "kernel_bench [--budget S] [--kernels a,b,...] [--reps N] [--threads N] [--arch A] "
    "[--python PY] [--json FILE] [--out DIR] [--trace FILE]";

int usage(const std::string& why) {
  std::fprintf(stderr, "kernel_bench: %s\nusage: %s\n", why.c_str(), kUsage);
  return 2;
}

// 64-byte aligned storage for one buffer.
struct Buffer {
  float* p = nullptr;
  size_t n = 0;
  explicit Buffer(size_t elements) : n(elements) {
    size_t bytes = (elements * sizeof(float) + 63) / 64 * 64;
    p = static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64)));
    std::memset(p, 0, bytes);
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// Min and median of timed calls.
struct Times {
  std::vector<double> t;
  double min() const { return t.empty() ? 0 : *std::min_element(t.begin(), t.end()); }
  double median() const {
    if (t.empty()) return 0;
    std::vector<double> s = t;
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  }
};

double time_call(const std::function<void()>& f) {
  const double t0 = bench::now_s();
  f();
  return bench::now_s() - t0;
}

// With several threads each library keeps its idle threads spinning for a while after a call
// (libgomp a few milliseconds, OpenBLAS about 2^28 cycles), on the cores the other one needs:
// timed call by call, each would run against the other's spinning pool, and sleeping between
// calls instead lets a virtual machine's idle cores take milliseconds to wake. So with threads
// the two alternate in blocks of kBlock timed calls, each block after untimed calls for at least
// g_settle_s (the other pool quiet by then, this one warm, as in a user's loop of calls).
double g_settle_s = 0;
constexpr int kBlock = 5;

// Interleaves `reps` calls of each (after 3 warm-up calls of each); in blocks with g_settle_s.
void interleave(const std::function<void()>& a, const std::function<void()>& b, int reps, Times& ta,
                Times& tb) {
  if (g_settle_s > 0) {
    auto block = [](const std::function<void()>& f, int n, Times& t) {
      for (const double t0 = bench::now_s(); bench::now_s() - t0 < g_settle_s;) f();
      for (int i = 0; i < n; ++i) t.t.push_back(time_call(f));
    };
    for (int done = 0; done < reps; done += kBlock) {
      block(a, std::min(kBlock, reps - done), ta);
      block(b, std::min(kBlock, reps - done), tb);
    }
    return;
  }
  for (int w = 0; w < 3; ++w) {
    a();
    b();
  }
  for (int r = 0; r < reps; ++r) {
    ta.t.push_back(time_call(a));
    tb.t.push_back(time_call(b));
  }
}

std::map<std::string, int64_t> sizes_of(const ir::Program& p) {
  std::map<std::string, int64_t> s;
  for (const auto& d : p.sizes) s[d.name] = d.value;
  return s;
}

// OpenBLAS's form of a GEMM-class kernel (its own buffers), or nullptr.
std::function<void()> blas_form(const std::string& name, const ir::Program& p,
                                std::vector<std::unique_ptr<Buffer>>& keep) {
  auto s = sizes_of(p);
  auto buf = [&](int64_t n) {
    keep.push_back(std::make_unique<Buffer>(static_cast<size_t>(n)));
    float* q = keep.back()->p;
    for (int64_t i = 0; i < n; ++i) q[i] = static_cast<float>((i * 7919) % 1000) / 500.0f - 1.0f;
    return q;
  };
  if (name.rfind("matmul", 0) == 0 && s.count("M") && s.count("N") && s.count("K")) {
    const int m = s["M"], n = s["N"], k = s["K"];
    float *a = buf(int64_t{m} * k), *b = buf(int64_t{k} * n), *c = buf(int64_t{m} * n);
    return [=] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
    };
  }
  if (name == "bmm") {
    const int bt = s["BATCH"], m = s["M"], n = s["N"], k = s["K"];
    float *a = buf(int64_t{bt} * m * k), *b = buf(int64_t{bt} * k * n),
          *c = buf(int64_t{bt} * m * n);
    return [=] {
      for (int i = 0; i < bt; ++i)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f,
                    a + int64_t{i} * m * k, k, b + int64_t{i} * k * n, n, 0.0f,
                    c + int64_t{i} * m * n, n);
    };
  }
  if (name == "mlp") {
    const int m = s["M"], n = s["N"], k = s["K"];
    float *x = buf(int64_t{m} * k), *w = buf(int64_t{k} * n), *bias = buf(n),
          *y = buf(int64_t{m} * n);
    return [=] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, x, k, w, n, 0.0f, y, n);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j)
          y[int64_t{i} * n + j] = std::max(y[int64_t{i} * n + j] + bias[j], 0.0f);
    };
  }
  return nullptr;
}

struct Row {
  std::string kernel;
  double flops = 0;
  std::string how;  ///< "optimiser 300 s", "sketch", "as written"
  bool verified = false;
  std::string so;
  std::vector<int64_t> elements;  ///< per kernel parameter
  Times ours_vs_blas, blas;
  bool has_blas = false;
  Times ours_vs_one, one;  ///< with --threads N > 1: ours on N threads and on one, interleaved
  double torch_min = 0, torch_med = 0, ours_py_min = 0, ours_py_med = 0;
  std::string torch_note;
  std::string torch_form;  ///< the fastest of the PyTorch forms tried (torch_baseline.py)
  double speedup = 0;      ///< the optimiser's report: over the original, timed interleaved
  double first_s = 0;      ///< when the optimiser verified its first faster kernel
  bool cold = false;  ///< the optimiser timed it with its data evicted (report's cache_flushed)
  std::vector<std::string> trace;
};

// Runs torch_baseline.py on the manifest; fills the PyTorch columns.
void torch_columns(const Options& o, const std::string& manifest, std::vector<Row>& rows) {
  util::ProcessResult run = util::run_process(
      {o.python, PERFDOJO_SOURCE_DIR "/benchmarks/torch_baseline.py", "--interleave", manifest,
       "--json", "--threads", std::to_string(o.threads)},
      {.timeout_s = 1800});
  if (run.exit_code != 0) {
    for (auto& r : rows)
      r.torch_note = "the PyTorch script failed (exit " + std::to_string(run.exit_code) +
                     "): " + run.output.substr(0, 200);
    return;
  }
  for (const auto& line : split(run.output, '\n')) {
    util::json::Document d;
    if (util::parse_json(line, &d) || !d.IsObject() || !d.HasMember("kernel")) continue;
    for (auto& r : rows) {
      if (r.kernel != d["kernel"].GetString()) continue;
      if (d.HasMember("error")) {
        r.torch_note = d["error"].GetString();
        continue;
      }
      r.torch_min = d["torch_min_s"].GetDouble();
      r.torch_med = d["torch_median_s"].GetDouble();
      r.ours_py_min = d["ours_min_s"].GetDouble();
      r.ours_py_med = d["ours_median_s"].GetDouble();
      if (d.HasMember("expression") && d["expression"].IsString())
        r.torch_form = d["expression"].GetString();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  util::choose_openblas_core(argv, "kernel_bench");
  Options o;
  util::ArgSpec spec;
  spec.program = "kernel_bench";
  spec.usage = kUsage;
  spec.value_options = {"budget", "kernels", "reps", "threads", "arch",
                        "python", "json",    "out",  "trace"};
  util::Args args;
  if (auto e = util::parse_args(spec, argc, argv, &args); !e.empty()) return usage(e);
  if (args.help) {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  for (const std::string& e :
       {args.get_double("budget", 0, 1e9, &o.budget), args.get_int("reps", 10, 1000000, &o.reps),
        args.get_int("threads", 1, 4096, &o.threads)})
    if (!e.empty()) return usage(e);
  if (args.has("kernels")) o.kernels = split(args.get("kernels"), ',');
  o.arch = args.get("arch", o.arch);
  o.python = args.get("python", o.python);
  o.json = args.get("json", o.json);
  o.out = args.get("out", o.out);
  o.trace = args.get("trace", o.trace);
  if (o.kernels.empty()) return usage("--kernels must name at least one kernel");
  if (o.threads > backends::usable_cores()) {
    std::fprintf(stderr,
                 "kernel_bench: --threads %d, but this process may use %d cores: using %d\n",
                 o.threads, backends::usable_cores(), backends::usable_cores());
    o.threads = backends::usable_cores();
  }
  if (!o.trace.empty() && o.kernels.size() != 1)
    return usage("--trace replays on one kernel: name it with --kernels");
  if (o.arch.empty())
    for (const char* a : {"x86_avx512", "x86_avx2"})
      if (backends::make_backend(a)->available().ok) {
        o.arch = a;
        break;
      }
  const auto isa = backends::x86_isa_by_name(o.arch);
  if (!isa || *isa == backends::X86Isa::kPortable)
    return usage("needs x86_avx512 or x86_avx2 (--arch)");
  if (o.out.empty())
    o.out = (fs::temp_directory_path() / ("perfdojo-kernel-bench-" + std::to_string(getpid())))
                .string();
  fs::create_directories(o.out);
  const int lanes = *isa == backends::X86Isa::kAvx512 ? 16 : 8;
  openblas_set_num_threads(o.threads);
  if (o.threads > 1) g_settle_s = 0.2;

  std::fprintf(stderr,
               "kernel_bench: %s, %d thread(s), budget %.0f s per kernel, %d interleaved reps\n",
               o.arch.c_str(), o.threads, o.budget, o.reps);
  double peak = bench::peak_gflops(lanes);
  bench::TileCeiling ceiling = bench::tile_ceiling(lanes);

  backends::BackendConfig config, one_thread;
  config.threads = o.threads;
  one_thread.threads = 1;
  std::unique_ptr<optimizer::Optimizer> opt;
  if (o.budget > 0) {
    auto made = optimizer::Optimizer::make(o.arch, optimizer::Mode::kBalanced, config);
    if (!made.ok()) {
      std::fprintf(stderr, "kernel_bench: %s\n", made.error_text().c_str());
      return 1;
    }
    opt = std::move(made).value();
  }
  auto target = *transforms::target_by_name(o.arch);
  target.parallel = o.threads > 1;
  target.threads = o.threads;

  std::vector<Row> rows;
  std::vector<void*> handles;
  util::JsonArray manifest;
  for (const auto& named : o.kernels) {
    // A shipped kernel's name, or a .pdj file's path (its stem names it).
    const bool is_path = named.size() > 4 && named.compare(named.size() - 4, 4, ".pdj") == 0;
    const std::string pdj =
        is_path ? named : std::string(PERFDOJO_KERNEL_DIR) + "/" + named + ".pdj";
    const std::string name = is_path ? fs::path(named).stem().string() : named;
    auto program = ir::load_file(pdj);
    if (!program.ok()) {
      std::fprintf(stderr, "%s\n", program.error_text().c_str());
      return 1;
    }
    const ir::Program& p = *program;
    Row row;
    row.kernel = name;
    row.flops = backends::flop_count(p);
    ir::Program q = p;
    // A trace and the sketch start where the optimiser's search does: from the contracted kernel
    // (fused multiply-adds where a product meets a sum; optimizer.cpp). Without it the sketch's
    // tile ran as separate multiplies and adds, -ffp-contract=off keeping them apart: matmul-1024
    // measured 0.51 of peak on a Zen 3 core against 0.86 contracted.
    const ir::Program root = transforms::contracts_on(target) ? transforms::contract(p) : p;
    std::vector<transforms::Action> trace;
    if (!o.trace.empty()) {
      std::ifstream in(o.trace);
      std::stringstream text;
      text << in.rdbuf();
      if (!in) {
        std::fprintf(stderr, "kernel_bench: cannot read %s\n", o.trace.c_str());
        return 1;
      }
      auto parsed = transforms::parse_trace(text.str(), o.trace);
      if (!parsed.ok()) {
        std::fprintf(stderr, "kernel_bench: %s\n", parsed.error_text().c_str());
        return 1;
      }
      auto replayed = transforms::replay(root, *parsed, target);
      if (!replayed.ok()) {
        std::fprintf(stderr, "kernel_bench: %s\n", replayed.error_text().c_str());
        return 1;
      }
      q = std::move(replayed).value();
      trace = *parsed;
      row.how = "trace";
    } else if (opt) {
      const double t0 = bench::now_s();
      auto res = opt->transform(p, o.budget, [&](double f, int e, double s) {
        draw_bar(name, f, e, s, bench::now_s() - t0);
      });
      std::fprintf(stderr, "\n");
      q = res.program;
      trace = res.trace;
      row.how = "optimiser";
      row.speedup = res.report.speedup;
      row.first_s = res.report.first_measured_s;
      row.cold = res.report.cache_flushed;
    } else {
      auto e = transforms::sketch_program(root, target, 0);
      const bool sketched = !e.trace.empty();
      row.how = sketched ? "sketch" : "as written";
      q = std::move(e.program);
      trace = std::move(e.trace);
      // On threads, the sketch's macro loops (or the kernel's outer loops) divided among them.
      for (const auto& a : optimizer::parallel_moves(q, target)) {
        auto r = transforms::apply(q, a, target);
        if (!r.ok()) break;
        q = std::move(r).value();
        trace.push_back(a);
        row.how = sketched ? "sketch+par" : "parallel";
      }
    }
    for (const auto& a : trace) row.trace.push_back(transforms::print_action(a));
    row.verified = optimizer::verify_trace(p, trace, o.arch, config);

    // Our kernel, compiled as the backend compiles it for `c` (its thread count), loaded here;
    // nullptr, with `why`, when it does not compile or load.
    using Entry = void (*)(void* const*);
    auto build = [&](const backends::BackendConfig& c, std::string* so_path,
                     std::string* why) -> Entry {
      auto so = backends::compile_shared_object(
          config.compiler, backends::x86_compile_flags(*isa, config.compiler),
          backends::x86_generate_c(*isa, q, c).source, o.out, backends::x86_link_libraries(), 300);
      if (so.error) {
        *why = "does not compile: " + *so.error;
        return nullptr;
      }
      void* h = dlopen(so.so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
      auto e = h ? reinterpret_cast<Entry>(dlsym(h, "perfdojo_entry")) : nullptr;
      if (!e) {
        const char* err = dlerror();
        *why = "cannot load " + so.so_path + ": " + (err ? err : "no perfdojo_entry");
        return nullptr;
      }
      handles.push_back(h);
      *so_path = so.so_path;
      return e;
    };
    std::string why;
    const Entry entry = build(config, &row.so, &why);
    if (!entry) {
      std::fprintf(stderr, "kernel_bench: %s %s\n", name.c_str(), why.c_str());
      return 1;
    }
    std::vector<std::unique_ptr<Buffer>> bufs, blas_bufs;
    std::vector<void*> args;
    const ir::TensorMap inputs = ir::make_inputs(p, 1);
    for (const auto* b : backends::kernel_parameters(q)) {
      // Room for the elements in their own type (an int8 GEMM's u8 and i8 operands, its i32
      // sums), written as the backends write them.
      const size_t bytes = static_cast<size_t>(b->elements()) * ir::dtype_bytes(b->dtype);
      bufs.push_back(std::make_unique<Buffer>((bytes + sizeof(float) - 1) / sizeof(float)));
      row.elements.push_back(b->elements());
      if (auto it = inputs.find(b->name); it != inputs.end())
        backends::write_tensor(reinterpret_cast<uint8_t*>(bufs.back()->p), b->dtype,
                               it->second.data);
      args.push_back(bufs.back()->p);
    }
    auto ours = [&] { entry(args.data()); };
    if (o.threads > 1) {  // the same schedule on one thread: the parallel efficiency
      std::string so1;
      if (const Entry entry1 = build(one_thread, &so1, &why))
        interleave(
            ours, [&] { entry1(args.data()); }, o.reps, row.ours_vs_one, row.one);
      else
        std::fprintf(stderr, "kernel_bench: %s: the one-thread build %s\n", name.c_str(),
                     why.c_str());
    }
    if (auto blas = blas_form(name, p, blas_bufs)) {
      row.has_blas = true;
      interleave(ours, blas, o.reps, row.ours_vs_blas, row.blas);
    } else {
      Times none;
      interleave(
          ours, [] {}, o.reps, row.ours_vs_blas, none);
    }
    util::JsonArray el;
    for (int64_t e : row.elements) el.add(e);
    manifest.raw(util::JsonObject()
                     .add("kernel", name)
                     .add("pdj", pdj)
                     .add("so", row.so)
                     .raw("elements", el.str())
                     .add("reps", o.reps)
                     .str());
    std::fprintf(stderr, "%-12s ours %s ms (%s)%s\n", name.c_str(),
                 ms(row.ours_vs_blas.median()).c_str(), row.how.c_str(),
                 row.has_blas ? (", OpenBLAS " + ms(row.blas.median()) + " ms").c_str() : "");
    rows.push_back(std::move(row));
  }
  const std::string manifest_path = (fs::path(o.out) / "manifest.json").string();
  std::ofstream(manifest_path) << manifest.str() << "\n";
  std::fprintf(stderr,
               "PyTorch (%s, %d thread(s), interleaved with our kernels in its process)...\n",
               o.python.c_str(), o.threads);
  torch_columns(o, manifest_path, rows);
  peak = std::max(peak, bench::peak_gflops(lanes));
  {
    const bench::TileCeiling again = bench::tile_ceiling(lanes);
    ceiling.l1_gflops = std::max(ceiling.l1_gflops, again.l1_gflops);
    ceiling.l2_gflops = std::max(ceiling.l2_gflops, again.l2_gflops);
  }

  std::printf(
      "kernel_bench: %s, %d thread(s) (ours, OpenBLAS and PyTorch alike), %s; %d interleaved reps "
      "per pair\n",
      o.arch.c_str(), o.threads,
      o.budget > 0
          ? ("optimiser " + std::to_string(static_cast<int>(o.budget)) + " s per kernel").c_str()
          : "no search (micro-kernel sketch on GEMM-class kernels)",
      o.reps);
  std::printf(
      "FMA peak of one core, measured at the start and the end (best): %.1f GFLOP/s (%d lanes)%s\n",
      peak, lanes,
      o.threads > 1 ? ("; %peak below is of " + std::to_string(o.threads) + " x that").c_str()
                    : "");
  const double one_core_peak = peak;
  peak *= o.threads;
  std::printf(
      "register-tile ceiling (a %dx%d broadcast-FMA tile, kc %d; best of the start and the end): "
      "%.1f GFLOP/s (%.1f%% of peak) with B in L1, %.1f (%.1f%%) with B streamed from L2\n",
      ceiling.mr, ceiling.nr, ceiling.kc, ceiling.l1_gflops,
      100 * ceiling.l1_gflops / one_core_peak, ceiling.l2_gflops,
      100 * ceiling.l2_gflops / one_core_peak);
  std::printf("OpenBLAS core %s (%s); PyTorch via %s\n\n", openblas_get_corename(),
              util::openblas_core_note(), o.python.c_str());
  std::printf("%-12s %-10s %8s %6s | %9s %9s %9s %9s %8s | %9s %9s %8s %s\n", "kernel", "how",
              "GFLOP/s", "%peak", "ours min", "ours med", "BLAS min", "BLAS med", "vs BLAS",
              "ours(py)", "torch", "vs torch", "verified");
  for (const auto& r : rows) {
    const double med = r.ours_vs_blas.median();
    const double gf = r.flops / med * 1e-9;
    std::printf("%-12s %-10s %8.1f %5.1f%% | %9s %9s %9s %9s %8s | %9s %9s %8s %s\n",
                r.kernel.c_str(), r.how.c_str(), gf, 100 * gf / peak,
                ms(r.ours_vs_blas.min()).c_str(), ms(med).c_str(), ms(r.blas.min()).c_str(),
                ms(r.blas.median()).c_str(), ratio(r.blas.median(), med).c_str(),
                ms(r.ours_py_med).c_str(), ms(r.torch_med).c_str(),
                ratio(r.torch_med, r.ours_py_med).c_str(), r.verified ? "yes" : "NO");
  }
  std::printf(
      "\n(times in ms, medians unless marked min; \"vs X\" = X's median / ours, each pair timed "
      "interleaved\n"
      " in one process: OpenBLAS here, PyTorch in the PyTorch process; above 1 means faster than "
      "X)\n");
  if (opt) {
    std::printf("the optimiser's reports (original and result re-timed interleaved at the end):\n");
    for (const auto& r : rows)
      std::printf(
          "  %-12s x%.2f over the original; first faster kernel verified after %.1f s; timed %s\n",
          r.kernel.c_str(), r.speedup, r.first_s,
          r.cold ? "cold (data evicted before every call)" : "warm");
  }
  std::printf("PyTorch forms (the fastest of the reasonable ones, timed first in its process):\n");
  for (const auto& r : rows) {
    if (!r.torch_form.empty()) std::printf("  %-12s %s\n", r.kernel.c_str(), r.torch_form.c_str());
    if (!r.torch_note.empty()) std::printf("  %-12s %s\n", r.kernel.c_str(), r.torch_note.c_str());
  }

  auto efficiency = [&](const Row& r) {
    return r.one.t.empty() ? 0.0 : r.one.median() / (o.threads * r.ours_vs_one.median());
  };
  if (o.threads > 1) {
    std::printf(
        "\nparallel efficiency (our schedule built for one thread / (%d x built for %d), timed "
        "interleaved):\n",
        o.threads, o.threads);
    for (const auto& r : rows)
      if (!r.one.t.empty())
        std::printf("  %-12s %s ms on one thread, %s ms on %d: efficiency %.2f\n", r.kernel.c_str(),
                    ms(r.one.median()).c_str(), ms(r.ours_vs_one.median()).c_str(), o.threads,
                    efficiency(r));
  }
  auto verdict = [](bool ok) { return ok ? "met" : "MISSED"; };
  if (o.threads > 1) {
    std::printf("\ntargets at %d threads (issue #59):\n", o.threads);
    for (const auto& r : rows) {
      const double med = r.ours_vs_blas.median();
      const double vs_torch =
          r.torch_med > 0 && r.ours_py_med > 0 ? r.torch_med / r.ours_py_med : 0;
      const bool gemm = r.kernel == "matmul-1024" || r.kernel == "mlp";
      if (gemm && r.has_blas)
        std::printf("  %s: %.2fx OpenBLAS (target >= 1.0x): %s\n", r.kernel.c_str(),
                    r.blas.median() / med, verdict(r.blas.median() / med >= 1.0));
      if (gemm || r.kernel == "conv2d-3x3" || r.kernel == "attention")
        std::printf("  %s: %.2fx PyTorch (target >= 1.0x): %s\n", r.kernel.c_str(), vs_torch,
                    vs_torch > 0 ? verdict(vs_torch >= 1.0) : "not measured");
      if (r.kernel == "matmul-1024" || r.kernel == "conv2d-3x3")
        std::printf("  %s: parallel efficiency %.2f (target >= 0.9): %s\n", r.kernel.c_str(),
                    efficiency(r), verdict(efficiency(r) >= 0.9));
      if (!r.verified)
        std::printf("  %s: NOT VERIFIED against the interpreter\n", r.kernel.c_str());
    }
  }

  std::printf("\ntargets (issue #17, one thread):\n");
  for (const auto& r : rows) {
    if (o.threads > 1) break;  // those targets are one-thread figures
    const double med = r.ours_vs_blas.median();
    const double vs_torch = r.torch_med > 0 && r.ours_py_med > 0 ? r.torch_med / r.ours_py_med : 0;
    if (r.kernel == "matmul-1024") {
      const double frac = r.flops / med * 1e-9 / peak, vs_blas = r.blas.median() / med;
      std::printf(
          "  matmul-1024: %.1f%% of peak (target >= 85%%): %s; %.2fx OpenBLAS (target >= 1.0x): "
          "%s\n",
          100 * frac, verdict(frac >= 0.85), vs_blas, verdict(vs_blas >= 1.0));
      std::printf(
          "               (at the min %.1f%% of peak; the register-tile ceiling with B from L2 is "
          "%.1f%%)\n",
          100 * r.flops / r.ours_vs_blas.min() * 1e-9 / peak,
          100 * ceiling.l2_gflops / one_core_peak);
    }
    double want = 0;
    for (const char* k : {"mlp", "conv2d-3x3", "attention"})
      if (r.kernel == k) want = 1.2;
    if (r.kernel == "bmm") want = 1.0;
    for (const char* k : {"softmax", "layernorm", "rmsnorm"})
      if (r.kernel == k) want = 1.5;
    if (want > 0)
      std::printf("  %s: %.2fx PyTorch (target >= %.1fx): %s\n", r.kernel.c_str(), vs_torch, want,
                  vs_torch > 0 ? verdict(vs_torch >= want) : "not measured");
    if (!r.verified) std::printf("  %s: NOT VERIFIED against the interpreter\n", r.kernel.c_str());
  }

  if (!o.json.empty()) {
    util::JsonArray arr;
    for (const auto& r : rows) {
      util::JsonArray trace;
      for (const auto& t : r.trace) trace.add(t);
      arr.raw(util::JsonObject()
                  .add("kernel", r.kernel)
                  .add("how", r.how)
                  .add("flops", r.flops)
                  .add("verified", r.verified)
                  .add("ours_min_s", r.ours_vs_blas.min())
                  .add("ours_median_s", r.ours_vs_blas.median())
                  .add("openblas_min_s", r.blas.min())
                  .add("openblas_median_s", r.blas.median())
                  .add("ours_in_torch_process_min_s", r.ours_py_min)
                  .add("ours_in_torch_process_median_s", r.ours_py_med)
                  .add("torch_min_s", r.torch_min)
                  .add("torch_median_s", r.torch_med)
                  .add("torch_note", r.torch_note)
                  .add("torch_form", r.torch_form)
                  .add("report_speedup", r.speedup)
                  .add("first_measured_s", r.first_s)
                  .add("cache_flushed", r.cold)
                  .add("ours_one_thread_median_s", r.one.median())
                  .add("parallel_efficiency", efficiency(r))
                  .raw("trace", trace.str())
                  .str());
    }
    std::ofstream(o.json) << util::JsonObject()
                                 .add("arch", o.arch)
                                 .add("budget_s", o.budget)
                                 .add("reps", o.reps)
                                 .add("threads", o.threads)
                                 .add("peak_gflops_per_core", one_core_peak)
                                 .raw("tile_ceiling", util::JsonObject()
                                                          .add("mr", ceiling.mr)
                                                          .add("nr", ceiling.nr)
                                                          .add("kc", ceiling.kc)
                                                          .add("l1_gflops", ceiling.l1_gflops)
                                                          .add("l2_gflops", ceiling.l2_gflops)
                                                          .str())
                                 .add("openblas_core", openblas_get_corename())
                                 .raw("kernels", arr.str())
                                 .str()
                          << "\n";
  }
  for (void* h : handles) dlclose(h);
  return 0;
}
