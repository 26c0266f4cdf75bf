// The training loop: N actor envs stepped in parallel on oneTBB feed one learner. train.cpp
// runs the steps of a TrainRun (train_run.h): set-up and checkpoints (train_setup.cpp), resume
// (train_resume.cpp), the rollout/learn loop and its logging (train_loop.cpp), summary.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agents/checkpoint.h"
#include "agents/config.h"
#include "agents/curriculum.h"
#include "agents/dqn.h"
#include "gym/env.h"

namespace perfdojo::agents {

/// How train() talks to its caller.
struct TrainOptions {
  std::string resume;  ///< checkpoint to continue from ("" = fresh run)
  /// Checkpoint whose network a fresh run starts from ("" = random weights): fine-tuning, e.g.
  /// on measured rewards after the cost model. Not with resume.
  std::string init;
  bool progress_bar = true;                 ///< draw a bar on stderr when it is a terminal
  bool quiet = false;                       ///< no periodic lines on stderr
  const std::atomic<bool>* stop = nullptr;  ///< set by a signal handler: finish cleanly
};

/// What a run produced.
struct TrainSummary {
  std::string error;  ///< set when the run could not start (bad config, bad checkpoint...)
  AgentConfig config;
  int64_t global_step = 0, updates = 0, episodes = 0;
  double elapsed_s = 0;
  bool interrupted = false;
  std::vector<RankedKernel> kernels;       ///< training kernels, curriculum order
  std::map<std::string, KernelBest> best;  ///< by URI
  std::vector<float> td_losses;            ///< every update's TD loss, in order
  int demo_transitions = 0;  ///< demonstration transitions learnt from (config.demos > 0)
  /// The actors' backend calls (measured backends; zero on the cost model): programs compiled
  /// and timed, programs found in a cache, and the wall-clock seconds inside the backend.
  env::TimingStats timing;
  std::string checkpoint_path;
};

/// The names in a comma-separated backend list ("cost_model,cost_model:zen3").
std::vector<std::string> backend_list(const std::string& backends);
/// The backend of `backends` (one name, or a list: a run that trains on several targets) that
/// an env for `benchmark` made with `seed` uses: drawn from both, so the demonstrations and
/// DAgger's episodes spread over the list.
std::string backend_for(const std::string& backends, const std::string& benchmark, uint64_t seed);
/// The backend actor `actor` of a run plays on: the list's entries round robin.
std::string actor_backend(const std::string& backends, int actor);
/// The env config the agent trains and evaluates with (observation spaces, reward space...).
env::EnvConfig env_config_for(const AgentConfig& c, const std::string& benchmark, uint64_t seed);

/// The agent's view of an env state: features (and tokens), and the env's mask with the stop
/// action removed unless allow_stop, or unless nothing else is legal.
AgentObs to_agent_obs(const env::Observation& o, const std::vector<uint8_t>& env_mask,
                      const AgentConfig& c);

/// "softmax" for "perfdojo://suite/softmax"; other URIs unchanged.
std::string short_name(const std::string& uri);

/// Trains; never throws for a user error (it is returned in `error`).
TrainSummary train(const AgentConfig& config, const TrainOptions& options);

}  // namespace perfdojo::agents
