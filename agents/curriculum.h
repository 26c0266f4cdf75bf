// The curriculum: kernels ordered by IR complexity, trained smallest first, the active set grown
// on promotion, and a final fine-tuning phase on the whole training set.
//
// Complexity of a kernel (its original program) =
//     log2(1 + flops) + 2 * statements + loop scopes
// read from the env's feature vector (entries 0, 3 and 4). log-flops ranks problem size;
// statements and scopes rank how many places a transformation can apply, i.e. how large the
// action set and how long a useful trace is. Ties break by URI so the order is reproducible.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "agents/config.h"
#include "ir/diagnostic.h"

namespace perfdojo::agents {

/// A training kernel with its complexity.
struct RankedKernel {
  std::string uri;
  double complexity = 0;
};

/// The benchmark URIs the `kernels` setting names (train, test, all, or a comma list).
ir::Result<std::vector<std::string>> resolve_kernels(const std::string& spec);
/// Loads each URI and ranks it (simplest first).
ir::Result<std::vector<RankedKernel>> rank_kernels(const std::vector<std::string>& uris);

/// Which kernels the actors draw from, as training progresses.
class Curriculum {
 public:
  Curriculum(std::vector<RankedKernel> kernels, const AgentConfig& config);

  /// Updates the stage from the budget fraction spent and the best speed-ups so far; returns true
  /// when the active set grew: the stage's share of the staged budget is spent, or the threshold
  /// is met after at least a quarter of that share.
  bool update(double progress, const std::map<std::string, double>& best_speedup);
  /// A kernel from the active set, uniformly.
  const std::string& sample(std::mt19937_64& rng) const;
  /// Active kernels (a prefix of the ranking).
  int active() const { return active_; }
  /// 0-based stage; the last one is the fine-tuning stage on every kernel.
  int stage() const { return stage_; }
  /// Number of stages including fine-tuning.
  int stages() const { return stages_; }
  /// Restores the stage (resume).
  void set_stage(int stage, double stage_started);
  /// Budget fraction at which the current stage began.
  double stage_started() const { return stage_started_; }
  const std::vector<RankedKernel>& kernels() const { return kernels_; }

 private:
  int active_for(int stage) const;

  std::vector<RankedKernel> kernels_;
  bool enabled_;
  int start_, step_;
  double promote_, fraction_;
  int stages_ = 1, stage_ = 0, active_ = 0;
  double stage_started_ = 0;
};

}  // namespace perfdojo::agents
