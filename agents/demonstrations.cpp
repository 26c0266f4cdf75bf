#include "agents/demonstrations.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <set>
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
                                         std::string* error, int* unreachable,
                                         const std::vector<int>& prefix) {
  env::EnvConfig ec = env_config_for(config, kernel, config.seed);
  ec.max_episode_steps = kDemoEpisodeSteps + static_cast<int>(prefix.size());
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
  // Where the teacher starts: the kernel as written, or where the policy's prefix ends (only
  // its last move timed).
  env::Observation start_obs = obs0;
  std::vector<uint8_t> start_mask = info0.action_mask;
  double start_time = info0.initial_time_s;
  for (size_t i = 0; i < prefix.size(); ++i) {
    env::StepResult r = i + 1 == prefix.size() ? e.step(prefix[i]) : e.step_untimed(prefix[i]);
    if (r.info.illegal_action || r.info.error || r.terminated || r.truncated) {
      *error = "the policy's move " + std::to_string(i) + " (action " + std::to_string(prefix[i]) +
               ") could not be replayed";
      return std::nullopt;
    }
    start_obs = std::move(r.observation);
    start_mask = std::move(r.info.action_mask);
    start_time = r.info.time_s;
  }
  if (!(start_time > 0)) return std::nullopt;
  const auto traces = optimizer::detail::expert_proposals(e.program(), e.target()).all();

  // Plays `trace` from the start state on a fork of the env; `d`, when given, records every
  // step, each one timed (the rewards a learner sees); without it only the last step is timed.
  // Returns the time of the program where it ends (0 when a step could not be taken).
  auto play = [&](const std::vector<transforms::Action>& trace, Demonstration* d) {
    const std::unique_ptr<env::Env> f = e.fork();
    double time_s = 0;
    if (d) d->obs.push_back(to_agent_obs(start_obs, start_mask, config));
    const size_t n = std::min(trace.size(), static_cast<size_t>(kDemoEpisodeSteps));
    for (size_t i = 0; i < n; ++i) {
      const int index = f->encode(trace[i]);
      if (index < 0 || (d && !d->obs.back().mask[static_cast<size_t>(index)])) {
        ++*unreachable;
        return 0.0;
      }
      env::StepResult r = d || i + 1 == n ? f->step(index) : f->step_untimed(index);
      if (r.info.illegal_action || r.info.error) {
        ++*unreachable;
        return 0.0;
      }
      time_s = r.info.time_s;
      if (d) {
        d->actions.push_back(index);
        d->rewards.push_back(r.reward);
        d->obs.push_back(to_agent_obs(r.observation, r.info.action_mask, config));
      }
    }
    return time_s;
  };

  // The teacher's best trace on the backend: the one whose end is fastest, if it gains 1%.
  size_t best = traces.size();
  double best_speedup = 1.01;
  for (size_t t = 0; t < traces.size(); ++t) {
    const double time_s = play(traces[t], nullptr);
    if (time_s > 0 && start_time / time_s > best_speedup) {
      best_speedup = start_time / time_s;
      best = t;
    }
  }
  if (best == traces.size()) return std::nullopt;
  Demonstration d;
  d.kernel = kernel;
  d.speedup = best_speedup;
  if (!(play(traces[best], &d) > 0)) return std::nullopt;
  return d;
}

PolicyEpisode greedy_episode(const AgentConfig& config, const std::string& kernel,
                             const QFunction& q) {
  PolicyEpisode ep;
  auto made = env::Env::make(env_config_for(config, kernel, config.seed));
  if (!made.ok()) return ep;
  env::Env& e = *made.value();
  auto [obs, info] = e.reset();
  if (info.error) return ep;
  ep.times.push_back(info.initial_time_s);
  AgentObs o = to_agent_obs(obs, info.action_mask, config);
  std::map<uint64_t, std::set<int>> taken;
  for (int step = 0; step < e.config().max_episode_steps; ++step) {
    const std::vector<float> qv = q(o);
    std::set<int>& before = taken[ir::structural_hash(e.program())];
    int a = -1;
    for (size_t i = 0; i < o.mask.size() && i < qv.size(); ++i)
      if (o.mask[i] && !before.count(static_cast<int>(i)) &&
          (a < 0 || qv[i] > qv[static_cast<size_t>(a)]))
        a = static_cast<int>(i);
    if (a < 0) break;
    before.insert(a);
    env::StepResult r = e.step(a);
    if (r.info.illegal_action || r.info.error || r.terminated) break;
    ep.actions.push_back(a);
    ep.times.push_back(r.info.time_s);
    if (r.truncated) break;
    o = to_agent_obs(r.observation, r.info.action_mask, config);
  }
  return ep;
}

std::vector<size_t> dagger_states(const PolicyEpisode& episode, int count) {
  std::vector<size_t> out;
  const size_t n = episode.actions.size();
  if (n == 0 || count <= 0 || episode.times.size() != n + 1) return out;
  size_t best = 0;
  for (size_t i = 1; i <= n; ++i)
    if (episode.times[i] > 0 && episode.times[i] < episode.times[best]) best = i;
  if (best > 0) out.push_back(best);
  for (int k = 1; k <= count && static_cast<int>(out.size()) < count; ++k) {
    const size_t at = std::max<size_t>(1, n * static_cast<size_t>(k) / static_cast<size_t>(count));
    if (std::find(out.begin(), out.end(), at) == out.end()) out.push_back(at);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Stores the demonstrations found, in order, and sums them up.
void store(const std::vector<std::optional<Demonstration>>& demos,
           const std::vector<int>& unreachable, DqnLearner& learner, DemoSummary& sum) {
  double log_sum = 0;
  for (size_t i = 0; i < demos.size(); ++i) {
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
}

// One teacher's demonstration to make: a kernel and the moves already made on it.
struct DemoJob {
  const std::string* kernel;
  std::vector<int> prefix;
};

// The teacher's demonstrations of `jobs`, side by side, stored into `learner`; `progress` gets
// the fraction of the jobs done.
DemoSummary demonstrate_and_store(const AgentConfig& config, const std::vector<DemoJob>& jobs,
                                  DqnLearner& learner,
                                  const std::function<void(double)>& progress) {
  DemoSummary sum;
  sum.kernels = static_cast<int>(jobs.size());
  std::vector<std::optional<Demonstration>> demos(jobs.size());
  std::vector<int> unreachable(jobs.size(), 0);
  std::mutex mu;
  size_t done = 0;
  tbb::parallel_for(size_t{0}, jobs.size(), [&](size_t i) {
    std::string error;
    demos[i] = demonstrate(config, *jobs[i].kernel, &error, &unreachable[i], jobs[i].prefix);
    std::lock_guard lock(mu);
    if (!error.empty() && sum.first_error.empty()) sum.first_error = *jobs[i].kernel + ": " + error;
    ++done;
    if (progress) progress(static_cast<double>(done) / static_cast<double>(jobs.size()));
  });
  store(demos, unreachable, learner, sum);
  return sum;
}

}  // namespace

DemoSummary add_demonstrations(const AgentConfig& config, const std::vector<std::string>& kernels,
                               DqnLearner& learner, const std::function<void(double)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<DemoJob> jobs;
  for (const auto& k : kernels) jobs.push_back({&k, {}});
  DemoSummary sum = demonstrate_and_store(config, jobs, learner, progress);
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

DemoSummary add_dagger_demonstrations(const AgentConfig& config,
                                      const std::vector<std::string>& kernels, const QFunction& q,
                                      DqnLearner& learner,
                                      const std::function<void(double)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  // The policy's episodes first (one network, so on this thread), then the teacher's labels.
  std::vector<DemoJob> jobs;
  constexpr double kRolloutShare = 0.3;  // of the progress bar
  for (size_t i = 0; i < kernels.size(); ++i) {
    const PolicyEpisode ep = greedy_episode(config, kernels[i], q);
    for (size_t len : dagger_states(ep, config.dagger_states))
      jobs.push_back(
          {&kernels[i],
           std::vector<int>(ep.actions.begin(), ep.actions.begin() + static_cast<ptrdiff_t>(len))});
    if (progress)
      progress(kRolloutShare * static_cast<double>(i + 1) / static_cast<double>(kernels.size()));
  }
  std::function<void(double)> labelled;
  if (progress) labelled = [&](double f) { progress(kRolloutShare + (1 - kRolloutShare) * f); };
  DemoSummary sum = demonstrate_and_store(config, jobs, learner, labelled);
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace perfdojo::agents
