// Search baselines under the same budget accounting as the agent's evaluation.
//
// Budget: one backend evaluation = one env step that lands on a program this search has not
// timed before (the starting program is free; revisits are served from a cache, as any real
// tuner would do). Every method is charged the same way, and each reports the best speed-up found
// after each budget in a list (an anytime curve), so budgets 10, 100 and 1000 come from one run.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "gym/env.h"

namespace perfdojo::agents {

/// Eager greedy search's default tolerance: a program must be 2% faster to be followed first
/// (about the run-to-run spread of a timing on a quiet machine).
inline constexpr double kEagerTolerance = 0.02;

/// What one search found.
struct SearchResult {
  std::vector<double> best_at;  ///< best speed-up after budgets[i] evaluations
  double best_speedup = 1.0;
  double initial_time_s = 0, best_time_s = 0;
  std::vector<std::string> best_trace;
  int evaluations = 0;
  std::string error;  ///< the env could not be built or reset
};

/// Counts evaluations and tracks the best program of one search.
class EvalBudget {
 public:
  /// `budgets` ascending; the last one is the total.
  explicit EvalBudget(std::vector<int> budgets);
  /// Starts from `env`'s current (reset) program.
  void start(const env::Env& env, double initial_time_s);
  /// Accounts for the program `env` holds after step result `r`; returns true when it was new.
  bool record(const env::Env& env, const env::StepResult& r);
  /// Whether the total budget is spent.
  bool exhausted() const { return evaluations_ >= budgets_.back(); }
  /// Step cap that ends searches that keep revisiting known programs.
  bool steps_exhausted() const { return steps_ >= 50LL * budgets_.back() + 1000; }
  /// Fills the curve for budgets not reached and returns the result.
  SearchResult finish();

 private:
  std::vector<int> budgets_;
  std::set<uint64_t> seen_;
  int evaluations_ = 0;
  int64_t steps_ = 0;
  SearchResult result_;
};

/// Legal action indices of `env` except stop.
std::vector<int> legal_actions(const env::Env& env);

/// Random walks: uniformly random legal actions, episodes restarted at the step limit.
SearchResult random_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                           uint64_t seed);
/// Greedy best-first: repeatedly expand the fastest program found so far not yet expanded,
/// timing each of its children (in a seeded random order).
SearchResult greedy_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                           uint64_t seed);
/// The order in which a program's children are timed: its legal actions (stop excluded), first
/// first, given the env holding it and the observation and mask it was reached with.
using ChildOrder = std::function<std::vector<int>(const env::Env& env, const env::Observation& obs,
                                                  const std::vector<uint8_t>& mask)>;
/// Eager greedy search: every evaluation times the next child (in `order`) of the fastest
/// program found so far that has a child left untimed, so a faster child is followed at once
/// instead of after all its siblings; with a good order it descends as far in 100 evaluations
/// as greedy best-first in 1,000. A program counts as faster only by more than `tolerance` (a
/// fraction of the time): an earlier program beats a later one within it, so a chain of
/// marginal gains does not take the whole budget from the moves tried near the start.
/// The agents order by Q (agent_greedy); eager_random_search orders at random, to tell what the
/// order is worth.
SearchResult eager_greedy_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                                 const ChildOrder& order, double tolerance = kEagerTolerance);
/// Where a child's move leads before it is timed: the actions to take after `action` from the
/// program `env` holds, untimed (Env::step_untimed), so that one evaluation times the end of
/// the whole sequence. Empty: time the child itself.
using ChildExtension = std::function<std::vector<int>(const env::Env& env, int action)>;
/// Eager greedy search whose children are sequences: each child (a move in `order`) is timed
/// where `extend` leads from it. A child whose sequence ends elsewhere than at the move alone
/// is then followed by the move alone, timed, as the next child.
SearchResult eager_greedy_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                                 const ChildOrder& order, const ChildExtension& extend,
                                 double tolerance = kEagerTolerance);
/// Eager greedy search with each program's children in a seeded random order.
SearchResult eager_random_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                                 uint64_t seed);
/// Beam search: expand every program of the beam, keep the `width` fastest children, repeat.
SearchResult beam_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                         uint64_t seed, int width);

}  // namespace perfdojo::agents
