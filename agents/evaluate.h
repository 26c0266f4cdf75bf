// A trained policy loaded from a checkpoint, and two budgeted searches with it (budget accounting
// is EvalBudget's, baselines.h, the same as the baselines'):
//  - agent_search: rollouts; episode 1 is purely greedy (masked argmax of Q), later episodes
//    restart and take a random legal action with probability eval_epsilon, so a larger budget
//    buys new programs instead of replaying the greedy trace.
//  - agent_best_first: Q-guided best-first; every (program, legal action) pair seen waits in one
//    queue ranked by the value Q predicts for it (maxq: the peak log speed-up reachable, sum: the
//    current log speed-up plus the predicted gain), and the best pair is timed next. Greedy
//    masked argmax is its first choice at every program; the budget widens the search where Q
//    is least sure.
//  - agent_greedy: eager greedy search (baselines.h) with each program's children timed in the
//    order of Q: the measurements say which program to go on from, the policy which move to try
//    there first. The order spreads over the kinds of move: each move of a kind already placed
//    lowers the next one's score by kind_penalty standard deviations of Q over the legal moves,
//    so where Q ranks a dozen splits first, its best tile and vectorisation still come early
//    (on kernels the policy never saw, its top choices are often one kind of move).
//  - agent_probe: agent_greedy whose every child is first probed: the move, then the policy's
//    greedy moves (masked argmax of Q) untimed to the end of the episode, one evaluation where
//    they end; then the move alone is timed. Timing a child tells what the move is worth now;
//    the probe tells what it leads to in the policy's hands, so a move that pays only after
//    others (a tile before its vectorisation) is not lost for looking slow on its own. A probe
//    that ends on a program already timed costs nothing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agents/baselines.h"
#include "agents/checkpoint.h"
#include "agents/dqn.h"
#include "agents/q_network.h"

namespace perfdojo::agents {

/// agent_greedy's and agent_probe's default kind penalty (see the top of this file), in standard
/// deviations of Q: chosen on fresh generator instances of the training families, where 0.5, 1
/// and 2 did alike and 0 (the plain order of Q) worse at every budget.
inline constexpr double kKindPenalty = 1.0;

/// A Q-network restored from a checkpoint, used greedily.
class Policy {
 public:
  /// Loads `path`; a missing, corrupt or foreign file is an error, never a crash.
  static ir::Result<std::shared_ptr<Policy>> load(const std::string& path);
  /// Q-values of one observation (one per action).
  std::vector<float> q_values(const AgentObs& obs);
  /// The config the policy was trained with.
  const AgentConfig& config() const { return checkpoint_.config; }
  const Checkpoint& checkpoint() const { return checkpoint_; }
  /// "" when `env` matches the network (features, actions, tokens), else why not.
  std::string check_env(const env::Env& env) const;

 private:
  Policy(Checkpoint c, QNetwork net) : checkpoint_(std::move(c)), net_(std::move(net)) {}
  Checkpoint checkpoint_;
  QNetwork net_;
};

/// The legal actions (stop excluded) in the order the policy would try them: by Q, spread over
/// the kinds of move by `kind_penalty` (see agent_greedy at the top of this file; 0 = by Q).
std::vector<int> q_order(Policy& policy, const env::Observation& obs,
                         const std::vector<uint8_t>& mask, double kind_penalty);

/// The shipped checkpoint `name` stands for: "default" is agents/checkpoints/default.ckpt of the
/// source tree (docs/agents.md says how it was trained and how to train it again); any other
/// name is a path and comes back unchanged.
std::string resolve_checkpoint(const std::string& name);

/// The policy alone: one greedy episode (masked argmax of Q at every step, no exploration, no
/// search, no sketch, no proposals) of the env's max_episode_steps moves; the best program along
/// it counts (Max-Q learns the peak of a trajectory), each step one evaluation. At a program met
/// again the moves already taken from it are left out, so the episode never loops.
SearchResult agent_policy(Policy& policy, const env::EnvConfig& config,
                          const std::vector<int>& budgets);

/// The policy's search on the kernel `config` names, with the evaluation budget.
SearchResult agent_search(Policy& policy, const env::EnvConfig& config,
                          const std::vector<int>& budgets, uint64_t seed, double epsilon);

/// Q-guided best-first search (see the top of this file).
SearchResult agent_best_first(Policy& policy, const env::EnvConfig& config,
                              const std::vector<int>& budgets);

/// Eager greedy search in the order of Q (see the top of this file).
SearchResult agent_greedy(Policy& policy, const env::EnvConfig& config,
                          const std::vector<int>& budgets, double tolerance = kEagerTolerance,
                          double kind_penalty = kKindPenalty);

/// Eager greedy search in the order of Q, each child probed by the policy (see the top of this
/// file).
SearchResult agent_probe(Policy& policy, const env::EnvConfig& config,
                         const std::vector<int>& budgets, double tolerance = kEagerTolerance,
                         double kind_penalty = kKindPenalty);

}  // namespace perfdojo::agents
