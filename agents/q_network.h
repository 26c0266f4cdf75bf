// The dueling Q-network: an encoder of the IR observation feeding a state-value head V and an
// advantage head A, combined as Q = V + A - mean(A) with the mean taken over legal actions only.
#pragma once

#include <torch/torch.h>

#include <string>

#include "agents/checkpoint.h"
#include "agents/config.h"
#include "ir/diagnostic.h"
#include "transforms/action.h"

namespace perfdojo::agents {

/// What each action index is made of, for the factored head: per index, its kind-and-parameter
/// id and the slots it names, from transforms::FlatActionSpace::parts, where a slot it does not
/// name is the slot count (the zero row after the last); then the sketch macro actions, if any
/// (env::EnvConfig::sketch_actions), and last stop, each with a kind-and-parameter id of its own
/// and no slots.
struct ActionLayout {
  std::vector<int64_t> kind_param, scope, node, buffer, buffer2;
  int kind_params = 0;                     ///< distinct kind-and-parameter ids, stop included
  int scopes = 0, nodes = 0, buffers = 0;  ///< slot counts of the flat space
};

/// The layout of the agents' env action space (the default flat space with the registry's first
/// `kinds` kinds, `sketch_actions` sketch macro actions, then stop), or why it cannot be built
/// for `action_count` actions.
ir::Result<ActionLayout> flat_action_layout(int action_count, int sketch_actions = 0,
                                            int kinds = transforms::kNumKinds);

/// How many of the registry's kinds the flat space of a network with `action_count` actions
/// (`sketch_actions` sketch actions and stop included) holds, or 0 when no layout fits.
int flat_space_kinds(int action_count, int sketch_actions);

/// Shapes of the network; all of them must match a checkpoint.
struct NetworkShape {
  int feature_size = 0;               ///< env::kFeatureSize
  int action_count = 0;               ///< env action_spec().n (stop included)
  int token_vocab = 0;                ///< env::token_vocabulary_size(), used by the token encoder
  int kinds = transforms::kNumKinds;  ///< kinds of the flat space (fewer: an older layout)
};

/// Value written into illegal entries before any max/argmax: far below any reachable Q-value,
/// and finite, so no NaN can arise from it.
inline constexpr float kMaskedQ = -1e9f;

/// Encoder + dueling heads.
class QNetworkImpl : public torch::nn::Module {
 public:
  QNetworkImpl(const AgentConfig& config, const NetworkShape& shape);

  /// Q-values [B, A]. `features` [B, F] float, `tokens` [B, L] int64 (undefined unless the token
  /// encoder is on), `mask` [B, A] bool (true = legal). Illegal entries are unspecified: use
  /// masked_q / masked_argmax before comparing actions.
  torch::Tensor forward(const torch::Tensor& features, const torch::Tensor& tokens,
                        const torch::Tensor& mask);

  /// Whether the network reads tokens.
  bool uses_tokens() const { return uses_tokens_; }
  /// Tokens the token encoder reads per observation.
  int token_len() const { return token_len_; }

 private:
  bool uses_tokens_ = false;
  int token_len_ = 0;
  torch::nn::Sequential feature_encoder_{nullptr};
  torch::nn::Embedding token_embedding_{nullptr}, position_embedding_{nullptr};
  torch::nn::TransformerEncoder token_encoder_{nullptr};
  torch::nn::Linear token_proj_{nullptr};
  torch::nn::Sequential value_head_{nullptr}, advantage_head_{nullptr};

  // Factored head (config head == "factored"): one network scores each legal action from
  // [trunk, its scope row, buffer rows, kind-and-parameter and node slot one-hot], gathered
  // from the observation for the legal (row, action) pairs of the batch only.
  torch::Tensor factored_advantage(const torch::Tensor& h, const torch::Tensor& x,
                                   const torch::Tensor& mask);
  bool factored_ = false;
  ActionLayout layout_;
  torch::Tensor kind_param_, scope_, node_, buffer_, buffer2_;  // [A] int64, layout_'s as tensors
  torch::nn::Linear state_proj_{nullptr}, action_proj_{nullptr};
  torch::nn::Sequential score_{nullptr};
};
TORCH_MODULE(QNetwork);

/// Q with illegal entries replaced by kMaskedQ.
torch::Tensor masked_q(const torch::Tensor& q, const torch::Tensor& mask);
/// Index of the best legal action per row [B] (int64).
torch::Tensor masked_argmax(const torch::Tensor& q, const torch::Tensor& mask);

/// The network's weights as a torch archive in memory.
std::string network_bytes(QNetwork& net);
/// Loads weights written by network_bytes; returns "" or why not (never throws).
std::string load_network_bytes(QNetwork& net, const std::string& bytes);

/// Brings the network of a checkpoint trained on an older flat space (the registry's first K
/// kinds; kinds are append-only, so its action indices are today's) to today's space: every
/// weight is kept, and the kinds added since start from zero in the factored head's
/// kind-and-parameter columns (rows of the plain advantage head), so they score as an action at
/// that location of no particular kind until training says more. Sets `c.action_count` and
/// `c.model`, drops the optimiser's state (its moments are shaped like the old weights), and
/// returns the kinds the checkpoint had (kNumKinds: nothing to do), or an error message.
ir::Result<int> migrate_network(Checkpoint& c);

/// Brings the network of a checkpoint trained before the features' target block
/// (env::kTargetFeatures) to today's feature vector: the feature encoder's first layer gets zero
/// columns for the block, so the network computes what it did, whatever the target, until
/// training says more. Sets `c.feature_size` and `c.model`, drops the optimiser's state; returns
/// whether it migrated (false: nothing to do), or an error message.
ir::Result<bool> migrate_features(Checkpoint& c);

/// One compute thread for torch and for the OpenBLAS it calls: results do not depend on thread
/// scheduling (reproducible runs), and the actors' oneTBB threads get the other cores.
void use_single_thread();

/// Copies every parameter and buffer of `from` into `to` (hard target sync).
void hard_update(QNetwork& to, const QNetwork& from);
/// to = tau * from + (1 - tau) * to, parameter by parameter (Polyak averaging).
void soft_update(QNetwork& to, const QNetwork& from, double tau);

}  // namespace perfdojo::agents
