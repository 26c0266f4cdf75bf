// The learner of Max-Q / Double DQN: online and target dueling networks, Adam, replay, the
// exploration schedule and action selection. The rollout loop that drives it is train.h.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "agents/config.h"
#include "agents/q_network.h"
#include "agents/replay_buffer.h"

namespace perfdojo::agents {

/// What the agent sees of one env state.
struct AgentObs {
  std::vector<float> features;
  std::vector<int32_t> tokens;  ///< empty unless the token encoder is on
  std::vector<uint8_t> mask;    ///< legal actions as the agent may take them
};

/// How actions are picked right now.
struct Exploration {
  bool boltzmann = false;
  double epsilon = 0;      ///< epsilon-greedy phases
  double temperature = 1;  ///< Boltzmann phase, in standard deviations of Q over the legal actions
};

/// The phase schedule at `progress` in [0, 1]: epsilon-greedy decaying from eps_start to
/// eps_phase1_end, then Boltzmann with a temperature decaying geometrically from temp_start to
/// temp_end, then epsilon-greedy with eps_final.
Exploration exploration_at(const AgentConfig& c, double progress);

/// Picks one legal action from a Q row (`q` has one entry per action). Boltzmann weights are
/// exp((Q - max Q) / (temperature * sd)), sd the standard deviation of Q over the legal actions:
/// the temperature is relative to how far apart the choices are, so its schedule means the same
/// whether Q sits near 0.3 or near 30 (an absolute temperature of 1 over Q values 0.3 apart was
/// nearly uniform). Equal Q values give a uniform pick.
int select_action(const float* q, const std::vector<uint8_t>& mask, const Exploration& e,
                  std::mt19937_64& rng);

/// Bellman targets from rewards [B], terminal flags [B] (1 = terminated), the target net's value
/// of the online net's choice in s' [B] and whether s' has a legal action [B] (1 = yes).
///   maxq: y = r                         at terminal s', else max(r, gamma * q_next)
///   sum:  y = r + gamma * q_next        (no bootstrap at terminal s')
/// Truncated transitions are not terminal: they bootstrap.
torch::Tensor td_targets(const torch::Tensor& rewards, const torch::Tensor& terminated,
                         const torch::Tensor& q_next, const torch::Tensor& has_legal, double gamma,
                         bool maxq);

/// Loss statistics of one update.
struct UpdateStats {
  double td_loss = 0;
  double q_mean = 0;
  int demos = 0;                ///< demonstration transitions in the batch
  double demo_margin_loss = 0;  ///< DQfD's large-margin loss over them (0 without)
  double demo_accuracy = 0;     ///< share of them whose greedy action is the teacher's
};

/// Networks, optimiser and replay. Safe to share between one acting thread (q_values, remember)
/// and one learning thread (update, publish_to_actors); checkpoints may be taken from either.
class DqnLearner {
 public:
  DqnLearner(const AgentConfig& config, const NetworkShape& shape);

  /// Q-values [B, A] of observations (no gradient), from the actors' copy once there is one,
  /// else from the online network.
  torch::Tensor q_values(const std::vector<const AgentObs*>& obs);
  /// Gives the actors their own copy of the online network, so acting never reads weights that
  /// an update is writing; `publish_to_actors` refreshes it.
  void make_actor_copy();
  void publish_to_actors();
  /// Stores a transition.
  void remember(const AgentObs& s, int action, double reward, const AgentObs& next,
                bool terminated);
  /// Stores a demonstration transition (agents/demonstrations.h) in the demonstration buffer,
  /// which is never overwritten by the agent's own transitions (oldest demonstrations go first
  /// past demo_buffer). Never terminal: the teacher's trace ends where the episode may go on.
  void remember_demo(const AgentObs& s, int action, double reward, const AgentObs& next);
  /// Demonstration transitions stored.
  int demo_size() const;
  /// One gradient step on a replay batch; `beta` anneals prioritised importance weights. With
  /// demonstrations, demo_ratio of the batch comes from them (all of it with `demos_only`, or
  /// while the replay is empty), and their loss adds DQfD's large-margin term
  ///   demo_weight * (max_a [Q(s, a) + demo_margin * (a != a_E)] - Q(s, a_E))
  /// over the legal actions, which pushes the teacher's action a_E above every other by the
  /// margin; the TD loss applies to every transition, the teacher's included.
  UpdateStats update(double beta, bool demos_only = false);
  /// Re-seeds the learner's sampler.
  void seed(uint64_t s) { rng_.seed(s); }

  /// Model and optimiser as bytes (torch archives), for checkpoints.
  std::string model_bytes();
  std::string optimizer_bytes();
  /// Model, optimiser and update count taken together, between two updates.
  struct Snapshot {
    std::string model, optimizer;
    int64_t updates = 0;
  };
  Snapshot snapshot();
  /// Restores them; returns "" or why it failed (never throws).
  std::string load_model_bytes(const std::string& bytes);
  std::string load_optimizer_bytes(const std::string& bytes);

  const NetworkShape& shape() const { return shape_; }
  /// Transitions stored.
  int replay_size() const;
  const ReplayBuffer& replay() const { return replay_; }  ///< capacity and kind (fixed)
  int64_t updates() const { return updates_; }
  void set_updates(int64_t n) { updates_ = n; }
  QNetwork& online() { return online_; }

 private:
  AgentConfig config_;
  NetworkShape shape_;
  QNetwork online_, target_;
  torch::optim::Adam optimizer_;
  ReplayBuffer replay_;
  std::unique_ptr<ReplayBuffer> demos_;  ///< made at the first remember_demo
  std::mt19937_64 rng_;
  std::atomic<int64_t> updates_ = 0;
  QNetwork actor_{nullptr};       ///< the actors' copy (decoupled learning only)
  mutable std::mutex replay_mu_;  ///< replay_ and its priorities
  std::recursive_mutex net_mu_;   ///< online_, target_, optimizer_, rng_ (snapshot nests)
  std::mutex actor_mu_;           ///< actor_
};

/// Stacks observations into the network's input tensors.
void stack_observations(const std::vector<const AgentObs*>& obs, int token_len, int action_count,
                        torch::Tensor& features, torch::Tensor& tokens, torch::Tensor& mask);

}  // namespace perfdojo::agents
