// N environments stepped together on oneTBB's thread pool.
//
// Auto-reset (docs/env.md): in kSameStep mode (the default) an env whose episode ends is reset
// inside the same step; the result carries the reset observation, and the final observation and
// info of the finished episode in `final_observation` / `final_info`. No action is ever
// dropped. kNextStep mirrors Gymnasium 1.0's vector envs: the next step() resets that env
// instead of applying its action, and says so in `autoreset_ignored_action`.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "gym/env.h"

namespace perfdojo::env {

/// When a finished sub-env is reset.
enum class AutoReset { kSameStep, kNextStep };

/// One sub-env's share of a batched step.
struct VectorStep {
  StepResult result;
  bool autoreset_ignored_action = false;  ///< kNextStep: this step was a reset, the action unused
  std::optional<Observation> final_observation;  ///< kSameStep: last observation of the episode
  std::optional<Info> final_info;
};

/// A batch of independent envs (own backend each; seeds config.seed + i).
class VectorEnv {
 public:
  /// Builds `n` envs from one config.
  static ir::Result<std::unique_ptr<VectorEnv>> make(const EnvConfig& config, int n,
                                                     AutoReset mode = AutoReset::kSameStep);
  /// Resets every env (seed + i when a seed is given).
  std::vector<std::pair<Observation, Info>> reset(std::optional<uint64_t> seed = std::nullopt);
  /// Steps env i with actions[i], in parallel. actions.size() must equal size().
  std::vector<VectorStep> step(const std::vector<int>& actions);
  /// Number of envs.
  int size() const { return static_cast<int>(envs_.size()); }
  /// Env i (for masks and specs).
  Env& at(int i) { return *envs_[i]; }

 private:
  std::vector<std::unique_ptr<Env>> envs_;
  std::vector<bool> needs_reset_;
  AutoReset mode_ = AutoReset::kSameStep;
};

}  // namespace perfdojo::env
