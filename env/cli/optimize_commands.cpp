// `perfdojo optimize`: a kernel in, the fastest verified kernel out.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/cli.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "optimizer/optimizer.h"
#include "transforms/action.h"
#include "util/json.h"
#include "util/process.h"

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

struct Proposals {
  std::vector<std::vector<transforms::Action>> traces;
  std::string note;   ///< what the policy proposed, for the report
  std::string error;  ///< the checkpoint or the policy failed
};

// The trained policy's proposals for FILE. The policy runs in `evaluate_agent --propose`, a
// separate process next to this one: LibTorch stays out of the CLI, and a crash or hang there
// costs the proposals, never the optimisation.
Proposals agent_proposals(const std::string& checkpoint, const std::string& file, double timeout_s,
                          bool policy_only, const std::string& model) {
  Proposals out;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  std::string tool = util::find_executable((self.parent_path() / "evaluate_agent").string());
  if (tool.empty()) tool = util::find_executable("evaluate_agent");
  if (tool.empty()) {
    out.error =
        "--agent needs evaluate_agent next to perfdojo (a build with PERFDOJO_BUILD_AGENTS=ON)";
    return out;
  }
  // "default" (the shipped agent, docs/agents.md) is evaluate_agent's to resolve.
  if (checkpoint != "default" && !fs::exists(checkpoint, ec)) {
    out.error = "cannot read checkpoint '" + checkpoint + "'";
    return out;
  }
  // Evaluations the policy's searches may spend: 40 per second of its time limit, 2000 at most.
  // Its four searches spend about 110 per second on an idle 2-core Xeon (LibTorch's start-up,
  // forward passes and the env's steps); 150 per second ran past the limit there, so the
  // optimisation got no proposals. 40 leaves room for a loaded machine.
  const int evals = static_cast<int>(std::clamp(timeout_s * 40, 100.0, 2000.0));
  // No search starts after 70% of the limit, so the searches done by then are kept (a loaded
  // machine otherwise ran the four past the limit and returned none).
  std::vector<std::string> argv = {
      tool,       "--checkpoint",        checkpoint, "--propose", file,
      "--budget", std::to_string(evals), "--json",   "--seconds", std::to_string(0.7 * timeout_s)};
  if (policy_only) argv.push_back("--policy-only");
  if (!model.empty()) argv.insert(argv.end(), {"--backend", model});
  util::ProcessResult run = util::run_process(argv, {.timeout_s = timeout_s});
  const std::string& text = run.output;
  const int rc = run.exit_code;
  const bool timed_out = run.timed_out;
  // The JSON document is the last line that starts with '{' (stderr is captured too).
  std::string line;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    if (text[pos] == '{') line = text.substr(pos, nl - pos);
    pos = nl + 1;
  }
  util::json::Document d;
  const bool parsed = !line.empty() && !util::parse_json(line, &d) && d.IsObject();
  if (timed_out) {
    out.note =
        "the policy gave no proposals within " + std::to_string(static_cast<int>(timeout_s)) + " s";
    return out;
  }
  if (rc != 0 || !parsed || !d.HasMember("proposals") || !d["proposals"].IsArray()) {
    out.error =
        parsed && d.HasMember("error") && d["error"].IsString()
            ? std::string(d["error"].GetString())
            : "evaluate_agent failed (exit " + std::to_string(rc) + "): " + text.substr(0, 300);
    const std::string prefix = checkpoint + ": error: ";  // report_errors adds its own
    if (out.error.rfind(prefix, 0) == 0) out.error.erase(0, prefix.size());
    return out;
  }
  for (const auto& p : d["proposals"].GetArray()) {
    if (!p.IsObject() || !p.HasMember("trace") || !p["trace"].IsArray()) continue;
    std::string trace_text;
    for (const auto& t : p["trace"].GetArray())
      if (t.IsString()) trace_text += std::string(t.GetString()) + "\n";
    auto trace = transforms::parse_trace(trace_text);
    if (!trace.ok()) continue;  // the optimiser replays and checks each step anyway
    char buf[160];
    std::snprintf(
        buf, sizeof buf, "%s%s: %zu actions, x%.2f on %s", out.note.empty() ? "" : "; ",
        p.HasMember("method") && p["method"].IsString() ? p["method"].GetString() : "?",
        trace.value().size(),
        p.HasMember("speedup") && p["speedup"].IsNumber() ? p["speedup"].GetDouble() : 0.0,
        d.HasMember("backend") && d["backend"].IsString() ? d["backend"].GetString() : "?");
    out.note += buf;
    out.traces.push_back(std::move(trace).value());
  }
  return out;
}

// The cost model the policy proposes on: a built-in core of the target's ISA, so the policy's
// moves are moves of the target (a 16-lane vector is none on an AVX2 core, and a policy playing
// on the AVX-512 model proposed it there): the Zen 3 model for x86_avx2, a cross target's own
// core, and for x86_avx512 the built-in model the shipped agent trained on. (This machine's
// calibrated profile measured no better there: optimize --agent 0.92 of optimize alone against
// 0.98, one run each, docs/agents.md.) x86_64 has no model of its own: its vector moves are
// refused as the proposals are replayed.
std::string proposal_model(const optimizer::Optimizer& o, const std::string& arch) {
  if (arch == "x86_avx2") return "cost_model:zen3";
  if (o.machine_profile().rfind("builtin:", 0) == 0) return "cost_model:" + o.machine_profile();
  return "";
}

int cmd_optimize(const Args& a) {
  if (a.positional.size() != 1) return usage_error("optimize takes exactly one FILE", a.json);
  auto mode = optimizer::mode_by_name(a.get("mode", "balanced"));
  if (!mode)
    return usage_error(
        "unknown --mode '" + a.get("mode") + "' (conservative, balanced, aggressive)", a.json);
  double timeout = 0;
  try {
    timeout = std::stod(a.get("timeout", "60"));
  } catch (const std::exception&) {
    timeout = -1;
  }
  if (!(timeout > 0)) return usage_error("--timeout needs a positive number of seconds", a.json);
  const bool policy_only = a.has("policy-only");
  if (policy_only && !a.has("agent"))
    return usage_error(
        "--policy-only plays a trained policy: give --agent CHECKPOINT (or --agent default)",
        a.json);
  auto program = ir::load_file(a.positional[0]);
  if (!program.ok()) return report_errors(program.errors(), a.json, a.positional[0]);
  backends::BackendConfig config;
  if (const std::string dir = profile_dir(); !dir.empty()) {
    // The machine profile is kept even with --no-cache, which is about measured times.
    config.profile_dir = dir;
    if (!a.has("no-cache")) config.cache_dir = dir;
  }
  {
    int64_t threads = 0, evaluations = 0;
    int rc = 0;
    if (!int_option(a, "threads", 1, 4096, &threads, &rc)) return rc;
    if (threads > 0) config.threads = static_cast<int>(threads);
    if (!int_option(a, "evaluations", 1, 1000000000, &evaluations, &rc)) return rc;
    config.max_evaluations = evaluations;
  }
  if (a.has("cache-flush")) {
    auto how = backends::parse_cache_flush(a.get("cache-flush"));
    if (!how)
      return usage_error(
          "--cache-flush must be auto, on or off, not '" + a.get("cache-flush") + "'", a.json);
    config.cache_flush = *how;
  }
  if (a.has("workers")) {
    std::error_code ec;
    const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
    auto cmd = backends::farm_command(a.get("workers"), self);
    if (auto* e = std::get_if<std::string>(&cmd)) return usage_error(*e, a.json);
    config.farm_command = std::get<std::vector<std::string>>(cmd);
    fprintf(stderr, "starting the measurement farm: %s\n", a.get("workers").c_str());
  }
  if (!std::getenv("PERFDOJO_MACHINE_PROFILE") &&
      !fs::exists(optimizer::cached_profile_path(config.profile_dir)))
    fprintf(stderr, "calibrating this machine for the cost model (once, a few seconds)...\n");
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

  const auto start = std::chrono::steady_clock::now();
  std::string agent_note;
  if (a.has("agent")) {
    // A quarter of the budget (LibTorch alone needs about a second to start), 120 s at most;
    // the policy alone plays one episode and may take half.
    const double agent_s = policy_only
                               ? std::max(3.0, timeout * 0.5)
                               : std::min({120.0, timeout * 0.5, std::max(3.0, timeout * 0.25)});
    auto proposals = agent_proposals(a.get("agent"), a.positional[0], agent_s, policy_only,
                                     proposal_model(*opt.value(), arch));
    if (!proposals.error.empty()) {
      ir::Diagnostic d;
      d.loc.file = a.get("agent");
      d.message = proposals.error;
      return report_errors({d}, a.json, a.get("agent"));
    }
    agent_note = proposals.note;
    fprintf(stderr, "agent: %s\n", agent_note.empty() ? "no proposals" : agent_note.c_str());
    opt.value()->add_proposals(std::move(proposals.traces));
    // The policy's trace measured against the original, nothing else: no sketch, no
    // proposals of the optimiser's own, no search.
    opt.value()->set_policy_only(policy_only);
  }
  const double left =
      timeout - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  g_cancel.store(false);
  auto previous = std::signal(SIGINT, on_sigint);
  auto result = opt.value()->transform(
      program.value(), std::max(1.0, left),
      [&](double f, int evals, double speedup) {
        double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        draw_progress(f, evals, speedup, elapsed);
      },
      &g_cancel);
  std::signal(SIGINT, previous);
  fprintf(stderr, "\n");
  const auto& r = result.report;

  JsonArray trace, curve;
  for (const auto& act : result.trace) trace.add(transforms::print_action(act));
  for (const auto& pt : r.curve)
    curve.raw(JsonObject()
                  .add("elapsed_s", pt.elapsed_s)
                  .add("evaluations", pt.evaluations)
                  .add("best_estimate_s", pt.best_estimate_s)
                  .add("best_measured_s", pt.best_measured_s)
                  .str());
  std::string report =
      JsonObject()
          .add("file", a.positional[0])
          .add("arch", r.arch)
          .add("mode", r.mode)
          .add("baseline_s", r.baseline_s)
          .add("final_s", r.final_s)
          .add("baseline_min_s", r.baseline_min_s)
          .add("final_min_s", r.final_min_s)
          .add("baseline_spread", r.baseline_spread)
          .add("final_spread", r.final_spread)
          .add("final_reps", r.final_reps)
          .add("timing", r.modelled      ? "modelled"
                         : r.interleaved ? "interleaved"
                                         : "separate")
          .add("noisy", r.noisy)
          .add("cache_flushed", r.cache_flushed)
          .add("first_measured_s", r.first_measured_s)
          .add("seed", r.seed)
          .add("budget_s", r.budget_s)
          .add("speedup", r.speedup)
          .add("flops", r.flops)
          .add("original_flops", r.original_flops)
          .add("gflops", r.gflops)
          .add("peak_fraction", r.peak_fraction)
          .add("evaluations", r.evaluations)
          .add("measurements", r.measurements)
          .add("outcome", r.outcome)
          .add("outcome_why", r.outcome_why)
          .add("exit_code", outcome_exit_code(r.outcome))
          .add("verified", r.verified)
          .add("verified_on", r.verified_on)
          .add("device_unrun", r.device_unrun)
          .add("interrupted", r.interrupted)
          .add("flags", r.flags)
          .add("threads", r.threads)
          .add("parallel", r.parallel)
          .add("parallel_candidates", r.parallel_candidates)
          .add("peak_gflops_per_core", r.peak_gflops)
          .add("profile", r.profile)
          .add("agent", a.get("agent"))
          .add("agent_proposals", agent_note)
          .add("policy_only", policy_only)
          .add("proposals_used", r.proposals_used)
          .add("sketches_used", r.sketches_used)
          .add("actions_dropped", r.actions_dropped)
          .add("contracted", r.contracted)
          .add("trace_applies_to", r.contracted > 0 ? "the kernel after `perfdojo fmt --contract`"
                                                    : "the kernel as written")
          .raw("workers", r.workers.empty() ? "null" : r.workers)
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
    std::cout << JsonObject()
                     .add("ok", outcome_exit_code(r.outcome) == kExitOk)
                     .add("outcome", r.outcome)
                     .raw("report", report)
                     .add("text", ir::print_program(result.program))
                     .str()
              << "\n";
  } else {
    std::cout << ir::print_program(result.program);
    fprintf(stderr,
            "%s %s: %.3g s -> %.3g s (x%.2f%s), %.1f GFLOP/s = %.0f%% of peak, %d evaluations, %d "
            "measurements%s\n",
            r.arch.c_str(), r.mode.c_str(), r.baseline_s, r.final_s, r.speedup,
            r.cache_flushed ? ", timed with its data evicted" : "", r.gflops, r.peak_fraction * 100,
            r.evaluations, r.measurements,
            r.verified ? (", verified (" + r.verified_on + ")").c_str() : ", NOT verified");
    if (!r.note.empty()) fprintf(stderr, "note: %s\n", r.note.c_str());
    if (!r.parallel.empty()) fprintf(stderr, "threads: %s\n", r.parallel.c_str());
    fprintf(stderr, "outcome: %s%s%s\n", r.outcome.c_str(), r.outcome_why.empty() ? "" : ": ",
            r.outcome_why.c_str());
  }
  return outcome_exit_code(r.outcome);
}

}  // namespace

std::vector<Command> optimize_commands() {
  return {
      {"optimize",
       "optimize FILE [--arch A (default: widest x86 available; aarch64_neon, aarch64_sve, "
       "riscv64_rvv: modelled, verified under qemu)] [--mode M] [--timeout S] "
       "[--threads N] [--cache-flush auto|on|off (time with the kernel's data evicted first; auto: "
       "memory-bound kernels larger than half the last-level cache)] [--agent CHECKPOINT|default] "
       "[--policy-only (the "
       "policy's one greedy episode, measured; nothing else)] [--workers ray://HOST:PORT] "
       "[--evaluations N (the cost-model beam stops after N evaluations, not at half the budget: "
       "the same candidates on every run)] [--out DIR] [--no-cache]",
       "search for the fastest verified kernel; writes the .pdj, trace, C source, header and "
       "report.json; exit 0 verified or unchanged, 3 not verifiable, 4 wrong, 5 failed",
       {"arch", "mode", "timeout", "out", "agent", "threads", "workers", "cache-flush",
        "evaluations"},
       {"no-cache", "policy-only"},
       cmd_optimize}};
}

}  // namespace perfdojo::cli
