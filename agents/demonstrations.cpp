#include "agents/demonstrations.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <sstream>

#include "agents/train.h"
#include "gym/dataset.h"
#include "optimizer/search.h"

namespace perfdojo::agents {

namespace {

// A demonstration's episode has room for the longest expert trace (the sketch followed by the
// fused rest: up to a few hundred moves).
constexpr int kDemoEpisodeSteps = 1024;

}  // namespace

std::vector<std::string> demonstration_kernels(const AgentConfig& config,
                                               const std::vector<std::string>& training) {
  std::vector<std::string> out = training;
  std::vector<std::string> families;
  std::stringstream ss(config.demo_families);
  for (std::string f; std::getline(ss, f, ',');)
    if (!f.empty()) families.push_back(f);
  if (families.empty()) return out;
  for (int i = 0; i < config.demos; ++i) {
    const std::string& fam = families[static_cast<size_t>(i) % families.size()];
    out.push_back("perfdojo://gen/" + fam +
                  "?seed=" + std::to_string(10000 + i / static_cast<int>(families.size())));
  }
  return out;
}

std::optional<Demonstration> demonstrate(const AgentConfig& config, const std::string& kernel,
                                         std::string* error, int* unreachable) {
  env::EnvConfig ec = env_config_for(config, kernel, config.seed);
  ec.max_episode_steps = kDemoEpisodeSteps;
  auto made = env::Env::make(ec);
  if (!made.ok()) {
    *error = made.error_text();
    return std::nullopt;
  }
  env::Env& e = *made.value();
  auto [obs0, info0] = e.reset();
  if (info0.error) {
    *error = *info0.error;
    return std::nullopt;
  }
  const ir::Program original = e.program();
  const auto traces = optimizer::detail::expert_proposals(original, e.target()).all();

  // Plays `trace` from the start; `d`, when given, records every step, each one timed (the
  // rewards a learner sees); without it only the last step is timed. Returns the time of the
  // program where it ends (0 when a step could not be taken) and the time of the original.
  struct Played {
    double time_s = 0, initial_s = 0;
  };
  auto play = [&](const std::vector<transforms::Action>& trace, Demonstration* d) {
    Played out;
    auto [o, info] = e.reset();
    if (info.error) return out;
    if (d) d->obs.push_back(to_agent_obs(o, info.action_mask, config));
    const size_t n = std::min(trace.size(), static_cast<size_t>(kDemoEpisodeSteps));
    for (size_t i = 0; i < n; ++i) {
      const int index = e.encode(trace[i]);
      if (index < 0 || (d && !d->obs.back().mask[static_cast<size_t>(index)])) {
        ++*unreachable;
        return Played{};
      }
      env::StepResult r = d || i + 1 == n ? e.step(index) : e.step_untimed(index);
      if (r.info.illegal_action || r.info.error) {
        ++*unreachable;
        return Played{};
      }
      out = {r.info.time_s, r.info.initial_time_s};
      if (d) {
        d->actions.push_back(index);
        d->rewards.push_back(r.reward);
        d->obs.push_back(to_agent_obs(r.observation, r.info.action_mask, config));
      }
    }
    return out;
  };

  // The teacher's best trace on the backend: the one whose end is fastest, if it gains 1%.
  size_t best = traces.size();
  double best_speedup = 1.01;
  for (size_t t = 0; t < traces.size(); ++t) {
    const Played p = play(traces[t], nullptr);
    if (p.time_s > 0 && p.initial_s / p.time_s > best_speedup) {
      best_speedup = p.initial_s / p.time_s;
      best = t;
    }
  }
  if (best == traces.size()) return std::nullopt;
  Demonstration d;
  d.kernel = kernel;
  d.speedup = best_speedup;
  if (!(play(traces[best], &d).time_s > 0)) return std::nullopt;
  return d;
}

DemoSummary add_demonstrations(const AgentConfig& config, const std::vector<std::string>& kernels,
                               DqnLearner& learner, const std::function<void(double)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  DemoSummary sum;
  sum.kernels = static_cast<int>(kernels.size());
  std::vector<std::optional<Demonstration>> demos(kernels.size());
  std::vector<int> unreachable(kernels.size(), 0);
  std::mutex mu;
  int done = 0;
  tbb::parallel_for(size_t{0}, kernels.size(), [&](size_t i) {
    std::string error;
    demos[i] = demonstrate(config, kernels[i], &error, &unreachable[i]);
    std::lock_guard lock(mu);
    if (!error.empty() && sum.first_error.empty()) sum.first_error = kernels[i] + ": " + error;
    ++done;
    if (progress) progress(static_cast<double>(done) / static_cast<double>(kernels.size()));
  });
  double log_sum = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    sum.unreachable += unreachable[i];
    if (!demos[i]) continue;
    const Demonstration& d = *demos[i];
    ++sum.demonstrated;
    log_sum += std::log(d.speedup);
    for (size_t s = 0; s < d.actions.size(); ++s) {
      learner.remember_demo(d.obs[s], d.actions[s], d.rewards[s], d.obs[s + 1]);
      ++sum.transitions;
    }
  }
  if (sum.demonstrated > 0) sum.geomean_speedup = std::exp(log_sum / sum.demonstrated);
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace perfdojo::agents
