// evaluate_agent: runs a trained checkpoint on held-out kernels (env::test_split() by default)
// with budgets of K backend evaluations, optionally next to the search baselines under the same
// accounting (agents/baselines.h), and writes the table as CSV, pretty text or JSON.
#include <tbb/parallel_for.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "agents/baselines.h"
#include "agents/evaluate.h"
#include "agents/metrics.h"
#include "agents/train.h"
#include "backends/backend.h"
#include "util/args.h"
#include "util/json.h"
#include "util/openblas_core.h"
#include "util/process.h"

using namespace perfdojo;
using namespace perfdojo::agents;

namespace {

void usage(std::FILE* f) {
  std::fprintf(
      f,
      "usage: evaluate_agent [--checkpoint CKPT] [--kernels test] [--budgets 10,100,1000] [--seeds "
      "3]\n"
      "                      [--baselines] [--no-agent] [--beam-width 4] [--epsilon E] [--backend "
      "NAME]\n"
      "                      [--kind-penalty K] [--methods LIST] [--out DIR] [--json] "
      "[--no-progress]\n"
      "\n"
      "Runs the checkpoint's policy on held-out kernels five ways: 'policy' is the policy alone, "
      "one\n"
      "greedy episode of the checkpoint's max_episode_steps moves (no search, sketch or "
      "proposals;\n"
      "its best program counts); 'agent' is Q-guided best-first\n"
      "search (the (program, action) pair with the highest masked Q is timed next, so greedy\n"
      "argmax comes first everywhere); 'agent-rollout' runs a greedy episode, then restarts with\n"
      "epsilon exploration while budget remains; 'agent-greedy' is eager greedy search whose\n"
      "children are timed in the order of Q spread over the kinds of move (each evaluation times\n"
      "the next child of the fastest program found so far; see --kind-penalty); 'agent-probe'\n"
      "is agent-greedy whose every child is first probed:\n"
      "the move and then the policy's greedy moves to the end of the episode, untimed, with one\n"
      "evaluation where they end, before the move alone is timed. One evaluation = one step\n"
      "that times a program this search has not timed before. --baselines adds random search,\n"
      "greedy best-first, beam search and 'eager' (eager greedy search in random order: what the\n"
      "Q order is worth) under the same accounting. Speed-ups are averaged over seeds; on a\n"
      "deterministic backend the searches that draw nothing at random run once per kernel.\n"
      "\n"
      "  --checkpoint CKPT  default runs/default/agent.ckpt; 'default' is the shipped agent\n"
      "  --kernels SPEC     test (default), train, all, or comma-separated names/URIs\n"
      "  --budgets LIST     ascending evaluation budgets (default 10,100,1000)\n"
      "  --seeds N          runs per stochastic method and kernel (default 3)\n"
      "  --methods LIST     only these of the methods chosen (e.g. agent-greedy,greedy)\n"
      "  --no-progress      no progress bar (drawn only when stderr is a terminal)\n"
      "  --epsilon E        exploration of the agent's restarts (default: the checkpoint's "
      "eval_epsilon)\n"
      "  --kind-penalty K   agent-greedy, agent-probe: each move of a kind already in the order\n"
      "                     lowers the next one's score by K standard deviations of Q (default 1;\n"
      "                     0 = the plain order of Q)\n"
      "  --backend NAME     backend to evaluate on (default: the checkpoint's, else cost_model)\n"
      "  --out DIR          where eval.csv, eval.json and eval.png go (default: the checkpoint's "
      "folder)\n"
      "  --json             print the table as JSON on stdout\n"
      "\n"
      "evaluate_agent --checkpoint CKPT --propose FILE [--budget N] [--seconds S] [--policy-only] "
      "[--json]\n"
      "  The policy's proposals for one kernel (a .pdj file or URI), as `perfdojo optimize "
      "--agent`\n"
      "  reads them: the best trace of each of the four searches, each\n"
      "  after N cost-model evaluations (default 2000; agent-probe N/50, each of its evaluations\n"
      "  walking the policy to the end of an episode), with the speed-up the model gives it.\n"
      "  --seconds S: no search starts after S seconds (at least one runs); the rest are skipped\n"
      "  and counted. --policy-only: only the policy's one greedy episode ('policy' above).\n");
}

struct Job {
  std::string kernel, method;
  uint64_t seed;
  SearchResult result;
};

// `--propose`: the policy's four searches on one kernel, their best traces as JSON (or text).
bool print_proposals(Policy& policy, const AgentConfig& base, const std::string& kernel, int budget,
                     double kind_penalty, bool json, bool policy_only, double seconds) {
  const auto start = std::chrono::steady_clock::now();
  env::EnvConfig ec = env_config_for(base, kernel, 0);
  util::JsonArray proposals;
  std::string text, error;
  const std::vector<std::string> methods =
      policy_only
          ? std::vector<std::string>{"policy"}
          : std::vector<std::string>{"agent", "agent-rollout", "agent-greedy", "agent-probe"};
  int skipped = 0, done = 0;
  for (const std::string& method : methods) {
    // Past --seconds no further search starts: what is done is printed (a loaded machine
    // otherwise lost all four to the caller's time limit).
    if (seconds > 0 && done > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) {
      ++skipped;
      continue;
    }
    SearchResult r =
        method == "policy"  ? agent_policy(policy, ec, {ec.max_episode_steps})
        : method == "agent" ? agent_best_first(policy, ec, {budget})
        : method == "agent-greedy"
            ? agent_greedy(policy, ec, {budget}, kEagerTolerance, kind_penalty)
        // Each probe walks the policy to the episode's end (about 25 forward passes
        // per evaluation), and its lead is in its first evaluations: a fiftieth of
        // the budget adds a fifth to the others' time.
        : method == "agent-probe"
            ? agent_probe(policy, ec, {std::max(1, budget / 50)}, kEagerTolerance, kind_penalty)
            : agent_search(policy, ec, {budget}, 1000, base.eval_epsilon);
    if (!r.error.empty()) {
      error = r.error;
      break;
    }
    ++done;
    util::JsonArray trace;
    for (const auto& a : r.best_trace) trace.add(a);
    proposals.raw(util::JsonObject()
                      .add("method", method)
                      .add("speedup", r.best_speedup)
                      .add("evaluations", r.evaluations)
                      .raw("trace", trace.str())
                      .str());
    char line[128];
    std::snprintf(line, sizeof line, "%s: x%.2f after %d evaluations (%s)\n", method.c_str(),
                  r.best_speedup, r.evaluations, ec.backend.c_str());
    text += line;
    for (const auto& a : r.best_trace) text += "  " + a + "\n";
  }
  if (!error.empty()) {
    if (json) std::printf("%s\n", util::JsonObject().add("error", error).str().c_str());
    std::fprintf(stderr, "evaluate_agent: %s\n", error.c_str());
    return false;
  }
  if (json)
    std::printf("%s\n", util::JsonObject()
                            .add("kernel", kernel)
                            .add("backend", ec.backend)
                            .add("skipped_after_deadline", skipped)
                            .raw("proposals", proposals.str())
                            .str()
                            .c_str());
  else
    std::printf(
        "%s%s", text.c_str(),
        skipped ? (std::to_string(skipped) + " searches skipped: past --seconds\n").c_str() : "");
  return true;
}

// Draws eval.json as grouped bars (the source tree's scripts/plot_training.py, matplotlib) into
// `png`; returns "" or why there is no plot.
std::string plot_eval(const std::string& eval_json, const std::string& png) {
  const std::string script = PERFDOJO_SOURCE_DIR "/scripts/plot_training.py";
  if (!std::filesystem::exists(script)) return "no " + script;
  util::ProcessOptions o;
  o.timeout_s = 120;
  util::ProcessResult r =
      util::run_process({"python3", script, "--eval", eval_json, "--out", png}, o);
  if (!r.ok()) {
    std::string why = r.output.substr(r.output.size() > 300 ? r.output.size() - 300 : 0);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return "the plot script failed: " + why;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  // LibTorch's matrix products run on OpenBLAS: at its generic core they took half the learner's
  // time.
  util::choose_openblas_core(argv, "evaluate_agent", /*quiet=*/true);
  util::ArgSpec spec;
  spec.program = "evaluate_agent";
  spec.value_options = {"checkpoint",   "kernels",    "budgets", "seeds",   "methods",
                        "backend",      "out",        "epsilon", "propose", "budget",
                        "kind-penalty", "beam-width", "seconds"};
  spec.switch_options = {"baselines", "no-agent", "no-progress", "policy-only"};
  util::Args args;
  const std::string parse_error = util::parse_args(spec, argc, argv, &args);
  const bool json = args.json;
  auto fail = [&](const std::string& m) {
    if (json) std::printf("%s\n", util::JsonObject().add("error", m).str().c_str());
    std::fprintf(stderr, "evaluate_agent: %s\n", m.c_str());
    return 2;
  };
  if (!parse_error.empty()) return fail(parse_error);
  if (args.help) {
    usage(stdout);
    return 0;
  }
  const bool checkpoint_given = args.has("checkpoint"), baselines = args.has("baselines"),
             no_agent = args.has("no-agent"), progress = !args.has("no-progress"),
             policy_only = args.has("policy-only");
  std::string checkpoint = args.get("checkpoint", "runs/default/agent.ckpt");
  const std::string kernels_spec = args.get("kernels", "test"), backend = args.get("backend"),
                    propose = args.get("propose"), only = args.get("methods");
  std::string out_dir = args.get("out");
  int propose_budget = 2000, seeds = 3, beam_width = 4;
  std::vector<int> budgets = {10, 100, 1000};
  double epsilon = -1, kind_penalty = kKindPenalty;  // epsilon < 0: the checkpoint's
  double propose_seconds = 0;                        // 0: no deadline
  for (const std::string& e : {args.get_int_list("budgets", 1, 1000000000, &budgets),
                               args.get_int("seeds", 1, 1000000, &seeds),
                               args.get_int("beam-width", 1, 1000000, &beam_width),
                               args.get_int("budget", 1, 1000000000, &propose_budget),
                               args.get_double("epsilon", 0, 1, &epsilon),
                               args.get_double("kind-penalty", 0, 100, &kind_penalty),
                               args.get_double("seconds", 0, 1e6, &propose_seconds)})
    if (!e.empty()) return fail(e);
  if (!std::is_sorted(budgets.begin(), budgets.end()))
    return fail("--budgets must be ascending, got '" + args.get("budgets") + "'");

  // The policy (unless --no-agent, or --baselines with no checkpoint at the default path).
  std::shared_ptr<Policy> policy;
  AgentConfig base;
  if (!no_agent && (checkpoint_given || !baselines || std::filesystem::exists(checkpoint))) {
    checkpoint = resolve_checkpoint(checkpoint);
    auto p = Policy::load(checkpoint);
    if (!p.ok()) return fail(p.error_text());
    policy = p.value();
    base = policy->config();
  } else if (!no_agent) {
    std::fprintf(stderr, "evaluate_agent: no checkpoint at %s; running the baselines only\n",
                 checkpoint.c_str());
  }
  if (!policy && !baselines) return fail("nothing to evaluate (--no-agent without --baselines)");
  if (!backend.empty()) base.backend = backend;
  // A checkpoint trained on several backends is evaluated on the first (--backend picks another).
  if (const auto list = backend_list(base.backend); list.size() > 1) base.backend = list[0];
  if (!propose.empty()) {
    if (!policy) return fail("--propose needs a checkpoint");
    // The searches price their moves with the cost model, even for a policy fine-tuned on
    // measured time (train_agent --init --backend x86_avx512): the optimiser measures what they
    // propose, and 128 compiles would not fit its share of the time limit. --backend overrides.
    if (backend.empty() && !backends::is_cost_model(base.backend)) base.backend = "cost_model";
    return print_proposals(*policy, base, propose, propose_budget, kind_penalty, json, policy_only,
                           propose_seconds)
               ? 0
               : 1;
  }
  if (epsilon < 0) epsilon = base.eval_epsilon;
  if (out_dir.empty())
    out_dir = policy ? std::filesystem::path(checkpoint).parent_path().string()
                     : std::string("runs/eval");
  if (out_dir.empty()) out_dir = ".";
  auto uris = resolve_kernels(kernels_spec);
  if (!uris.ok()) return fail(uris.error_text());

  std::vector<std::string> methods;
  if (policy)
    methods.insert(methods.end(),
                   {"policy", "agent", "agent-rollout", "agent-greedy", "agent-probe"});
  if (baselines) methods.insert(methods.end(), {"random", "greedy", "beam", "eager"});
  if (!only.empty()) {
    // --methods: a subset of those the other flags chose, in the usual order.
    std::set<std::string> wanted;
    std::stringstream ss(only);
    for (std::string m; std::getline(ss, m, ',');) {
      if (std::find(methods.begin(), methods.end(), m) == methods.end())
        return fail("--methods: '" + m + "' is not among the methods run here (" +
                    (policy ? std::string("agent methods need a checkpoint; ")
                            : std::string("no checkpoint; ")) +
                    "baselines need --baselines)");
      wanted.insert(m);
    }
    std::erase_if(methods, [&](const std::string& m) { return !wanted.count(m); });
  }
  // On a deterministic backend the searches that draw nothing at random (best-first, and eager
  // greedy in the order of Q, probed or not) give every seed the same result: run them once.
  bool deterministic = false;  // resolve_kernels refuses a spec matching no kernel
  if (auto e = env::Env::make(env_config_for(base, uris.value().front(), 0)); e.ok())
    deterministic = e.value()->deterministic();
  auto draws_nothing = [](const std::string& m) {
    return m == "policy" || m == "agent" || m == "agent-greedy" || m == "agent-probe";
  };
  std::vector<Job> jobs;
  std::vector<size_t> copies_of;  // jobs[i] with copies_of[i] != i takes that job's result
  for (const auto& k : uris.value())
    for (const auto& m : methods)
      for (int s = 0; s < seeds; ++s) {
        copies_of.push_back(s > 0 && deterministic && draws_nothing(m) ? jobs.size() - s
                                                                       : jobs.size());
        jobs.push_back({k, m, static_cast<uint64_t>(1000 + s), {}});
      }
  std::vector<size_t> run;
  for (size_t i = 0; i < jobs.size(); ++i)
    if (copies_of[i] == i) run.push_back(i);
  std::fprintf(stderr,
               "evaluate_agent: %zu kernels x %zu methods x %d seeds (%zu searches), budgets up to "
               "%d evaluations\n",
               uris.value().size(), methods.size(), seeds, run.size(), budgets.back());
  ProgressBar bar(progress);
  std::mutex bar_mutex;
  size_t finished = 0;
  const auto started = std::chrono::steady_clock::now();
  tbb::parallel_for(size_t{0}, run.size(), [&](size_t r) {
    Job& j = jobs[run[r]];
    env::EnvConfig ec = env_config_for(base, j.kernel, 0);
    if (j.method == "policy")
      j.result = agent_policy(*policy, ec, budgets);
    else if (j.method == "agent")
      j.result = agent_best_first(*policy, ec, budgets);
    else if (j.method == "agent-rollout")
      j.result = agent_search(*policy, ec, budgets, j.seed, epsilon);
    else if (j.method == "agent-greedy")
      j.result = agent_greedy(*policy, ec, budgets, kEagerTolerance, kind_penalty);
    else if (j.method == "agent-probe")
      j.result = agent_probe(*policy, ec, budgets, kEagerTolerance, kind_penalty);
    else if (j.method == "eager")
      j.result = eager_random_search(ec, budgets, j.seed);
    else if (j.method == "random")
      j.result = random_search(ec, budgets, j.seed);
    else if (j.method == "greedy")
      j.result = greedy_search(ec, budgets, j.seed);
    else
      j.result = beam_search(ec, budgets, j.seed, beam_width);
    std::lock_guard<std::mutex> lock(bar_mutex);
    ++finished;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    bar.update(static_cast<double>(finished) / run.size(), elapsed,
               std::to_string(finished) + "/" + std::to_string(run.size()) + " searches, " +
                   std::to_string(static_cast<int>(finished / std::max(elapsed, 1e-9) * 60)) +
                   "/min");
  });
  bar.clear();
  for (size_t i = 0; i < jobs.size(); ++i)
    if (copies_of[i] != i) jobs[i].result = jobs[copies_of[i]].result;
  for (const auto& j : jobs)
    if (!j.result.error.empty())
      return fail(short_name(j.kernel) + " (" + j.method + "): " + j.result.error);

  // mean[kernel][method][budget index] over seeds; geomean over kernels per method and budget.
  std::map<std::string, std::map<std::string, std::vector<double>>> mean;
  for (const auto& j : jobs) {
    auto& v = mean[j.kernel][j.method];
    v.resize(budgets.size(), 0.0);
    for (size_t b = 0; b < budgets.size(); ++b) v[b] += j.result.best_at[b] / seeds;
  }
  std::map<std::string, std::vector<double>> geomean;
  for (const auto& m : methods) {
    std::vector<double> g(budgets.size(), 0.0);
    for (const auto& k : uris.value())
      for (size_t b = 0; b < budgets.size(); ++b)
        g[b] += std::log(mean[k][m][b]) / uris.value().size();
    for (auto& x : g) x = std::exp(x);
    geomean[m] = g;
  }

  std::filesystem::create_directories(out_dir);
  std::ofstream csv(out_dir + "/eval.csv");
  csv << "kernel,method,budget,seed,speedup,evaluations\n";
  for (const auto& j : jobs)
    for (size_t b = 0; b < budgets.size(); ++b)
      csv << short_name(j.kernel) << "," << j.method << "," << budgets[b] << "," << j.seed << ","
          << j.result.best_at[b] << "," << std::min(j.result.evaluations, budgets[b]) << "\n";
  for (const auto& m : methods)
    for (size_t b = 0; b < budgets.size(); ++b)
      csv << "geomean," << m << "," << budgets[b] << ",mean," << geomean[m][b] << ",\n";

  util::JsonArray rows;
  for (const auto& k : uris.value())
    for (const auto& m : methods)
      for (size_t b = 0; b < budgets.size(); ++b) {
        util::JsonObject o;
        o.add("kernel", short_name(k))
            .add("method", m)
            .add("budget", budgets[b])
            .add("speedup", mean[k][m][b]);
        rows.raw(o.str());
      }
  util::JsonObject g;
  for (const auto& m : methods) {
    util::JsonObject per;
    for (size_t b = 0; b < budgets.size(); ++b) per.add(std::to_string(budgets[b]), geomean[m][b]);
    g.raw(m, per.str());
  }
  util::JsonArray budgets_json;
  for (int b : budgets) budgets_json.add(static_cast<int64_t>(b));
  util::JsonObject doc;
  doc.add("checkpoint", policy ? checkpoint : "").add("backend", base.backend).add("seeds", seeds);
  doc.add("epsilon", epsilon).add("beam_width", beam_width).raw("budgets", budgets_json.str());
  doc.raw("results", rows.str()).raw("geomean", g.str());
  {
    std::ofstream f(out_dir + "/eval.json");
    f << doc.str() << "\n";
  }
  const std::string png = out_dir + "/eval.png",
                    plot_error = plot_eval(out_dir + "/eval.json", png);
  if (json) {
    doc.add("plot", plot_error.empty() ? png : "");
    if (!plot_error.empty()) doc.add("plot_error", plot_error);
    std::printf("%s\n", doc.str().c_str());
    return 0;
  }
  for (size_t b = 0; b < budgets.size(); ++b) {
    std::printf("\nbest speed-up after %d evaluations (mean of %d seeds)\n%-18s", budgets[b], seeds,
                "kernel");
    for (const auto& m : methods) std::printf(" %9s", m.c_str());
    std::printf("\n");
    for (const auto& k : uris.value()) {
      std::printf("%-18s", short_name(k).c_str());
      for (const auto& m : methods) std::printf(" %8.2fx", mean[k][m][b]);
      std::printf("\n");
    }
    std::printf("%-18s", "geomean");
    for (const auto& m : methods) std::printf(" %8.2fx", geomean[m][b]);
    std::printf("\n");
  }
  // The summary: geomean best speed-up over the kernels, methods x budgets.
  std::printf("\ngeomean best speed-up over %zu kernels (mean of %d seeds)\n%-16s",
              uris.value().size(), seeds, "method");
  for (int b : budgets) std::printf(" %9s", ("budget " + std::to_string(b)).c_str());
  std::printf("\n");
  for (const auto& m : methods) {
    std::printf("%-16s", m.c_str());
    for (size_t b = 0; b < budgets.size(); ++b) std::printf(" %8.2fx", geomean[m][b]);
    std::printf("\n");
  }
  std::printf("\ntable: %s/eval.csv, %s/eval.json\n", out_dir.c_str(), out_dir.c_str());
  if (plot_error.empty())
    std::printf("plot: %s\n", png.c_str());
  else
    std::printf("plot: none (%s)\n", plot_error.c_str());
  return 0;
}
