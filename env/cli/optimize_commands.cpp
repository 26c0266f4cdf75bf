// `perfdojo optimize`: a kernel in, the fastest verified kernel out.
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/cli.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "optimizer/optimizer.h"
#include "transforms/action.h"
#include "util/json.h"

namespace perfdojo::cli {
namespace {

namespace fs = std::filesystem;
using util::JsonArray;
using util::JsonObject;

std::atomic<bool> g_cancel{false};
extern "C" void on_sigint(int) { g_cancel.store(true); }

// One line on stderr, redrawn in place: a bar, the time used, evaluations/s and the best so far.
void draw_progress(double fraction, int evaluations, double speedup, double elapsed) {
  const int width = 30;
  int filled = static_cast<int>(fraction * width);
  std::string bar(filled, '#');
  bar += std::string(width - filled, '.');
  double rate = elapsed > 0 ? evaluations / elapsed : 0;
  double eta = fraction > 0 ? elapsed * (1 - fraction) / fraction : 0;
  fprintf(stderr, "\r[%s] %3.0f%%  %d evals  %.0f evals/s  ETA %.0fs  best x%.2f   ", bar.c_str(),
          fraction * 100, evaluations, rate, eta, speedup);
  fflush(stderr);
}

std::string write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) return "cannot write '" + path.string() + "'";
  out << text;
  return out ? "" : "error writing '" + path.string() + "'";
}

int cmd_optimize(const Args& a) {
  if (a.positional.size() != 1) return usage_error("optimize takes exactly one FILE", a.json);
  auto mode = optimizer::mode_by_name(a.get("mode", "balanced"));
  if (!mode) return usage_error("unknown --mode '" + a.get("mode") + "' (conservative, balanced, aggressive)", a.json);
  double timeout = 0;
  try {
    timeout = std::stod(a.get("timeout", "60"));
  } catch (const std::exception&) {
    timeout = -1;
  }
  if (!(timeout > 0)) return usage_error("--timeout needs a positive number of seconds", a.json);
  if (a.values.count("agent"))
    return usage_error("--agent: policy-guided search is not available in this build (see docs/optimizer.md)", a.json);
  auto program = ir::load_file(a.positional[0]);
  if (!program.ok()) return report_errors(program.errors(), a.json, a.positional[0]);
  backends::BackendConfig config;
  if (!a.has("no-cache")) {
    if (const char* home = std::getenv("HOME")) config.cache_dir = std::string(home) + "/.cache/perfdojo";
  }
  // Without --arch, the widest ISA this CPU runs.
  std::string arch = a.get("arch");
  if (arch.empty()) {
    for (const char* candidate : {"x86_avx512", "x86_avx2", "x86_64"}) {
      auto b = backends::make_backend(candidate, config);
      if (b && b->available().ok) {
        arch = candidate;
        break;
      }
    }
  }
  auto opt = optimizer::Optimizer::make(arch, *mode, config);
  if (!opt.ok()) return usage_error(opt.error_text(), a.json);

  g_cancel.store(false);
  auto previous = std::signal(SIGINT, on_sigint);
  const auto start = std::chrono::steady_clock::now();
  auto result = opt.value()->transform(program.value(), timeout, [&](double f, int evals, double speedup) {
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    draw_progress(f, evals, speedup, elapsed);
  }, &g_cancel);
  std::signal(SIGINT, previous);
  fprintf(stderr, "\n");
  const auto& r = result.report;

  JsonArray trace, curve;
  for (const auto& act : result.trace) trace.add(transforms::print_action(act));
  for (const auto& pt : r.curve)
    curve.raw(JsonObject().add("elapsed_s", pt.elapsed_s).add("evaluations", pt.evaluations)
                  .add("best_estimate_s", pt.best_estimate_s).str());
  std::string report = JsonObject()
                           .add("file", a.positional[0])
                           .add("arch", r.arch)
                           .add("mode", r.mode)
                           .add("baseline_s", r.baseline_s)
                           .add("final_s", r.final_s)
                           .add("speedup", r.speedup)
                           .add("gflops", r.gflops)
                           .add("peak_fraction", r.peak_fraction)
                           .add("evaluations", r.evaluations)
                           .add("measurements", r.measurements)
                           .add("verified", r.verified)
                           .add("interrupted", r.interrupted)
                           .add("flags", r.flags)
                           .add("note", r.note)
                           .raw("trace", trace.str())
                           .raw("curve", curve.str())
                           .str();
  std::string out_dir = a.get("out");
  if (!out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) return usage_error("cannot create '" + out_dir + "': " + ec.message(), a.json);
    fs::path d(out_dir);
    std::string stem = fs::path(a.positional[0]).stem().string();
    for (auto [name, text] : std::vector<std::pair<std::string, std::string>>{
             {stem + ".pdj", ir::print_program(result.program)},
             {"trace.txt", transforms::print_trace(result.trace)},
             {"kernel.c", result.c_source},
             {"kernel.h", result.c_header},
             {"report.json", report + "\n"}}) {
      if (auto err = write_file(d / name, text); !err.empty()) return usage_error(err, a.json);
    }
  }
  if (a.json) {
    std::cout << JsonObject().add("ok", true).raw("report", report).add("text", ir::print_program(result.program)).str()
              << "\n";
  } else {
    std::cout << ir::print_program(result.program);
    fprintf(stderr, "%s %s: %.3g s -> %.3g s (x%.2f), %.1f GFLOP/s = %.0f%% of peak, %d evaluations, %d measurements%s\n",
            r.arch.c_str(), r.mode.c_str(), r.baseline_s, r.final_s, r.speedup, r.gflops, r.peak_fraction * 100,
            r.evaluations, r.measurements, r.verified ? ", verified" : ", NOT verified");
    if (!r.note.empty()) fprintf(stderr, "note: %s\n", r.note.c_str());
  }
  return r.verified ? kExitOk : kExitInvalid;
}

}  // namespace

std::vector<Command> optimize_commands() {
  return {{"optimize", "optimize FILE [--arch A (default: widest available)] [--mode M] [--timeout S] [--out DIR] [--no-cache]",
           "search for the fastest verified kernel; writes the .pdj, trace, C source, header and report.json",
           {"arch", "mode", "timeout", "out", "agent"}, {"no-cache"}, cmd_optimize}};
}

}  // namespace perfdojo::cli
