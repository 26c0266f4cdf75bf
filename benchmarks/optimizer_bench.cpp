// The optimiser against the references a performance engineer would reach for, measured in one
// run: for each kernel, the untransformed program, the optimiser's kernel after a fixed budget,
// OpenBLAS cblas_sgemm for the matmul shapes (its best core for this CPU, see blas_reference.h)
// and PyTorch on one thread (benchmarks/torch_baseline.py run by Debian's /usr/bin/python3,
// which has python3-torch). Single core by default: the optimiser gets `threads = 1`, OpenBLAS
// and PyTorch one thread each.
//
//   optimizer_bench [--budget S] [--kernels a,b,...] [--arch A] [--mode M] [--threads N]
//                   [--python PY] [--json FILE]
//
// Needs python3-torch for the PyTorch column (`scripts/bootstrap --bench`). The cost model
// calibrates this machine at the start unless $PERFDOJO_MACHINE_PROFILE names a profile (a
// calibration taken while other jobs run describes a slower machine: prefer one taken quiet).
// Prints one row per kernel with the ratios, then the targets with met / missed.
// --json writes every figure (and each kernel's trace) for scripts/plot_optimizer_bench.py.
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/x86_backend.h"
#include "bench_text.h"
#include "blas_reference.h"
#include "ir/parse.h"
#include "optimizer/optimizer.h"
#include "transforms/action.h"
#include "util/json.h"
#include "util/process.h"

using namespace perfdojo;
using bench::draw_bar;
using bench::ms;
using bench::ratio;
using bench::split;

namespace {

namespace fs = std::filesystem;

struct Options {
  double budget = 300;
  std::vector<std::string> kernels = {"matmul-1024", "softmax", "layernorm", "rmsnorm",
                                      "attention",   "mlp",     "conv2d-3x3"};
  std::string arch, mode = "balanced", python = "/usr/bin/python3", json;
  int threads = 1;
};

int usage(const char* why) {
  std::fprintf(stderr,
               "optimizer_bench: %s\nusage: optimizer_bench [--budget S] [--kernels a,b,...] "
               "[--arch A] [--mode M] [--threads N] [--python PY] [--json FILE]\n",
               why);
  return 2;
}

// The M, N, K of a kernel whose heavy part is one GEMM (its size lines), else nullopt.
std::optional<std::array<int, 3>> gemm_shape(const std::string& name, const ir::Program& p) {
  if (name.rfind("matmul", 0) != 0 && name != "mlp") return std::nullopt;
  std::map<std::string, int64_t> s;
  for (const auto& d : p.sizes) s[d.name] = d.value;
  if (!s.count("M") || !s.count("N") || !s.count("K")) return std::nullopt;
  return std::array<int, 3>{static_cast<int>(s["M"]), static_cast<int>(s["N"]),
                            static_cast<int>(s["K"])};
}

// PyTorch's median seconds per kernel (or its error), from one run of the script.
std::map<std::string, std::pair<double, std::string>> torch_times(const Options& o,
                                                                  const std::string& kernel_dir) {
  std::map<std::string, std::pair<double, std::string>> out;
  std::vector<std::string> argv = {o.python, PERFDOJO_SOURCE_DIR "/benchmarks/torch_baseline.py",
                                   "--json"};
  for (const auto& k : o.kernels) argv.push_back(kernel_dir + "/" + k + ".pdj");
  util::ProcessResult run = util::run_process(argv, {.timeout_s = 600});
  const std::string& text = run.output;
  const int rc = run.exit_code;
  if (rc != 0) {
    for (const auto& k : o.kernels)
      out[k] = {
          0, "the PyTorch script failed (exit " + std::to_string(rc) + "): " + text.substr(0, 200)};
    return out;
  }
  for (const auto& line : split(text, '\n')) {
    util::json::Document d;
    if (util::parse_json(line, &d) || !d.IsObject() || !d.HasMember("kernel")) continue;
    std::string k = d["kernel"].GetString();
    if (d.HasMember("median_s"))
      out[k] = {d["median_s"].GetDouble(), ""};
    else
      out[k] = {0, d.HasMember("error") ? d["error"].GetString() : "no time"};
  }
  return out;
}

struct Row {
  std::string kernel;
  optimizer::Report report;
  std::vector<std::string> trace;
  double blas_s = 0, torch_s = 0;
  std::string torch_note;
};

}  // namespace

int main(int argc, char** argv) {
  bench::choose_openblas_core(argv, "optimizer_bench");
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    try {
      if (a == "--budget")
        o.budget = std::stod(value());
      else if (a == "--kernels")
        o.kernels = split(value(), ',');
      else if (a == "--arch")
        o.arch = value();
      else if (a == "--mode")
        o.mode = value();
      else if (a == "--threads")
        o.threads = std::stoi(value());
      else if (a == "--python")
        o.python = value();
      else if (a == "--json")
        o.json = value();
      else
        return usage(("unknown argument " + a).c_str());
    } catch (const std::exception&) {
      return usage(("bad value for " + a).c_str());
    }
  }
  if (!(o.budget > 0) || o.threads < 1 || o.kernels.empty())
    return usage("bad budget, threads or kernels");
  auto mode = optimizer::mode_by_name(o.mode);
  if (!mode) return usage("unknown --mode");
  if (o.arch.empty()) {
    for (const char* a : {"x86_avx512", "x86_avx2", "x86_64"})
      if (backends::make_backend(a)->available().ok) {
        o.arch = a;
        break;
      }
  }
  const std::string kernel_dir = PERFDOJO_KERNEL_DIR;
  backends::BackendConfig config;  // no result cache: every time in this run is measured now
  config.extra["threads"] = std::to_string(o.threads);
  std::fprintf(stderr, "optimizer_bench: %s, mode %s, %d thread(s), %.0f s per kernel\n",
               o.arch.c_str(), o.mode.c_str(), o.threads, o.budget);
  auto opt = optimizer::Optimizer::make(o.arch, *mode, config);
  if (!opt.ok()) {
    std::fprintf(stderr, "optimizer_bench: %s\n", opt.error_text().c_str());
    return 1;
  }

  // The FMA peak, measured here at the start and at the end (the best counts: a busy machine
  // only ever makes the measurement slower); the profile's calibrated figure is a third source.
  const int lanes = o.arch == "x86_avx512" ? 16 : 8;
  double peak = bench::peak_gflops(lanes);
  std::fprintf(stderr, "PyTorch (%s, 1 thread)...\n", o.python.c_str());
  auto torch = torch_times(o, kernel_dir);
  std::vector<Row> rows;
  for (const auto& name : o.kernels) {
    auto program = ir::load_file(kernel_dir + "/" + name + ".pdj");
    if (!program.ok()) {
      std::fprintf(stderr, "%s\n", program.error_text().c_str());
      return 1;
    }
    Row row;
    row.kernel = name;
    if (auto it = torch.find(name); it != torch.end()) {
      row.torch_s = it->second.first;
      row.torch_note = it->second.second;
    }
    if (auto g = gemm_shape(name, program.value()))
      row.blas_s = bench::sgemm_seconds((*g)[0], (*g)[1], (*g)[2], o.threads, 9);
    const double t0 = bench::now_s();
    auto result = opt.value()->transform(program.value(), o.budget, [&](double f, int e, double s) {
      draw_bar(name, f, e, s, bench::now_s() - t0);
    });
    std::fprintf(stderr, "\n");
    row.report = result.report;
    for (const auto& a : result.trace) row.trace.push_back(transforms::print_action(a));
    rows.push_back(std::move(row));
  }

  const auto& rep0 = rows.front().report;
  peak = std::max({peak, bench::peak_gflops(lanes), rep0.peak_gflops});
  for (auto& r : rows)  // the same fraction, against this peak instead of the profile's
    if (r.report.peak_gflops > 0) r.report.peak_fraction *= r.report.peak_gflops / peak;
  std::printf("optimizer_bench: %s, mode %s, %d thread(s), budget %.0f s per kernel\n",
              o.arch.c_str(), o.mode.c_str(), o.threads, o.budget);
  std::printf("cost model profile: %s\n", rep0.profile.c_str());
  std::printf(
      "FMA peak %.1f GFLOP/s per core (%d lanes; best of a measurement at the start, one "
      "at the end, and the profile's %.1f)\n",
      peak, lanes, rep0.peak_gflops);
  std::printf("OpenBLAS core %s (%s); PyTorch via %s\n\n", openblas_get_corename(),
              bench::openblas_core_note(), o.python.c_str());
  std::printf("%-12s %10s %10s %8s %8s %6s %10s %9s %10s %9s %s\n", "kernel", "orig ms", "opt ms",
              "speedup", "GFLOP/s", "%peak", "BLAS ms", "vs BLAS", "torch ms", "vs torch",
              "verified");
  double log_sum = 0;
  int log_n = 0;
  for (const auto& r : rows) {
    const auto& p = r.report;
    std::printf("%-12s %10s %10s %7.2fx %8.2f %5.1f%% %10s %9s %10s %9s %s\n", r.kernel.c_str(),
                ms(p.baseline_s).c_str(), ms(p.final_s).c_str(), p.speedup, p.gflops,
                100 * p.peak_fraction, ms(r.blas_s).c_str(), ratio(r.blas_s, p.final_s).c_str(),
                ms(r.torch_s).c_str(), ratio(r.torch_s, p.final_s).c_str(),
                p.verified ? "yes" : "NO");
    for (const char* k : {"softmax", "layernorm", "rmsnorm", "attention", "mlp"})
      if (r.kernel == k && r.torch_s > 0 && p.final_s > 0) {
        log_sum += std::log(r.torch_s / p.final_s);
        ++log_n;
      }
  }
  std::printf(
      "\n(\"vs X\" = X's time / the optimised kernel's time: above 1 means faster than X)\n");
  for (const auto& r : rows)
    if (!r.torch_note.empty())
      std::printf("PyTorch, %s: %s\n", r.kernel.c_str(), r.torch_note.c_str());

  std::printf("\ntargets (issue #8):\n");
  auto verdict = [](bool ok) { return ok ? "met" : "MISSED"; };
  for (const auto& r : rows) {
    const auto& p = r.report;
    if (r.kernel == "matmul-1024")
      std::printf(
          "  matmul-1024: %.1f%% of FMA peak (target 75%%): %s; %s of OpenBLAS's speed "
          "(target within 1.25x, i.e. >= 0.80x): %s\n",
          100 * p.peak_fraction, verdict(p.peak_fraction >= 0.75),
          ratio(r.blas_s, p.final_s).c_str(),
          verdict(r.blas_s > 0 && p.final_s > 0 && r.blas_s / p.final_s >= 0.8));
    if (r.kernel.rfind("conv2d", 0) == 0)
      std::printf("  %s: %s PyTorch's speed (target > 1x): %s\n", r.kernel.c_str(),
                  ratio(r.torch_s, p.final_s).c_str(),
                  verdict(r.torch_s > 0 && p.final_s > 0 && r.torch_s > p.final_s));
    for (const char* k : {"softmax", "layernorm", "rmsnorm", "attention", "mlp"})
      if (r.kernel == k)
        std::printf("  %s: %s PyTorch's speed (target > 1x): %s\n", k,
                    ratio(r.torch_s, p.final_s).c_str(),
                    verdict(r.torch_s > 0 && p.final_s > 0 && r.torch_s > p.final_s));
  }
  if (log_n > 0)
    std::printf(
        "  geometric mean over softmax, layernorm, RMSNorm, attention, MLP (%d of 5): "
        "%.2fx PyTorch (target >= 1.5x): %s\n",
        log_n, std::exp(log_sum / log_n), verdict(std::exp(log_sum / log_n) >= 1.5));

  if (!o.json.empty()) {
    util::JsonArray arr;
    for (const auto& r : rows) {
      util::JsonArray trace;
      for (const auto& t : r.trace) trace.add(t);
      const auto& p = r.report;
      arr.raw(util::JsonObject()
                  .add("kernel", r.kernel)
                  .add("baseline_s", p.baseline_s)
                  .add("final_s", p.final_s)
                  .add("speedup", p.speedup)
                  .add("gflops", p.gflops)
                  .add("peak_fraction", p.peak_fraction)
                  .add("openblas_s", r.blas_s)
                  .add("torch_s", r.torch_s)
                  .add("torch_note", r.torch_note)
                  .add("verified", p.verified)
                  .add("evaluations", p.evaluations)
                  .add("measurements", p.measurements)
                  .raw("trace", trace.str())
                  .str());
    }
    std::ofstream out(o.json);
    out << util::JsonObject()
               .add("arch", o.arch)
               .add("mode", o.mode)
               .add("threads", o.threads)
               .add("budget_s", o.budget)
               .add("profile", rep0.profile)
               .add("peak_gflops_per_core", peak)
               .add("openblas_core", openblas_get_corename())
               .raw("kernels", arr.str())
               .str()
        << "\n";
  }
  return 0;
}
