#include "agents/replay_buffer.h"

#include <algorithm>
#include <cmath>

namespace perfdojo::agents {
namespace {

void pack(const std::vector<uint8_t>& mask, uint8_t* out, int bytes) {
  std::fill(out, out + bytes, 0);
  for (size_t i = 0; i < mask.size() && static_cast<int>(i / 8) < bytes; ++i)
    if (mask[i]) out[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
}

void unpack(const uint8_t* bits, int n, bool* out) {
  for (int i = 0; i < n; ++i) out[i] = (bits[i / 8] >> (i % 8)) & 1u;
}

}  // namespace

ReplayBuffer::ReplayBuffer(int capacity, int feature_size, int token_len, int action_count,
                           bool prioritized, double alpha)
    : capacity_(capacity),
      feature_size_(feature_size),
      token_len_(token_len),
      action_count_(action_count),
      mask_bytes_((action_count + 7) / 8),
      prioritized_(prioritized),
      alpha_(alpha) {
  size_t c = static_cast<size_t>(capacity);
  obs_.resize(c * feature_size_);
  next_obs_.resize(c * feature_size_);
  tokens_.resize(c * token_len_);
  next_tokens_.resize(c * token_len_);
  mask_.resize(c * mask_bytes_);
  next_mask_.resize(c * mask_bytes_);
  actions_.resize(c);
  rewards_.resize(c);
  terminated_.resize(c);
  if (prioritized_) {
    while (tree_size_ < capacity_) tree_size_ *= 2;
    tree_.assign(2 * static_cast<size_t>(tree_size_), 0.0);
  }
}

void ReplayBuffer::set_priority(int64_t slot, double p) {
  size_t i = static_cast<size_t>(slot) + tree_size_;
  tree_[i] = p;
  for (i /= 2; i >= 1; i /= 2) tree_[i] = tree_[2 * i] + tree_[2 * i + 1];
}

void ReplayBuffer::add(const Transition& t) {
  size_t s = static_cast<size_t>(next_);
  auto copy_tokens = [&](const std::vector<int32_t>* src, std::vector<int32_t>& dst) {
    if (token_len_ == 0) return;
    int32_t* out = &dst[s * token_len_];
    std::fill(out, out + token_len_, 0);
    if (src) std::copy_n(src->begin(), std::min<size_t>(src->size(), token_len_), out);
  };
  std::copy_n(t.obs->begin(), feature_size_, &obs_[s * feature_size_]);
  std::copy_n(t.next_obs->begin(), feature_size_, &next_obs_[s * feature_size_]);
  copy_tokens(t.tokens, tokens_);
  copy_tokens(t.next_tokens, next_tokens_);
  pack(*t.mask, &mask_[s * mask_bytes_], mask_bytes_);
  pack(*t.next_mask, &next_mask_[s * mask_bytes_], mask_bytes_);
  actions_[s] = t.action;
  rewards_[s] = t.reward;
  terminated_[s] = t.terminated;
  if (prioritized_) set_priority(next_, max_priority_);
  next_ = (next_ + 1) % capacity_;
  size_ = std::min(size_ + 1, capacity_);
}

Batch ReplayBuffer::sample(int n, double beta, std::mt19937_64& rng) const {
  Batch b;
  b.indices.resize(n);
  std::vector<float> weights(n, 1.0f);
  if (prioritized_) {
    // Stratified proportional sampling: one draw per equal slice of the total priority.
    double total = tree_[1], seg = total / n;
    std::uniform_real_distribution<double> u(0.0, 1.0);
    double max_w = 0;
    for (int k = 0; k < n; ++k) {
      double x = std::min((k + u(rng)) * seg, total * (1 - 1e-12));
      size_t i = 1;
      while (i < static_cast<size_t>(tree_size_)) {
        if (x < tree_[2 * i]) {
          i = 2 * i;
        } else {
          x -= tree_[2 * i];
          i = 2 * i + 1;
        }
      }
      int64_t slot = std::min<int64_t>(static_cast<int64_t>(i) - tree_size_, size_ - 1);
      b.indices[k] = slot;
      double p = std::max(tree_[slot + tree_size_], 1e-12) / total;
      weights[k] = static_cast<float>(std::pow(size_ * p, -beta));
      max_w = std::max(max_w, static_cast<double>(weights[k]));
    }
    // Normalised by the batch's largest weight (a common simplification of the global minimum).
    for (auto& w : weights) w = static_cast<float>(w / max_w);
  } else {
    std::uniform_int_distribution<int64_t> pick(0, size_ - 1);
    for (int k = 0; k < n; ++k) b.indices[k] = pick(rng);
  }
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  b.obs = torch::empty({n, feature_size_}, f32);
  b.next_obs = torch::empty({n, feature_size_}, f32);
  b.mask = torch::empty({n, action_count_}, torch::kBool);
  b.next_mask = torch::empty({n, action_count_}, torch::kBool);
  b.actions = torch::empty({n}, torch::kInt64);
  b.rewards = torch::empty({n}, f32);
  b.terminated = torch::empty({n}, f32);
  if (token_len_ > 0) {
    b.tokens = torch::empty({n, token_len_}, torch::kInt64);
    b.next_tokens = torch::empty({n, token_len_}, torch::kInt64);
  }
  for (int k = 0; k < n; ++k) {
    size_t s = static_cast<size_t>(b.indices[k]);
    std::copy_n(&obs_[s * feature_size_], feature_size_,
                b.obs.data_ptr<float>() + k * feature_size_);
    std::copy_n(&next_obs_[s * feature_size_], feature_size_,
                b.next_obs.data_ptr<float>() + k * feature_size_);
    unpack(&mask_[s * mask_bytes_], action_count_, b.mask.data_ptr<bool>() + k * action_count_);
    unpack(&next_mask_[s * mask_bytes_], action_count_,
           b.next_mask.data_ptr<bool>() + k * action_count_);
    b.actions.data_ptr<int64_t>()[k] = actions_[s];
    b.rewards.data_ptr<float>()[k] = rewards_[s];
    b.terminated.data_ptr<float>()[k] = terminated_[s];
    if (token_len_ > 0) {
      std::copy_n(&tokens_[s * token_len_], token_len_,
                  b.tokens.data_ptr<int64_t>() + k * token_len_);
      std::copy_n(&next_tokens_[s * token_len_], token_len_,
                  b.next_tokens.data_ptr<int64_t>() + k * token_len_);
    }
  }
  b.weights = torch::from_blob(weights.data(), {n}, f32).clone();
  return b;
}

void ReplayBuffer::update_priorities(const std::vector<int64_t>& indices,
                                     const std::vector<float>& td_errors) {
  if (!prioritized_) return;
  for (size_t k = 0; k < indices.size(); ++k) {
    double p = std::pow(std::abs(static_cast<double>(td_errors[k])) + 1e-3, alpha_);
    max_priority_ = std::max(max_priority_, p);
    set_priority(indices[k], p);
  }
}

}  // namespace perfdojo::agents
