// Experience replay: a fixed-capacity ring of transitions, sampled uniformly or in proportion to
// priority (Schaul et al. 2016, proportional variant, on a sum tree).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <random>
#include <vector>

namespace perfdojo::agents {

/// One transition as the actors produce it. Masks are 1 for legal actions.
struct Transition {
  const std::vector<float>* obs = nullptr;
  const std::vector<int32_t>* tokens = nullptr;  ///< null when tokens are not stored
  const std::vector<uint8_t>* mask = nullptr;
  int action = 0;
  float reward = 0;
  const std::vector<float>* next_obs = nullptr;
  const std::vector<int32_t>* next_tokens = nullptr;
  const std::vector<uint8_t>* next_mask = nullptr;
  bool terminated = false;  ///< no bootstrap (a truncated transition is not terminated)
};

/// A sampled batch as tensors.
struct Batch {
  torch::Tensor obs, tokens, mask;             ///< [B, F] float, [B, L] int64, [B, A] bool
  torch::Tensor actions, rewards, terminated;  ///< [B] int64, [B] float, [B] float (1 = terminal)
  torch::Tensor next_obs, next_tokens, next_mask;  ///< as above, for s'
  torch::Tensor weights;                           ///< [B] importance weights (1 when uniform)
  std::vector<int64_t> indices;                    ///< slots, for update_priorities
};

/// The ring buffer. Masks are stored as bits, observations as floats.
class ReplayBuffer {
 public:
  ReplayBuffer(int capacity, int feature_size, int token_len, int action_count, bool prioritized,
               double alpha);

  /// Adds one transition, overwriting the oldest when full (new ones get the max priority).
  void add(const Transition& t);
  /// Samples `n` transitions; `beta` is the importance-weight exponent (prioritised only).
  Batch sample(int n, double beta, std::mt19937_64& rng) const;
  /// Sets the priorities of sampled slots from their TD errors.
  void update_priorities(const std::vector<int64_t>& indices, const std::vector<float>& td_errors);

  int size() const { return size_; }
  int capacity() const { return capacity_; }
  bool prioritized() const { return prioritized_; }

 private:
  void set_priority(int64_t slot, double p);

  int capacity_, feature_size_, token_len_, action_count_, mask_bytes_;
  bool prioritized_;
  double alpha_, max_priority_ = 1.0;
  int size_ = 0, next_ = 0;
  std::vector<float> obs_, next_obs_, rewards_;
  std::vector<int32_t> tokens_, next_tokens_, actions_;
  std::vector<uint8_t> mask_, next_mask_, terminated_;
  int tree_size_ = 1;
  std::vector<double> tree_;  // sum tree: leaves at [tree_size_, 2 * tree_size_)
};

}  // namespace perfdojo::agents
