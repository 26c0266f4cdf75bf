// Demonstrations: the experts (the micro-kernel sketch and the optimiser's proposals) as a
// teacher. On each kernel the expert traces are scored on the env's backend, the best one is
// replayed through the env's flat action space, and its transitions (observation, action,
// reward, next observation) go to the learner's demonstration buffer, where DQfD's large-margin
// loss teaches the policy the teacher's moves while TD learning keeps their values honest
// (Hester et al. 2018; docs/agents.md, "Learning from demonstrations").
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agents/config.h"
#include "agents/dqn.h"

namespace perfdojo::agents {

/// One kernel's demonstration: the teacher's best trace as flat action indices.
struct Demonstration {
  std::string kernel;
  double speedup = 1;         ///< of the trace's end over the kernel as written, on the backend
  std::vector<AgentObs> obs;  ///< obs[i] before action i; obs.back() after the last
  std::vector<int> actions;
  std::vector<double> rewards;
};

/// What demonstrate() did.
struct DemoSummary {
  int kernels = 0;       ///< kernels tried
  int demonstrated = 0;  ///< with a trace that gains at least 1% on the backend
  int transitions = 0;
  int unreachable =
      0;  ///< traces cut where the flat space could not address a step (a bug: tested)
  double seconds = 0;
  double geomean_speedup = 1;  ///< over the demonstrated kernels
  std::string first_error;  ///< a kernel that could not be loaded or reset, with why ("" if none)
};

/// The kernels demonstrations are drawn from: the training kernels (config.kernels) and
/// config.demos generated instances of config.demo_families, seeds from 10000 on (the
/// evaluation's generator seeds are below 1000).
std::vector<std::string> demonstration_kernels(const AgentConfig& config,
                                               const std::vector<std::string>& training);

/// The teacher's demonstration on one kernel, or nullopt when no expert trace gains 1% there
/// (or, with `error` set, when the kernel could not be loaded or reset).
/// `unreachable` counts expert traces the env could not take step by step (none: tested).
/// With a `prefix` (flat actions from the kernel's start, as a policy played them), the teacher
/// starts where the prefix ends: its traces are proposed for that program, must gain 1% over it,
/// and the demonstration's observations start there (DAgger's labels).
std::optional<Demonstration> demonstrate(const AgentConfig& config, const std::string& kernel,
                                         std::string* error, int* unreachable,
                                         const std::vector<int>& prefix = {});

/// Q-values of one observation (one per action index), as the policy being taught sees them.
using QFunction = std::function<std::vector<float>(const AgentObs&)>;

/// The greedy policy's episode on `kernel` (max_episode_steps moves, the moves already taken
/// from a program met again left out, as evaluate_agent's policy method plays it): its actions
/// and the time after each (times[0] is the original's), on the config's backend. Empty when the
/// kernel cannot be loaded.
struct PolicyEpisode {
  std::vector<int> actions;
  std::vector<double> times;
};
PolicyEpisode greedy_episode(const AgentConfig& config, const std::string& kernel,
                             const QFunction& q);

/// The states of `episode` the teacher labels: where it was fastest, and up to `count - 1`
/// more spread over it (never the start: the first demonstrations cover it). As prefix lengths.
std::vector<size_t> dagger_states(const PolicyEpisode& episode, int count);

/// One DAgger pass (Ross et al. 2011) with the experts as the teacher: the greedy policy `q`
/// plays each kernel; from the states dagger_states() picks, the teacher's best trace (when it
/// gains 1% there) goes to the learner's demonstration buffer, so the policy learns the way on
/// from where its own mistakes lead, not only from the teacher's path. Rollouts run in kernel
/// order on this thread, labels on oneTBB workers; stored in kernel order (reproducible).
DemoSummary add_dagger_demonstrations(const AgentConfig& config,
                                      const std::vector<std::string>& kernels, const QFunction& q,
                                      DqnLearner& learner,
                                      const std::function<void(double)>& progress);

/// Demonstrations on every kernel, on `threads` oneTBB workers, stored in the learner in kernel
/// order (so a run is reproducible); `progress(fraction)` is called as kernels finish.
DemoSummary add_demonstrations(const AgentConfig& config, const std::vector<std::string>& kernels,
                               DqnLearner& learner, const std::function<void(double)>& progress);

}  // namespace perfdojo::agents
