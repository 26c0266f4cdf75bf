// train_agent: trains the Max-Q / Double DQN agent (agents/train.h) and reports, per training
// kernel, the best speed-up found and its trace; --measure times those programs on x86_avx512.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "agents/config.h"
#include "agents/metrics.h"
#include "agents/train.h"
#include "backends/backend.h"
#include "gym/dataset.h"
#include "target/target_of.h"
#include "transforms/registry.h"
#include "util/args.h"
#include "util/json.h"
#include "util/openblas_core.h"

using namespace perfdojo;
using namespace perfdojo::agents;

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

void usage(std::FILE* f) {
  std::fprintf(
      f,
      "usage: train_agent [--config FILE] [--KEY VALUE ...] [--resume CKPT | --init CKPT] "
      "[--measure]\n"
      "       [--json]\n"
      "\n"
      "Trains the Max-Q dueling Double DQN agent on the training split with the cost model\n"
      "(10 minutes by default), then prints per kernel the best speed-up found and its trace.\n"
      "\n"
      "  --config FILE     key=value lines or a flat JSON object (flags override it)\n"
      "  --resume CKPT     continue a run from its checkpoint toward the same budget (raise\n"
      "                    --minutes or --steps to extend it); architecture must match\n"
      "  --init CKPT       a new run that starts from the checkpoint's network (its\n"
      "                    architecture; counters, optimiser and replay fresh): fine-tuning,\n"
      "                    e.g. --backend x86_avx512 on measured rewards (docs/agents.md)\n"
      "  --measure         also time each kernel's best program on x86_avx512\n"
      "  --json            print the final summary as JSON on stdout\n"
      "  --no-progress     no progress bar; --quiet: no periodic lines either\n"
      "  --steps N         alias of --total_steps; --out DIR alias of --out_dir\n"
      "\n"
      "Settings (--KEY VALUE or --KEY=VALUE; defaults in brackets):\n");
  AgentConfig d;
  for (const auto& field : config_fields())
    std::fprintf(f, "  --%-20s %s [%s]\n", field.name, field.help,
                 get_field(d, field.name).c_str());
}

struct Measured {
  std::string error;
  double initial_s = 0, best_s = 0;
};

// Times the original kernel and its best program on x86_avx512 (the brief's deployment target).
Measured measure_on_x86(const std::string& uri, const std::vector<std::string>& trace) {
  Measured m;
  auto b = backends::make_backend("x86_avx512");
  if (!b) return {"no backend named x86_avx512 in this build"};
  if (auto a = b->available(); !a.ok) return {"x86_avx512 is not available here: " + a.why};
  const transforms::Target target = target_of(*b);
  auto p = env::load_benchmark(uri);
  if (!p.ok()) return {p.error_text()};
  std::vector<transforms::Action> actions;
  for (size_t i = 0; i < trace.size(); ++i) {
    auto a = transforms::parse_action(trace[i], "<trace>", static_cast<int>(i) + 1);
    if (!a.ok()) return {a.error_text()};
    actions.push_back(a.value());
  }
  auto best = transforms::replay(p.value(), actions, target);
  if (!best.ok()) return {"the trace does not replay on x86_avx512's target: " + best.error_text()};
  backends::MeasureOptions o;
  auto m0 = b->measure(p.value(), o);
  if (!m0.ok()) return {"original: " + *m0.error};
  auto m1 = b->measure(best.value(), o);
  if (!m1.ok()) return {"best program: " + *m1.error};
  m.initial_s = m0.median_s;
  m.best_s = m1.median_s;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  // LibTorch's matrix products run on OpenBLAS: at its generic core they took half the learner's
  // time.
  util::choose_openblas_core(argv, "train_agent", /*quiet=*/true);
  // Every setting of the config is an option (--learning_starts or --learning-starts); the bool
  // ones are switches that may be set explicitly (--curriculum false).
  util::ArgSpec spec;
  spec.program = "train_agent";
  spec.value_options = {"config", "resume", "init"};
  spec.switch_options = {"measure", "no-progress", "quiet"};
  spec.aliases = {{"steps", "total_steps"}, {"out", "out_dir"}};
  for (const auto& f : config_fields()) {
    const std::string d = get_field(AgentConfig{}, f.name);
    (d == "true" || d == "false" ? spec.bool_options : spec.value_options).insert(f.name);
    std::string dashed = f.name;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    if (dashed != f.name) spec.aliases[dashed] = f.name;
  }
  util::Args args;
  const std::string parse_error = util::parse_args(spec, argc, argv, &args);
  const bool json = args.json, measure = args.has("measure"), quiet = args.has("quiet");
  const bool progress = !args.has("no-progress") && !quiet;
  auto fail = [&](const std::string& m) {
    if (json) std::printf("%s\n", util::JsonObject().add("error", m).str().c_str());
    std::fprintf(stderr, "train_agent: %s\n", m.c_str());
    return 2;
  };
  if (!parse_error.empty()) return fail(parse_error);
  if (args.help) {
    usage(stdout);
    return 0;
  }
  const std::string config_file = args.get("config"), resume = args.get("resume"),
                    init = args.get("init");

  // Defaults, or the checkpoint's config on resume; then the config file; then the flags.
  AgentConfig config;
  if (!resume.empty()) {
    auto ck = load_checkpoint(resume);
    if (!ck.ok()) return fail(ck.error_text());
    config = ck.value().config;
    // The checkpoint does not name its folder: the resumed run writes beside it.
    const std::string folder = std::filesystem::path(resume).parent_path().string();
    config.out_dir = folder.empty() ? "." : folder;
  }
  if (!init.empty()) {
    // A new run from the checkpoint's network: its architecture, everything else as given.
    auto ck = load_checkpoint(init);
    if (!ck.ok()) return fail(ck.error_text());
    for (const auto& f : config_fields())
      if (f.role == FieldRole::kArchitecture)
        if (auto e = set_field(config, f.name, get_field(ck.value().config, f.name)); !e.empty())
          return fail(init + ": " + e);
  }
  if (!config_file.empty())
    if (auto e = load_config_file(config, config_file); !e.empty()) return fail(e);
  for (const auto& [k, v] : args.values)
    if (k != "config" && k != "resume" && k != "init")
      if (auto e = set_field(config, k, v); !e.empty()) return fail(e);
  if (auto e = validate(config); !e.empty()) return fail(e);

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  TrainOptions options;
  options.resume = resume;
  options.init = init;
  options.progress_bar = progress;
  options.quiet = quiet;
  options.stop = &g_stop;
  TrainSummary s = train(config, options);
  if (!s.error.empty()) return fail(s.error);

  // ---- Report: per kernel (curriculum order) the best speed-up and the trace that reaches it.
  util::JsonArray kernels;
  double log_sum = 0;
  int counted = 0;
  if (!json) {
    std::printf("\ntrained %lld steps, %lld episodes, %lld updates in %s%s; checkpoint %s\n",
                static_cast<long long>(s.global_step), static_cast<long long>(s.episodes),
                static_cast<long long>(s.updates), format_duration(s.elapsed_s).c_str(),
                s.interrupted ? " (interrupted)" : "", s.checkpoint_path.c_str());
    std::printf("\n%-22s %10s %9s %12s %12s%s\n", "kernel", "complexity", "speed-up", "initial",
                "best", measure ? "   x86_avx512 (initial -> best)" : "");
  }
  for (const auto& k : s.kernels) {
    auto it = s.best.find(k.uri);
    KernelBest b = it != s.best.end() ? it->second : KernelBest{};
    log_sum += std::log(std::max(b.speedup, 1e-9));
    ++counted;
    Measured m;
    if (measure) m = measure_on_x86(k.uri, b.trace);
    util::JsonArray trace;
    for (const auto& a : b.trace) trace.add(a);
    util::JsonObject o;
    o.add("uri", k.uri)
        .add("name", short_name(k.uri))
        .add("complexity", k.complexity)
        .add("speedup", b.speedup);
    o.add("initial_time_s", b.initial_time_s)
        .add("best_time_s", b.best_time_s)
        .raw("trace", trace.str());
    if (measure) {
      util::JsonObject mo;
      if (!m.error.empty())
        mo.add("error", m.error);
      else
        mo.add("initial_time_s", m.initial_s)
            .add("best_time_s", m.best_s)
            .add("speedup", m.initial_s / m.best_s);
      o.raw("x86_avx512", mo.str());
    }
    kernels.raw(o.str());
    if (!json) {
      std::string mtext;
      if (measure) {
        char buf[128];
        if (m.error.empty())
          std::snprintf(buf, sizeof buf, "   %.3g s -> %.3g s (%.2fx)", m.initial_s, m.best_s,
                        m.initial_s / m.best_s);
        mtext = m.error.empty() ? buf : "   " + m.error;
      }
      std::printf("%-22s %10.1f %8.2fx %12.4g %12.4g%s\n", short_name(k.uri).c_str(), k.complexity,
                  b.speedup, b.initial_time_s, b.best_time_s, mtext.c_str());
      for (size_t i = 0; i < b.trace.size(); ++i)
        std::printf("    %2zu. %s\n", i + 1, b.trace[i].c_str());
    }
  }
  double geomean = counted ? std::exp(log_sum / counted) : 1.0;
  util::JsonObject summary;
  summary.add("global_step", s.global_step).add("episodes", s.episodes).add("updates", s.updates);
  summary.add("elapsed_s", s.elapsed_s)
      .add("interrupted", s.interrupted)
      .add("checkpoint", s.checkpoint_path);
  // The measurement budget the run spent (a measured backend; zeros on the cost model).
  summary.raw("measurements", util::JsonObject()
                                  .add("measured", s.timing.measured)
                                  .add("cached", s.timing.cached)
                                  .add("seconds", s.timing.seconds)
                                  .str());
  summary.add("geomean_speedup", geomean)
      .raw("config", to_json(s.config))
      .raw("kernels", kernels.str());
  std::ofstream(s.config.out_dir + "/summary.json") << summary.str() << "\n";
  if (json)
    std::printf("%s\n", summary.str().c_str());
  else
    std::printf(
        "\ngeomean best speed-up over %d training kernels: %.2fx (summary: %s/summary.json)\n",
        counted, geomean, s.config.out_dir.c_str());
  return 0;
}
