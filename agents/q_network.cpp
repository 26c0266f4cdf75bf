#include "agents/q_network.h"

#include <dlfcn.h>

#include <map>
#include <sstream>
#include <stdexcept>

#include "gym/observation.h"
#include "transforms/flat_space.h"

namespace perfdojo::agents {
namespace {

// Feature values span orders of magnitude (counts, log2 sizes); symlog keeps them in a range an
// MLP trains on without a running normaliser, which would be one more piece of checkpoint state.
torch::Tensor symlog(const torch::Tensor& x) {
  return torch::sign(x) * torch::log1p(torch::abs(x));
}

torch::nn::Sequential mlp(int in, int hidden, int layers) {
  torch::nn::Sequential s;
  for (int i = 0; i < layers; ++i) {
    s->push_back(torch::nn::Linear(i == 0 ? in : hidden, hidden));
    s->push_back(torch::nn::ReLU());
  }
  return s;
}

torch::Tensor to_tensor(const std::vector<int64_t>& v) {
  return torch::from_blob(const_cast<int64_t*>(v.data()), {static_cast<int64_t>(v.size())},
                          torch::kLong)
      .clone();
}

}  // namespace

int flat_space_kinds(int action_count, int sketch_actions) {
  for (int k = transforms::kNumKinds; k > 0; --k) {
    transforms::FlatSpaceConfig fc;
    fc.kinds = k;
    if (transforms::FlatActionSpace(fc, transforms::Target{}).size() + sketch_actions + 1 ==
        action_count)
      return k;
  }
  return 0;
}

ir::Result<ActionLayout> flat_action_layout(int action_count, int sketch_actions, int kinds) {
  transforms::FlatSpaceConfig fc;
  fc.kinds = kinds;
  const transforms::FlatActionSpace space(fc, transforms::Target{});
  if (space.size() + sketch_actions + 1 != action_count)
    return std::vector<ir::Diagnostic>{
        {{},
         "the factored head reads the flat action space, " + std::to_string(sketch_actions) +
             " sketch actions and stop (" + std::to_string(space.size() + sketch_actions + 1) +
             " actions); this one has " + std::to_string(action_count)}};
  if (fc.max_scopes != env::kFeatureScopes || fc.max_buffers != env::kFeatureBuffers)
    return std::vector<ir::Diagnostic>{
        {{}, "the flat space's slots and the features' rows differ"}};
  ActionLayout l;
  l.scopes = fc.max_scopes;
  l.nodes = fc.max_nodes;
  l.buffers = fc.max_buffers;
  std::vector<int> base(transforms::kNumKinds, 0);  // first kind-and-parameter id of each kind
  for (int k = 0; k < transforms::kNumKinds; ++k) {
    base[k] = l.kind_params;
    l.kind_params += space.param_count(static_cast<transforms::Kind>(k));
  }
  // Slots map to the row after the last (a zero row) when the action names none.
  auto row = [](int slot, int n) { return static_cast<int64_t>(slot >= 0 && slot < n ? slot : n); };
  for (int i = 0; i < space.size(); ++i) {
    const auto parts = space.parts(i);
    l.kind_param.push_back(base[static_cast<int>(parts.kind)] + parts.param_index);
    l.scope.push_back(row(parts.scope, l.scopes));
    l.node.push_back(row(parts.node, l.nodes));
    l.buffer.push_back(row(parts.buffer, l.buffers));
    l.buffer2.push_back(row(parts.buffer2, l.buffers));
  }
  // The sketch actions (one id per block-size choice: the choice's sizes are the target's, the
  // same in every kernel), then stop; none names a slot.
  for (int c = 0; c <= sketch_actions; ++c) {
    l.kind_param.push_back(l.kind_params++);
    l.scope.push_back(l.scopes);
    l.node.push_back(l.nodes);
    l.buffer.push_back(l.buffers);
    l.buffer2.push_back(l.buffers);
  }
  return l;
}

QNetworkImpl::QNetworkImpl(const AgentConfig& c, const NetworkShape& shape) {
  uses_tokens_ = c.encoder == "tokens";
  token_len_ = uses_tokens_ ? c.token_len : 0;
  feature_encoder_ =
      register_module("feature_encoder", mlp(shape.feature_size, c.hidden, c.layers));
  int trunk = c.hidden;
  if (uses_tokens_) {
    // Stands in for the brief's LLM embedding of the IR: a small transformer over the canonical
    // text's tokens, mean-pooled over non-padding positions.
    token_embedding_ =
        register_module("token_embedding", torch::nn::Embedding(shape.token_vocab, c.token_dim));
    position_embedding_ =
        register_module("position_embedding", torch::nn::Embedding(c.token_len, c.token_dim));
    auto layer = torch::nn::TransformerEncoderLayer(
        torch::nn::TransformerEncoderLayerOptions(c.token_dim, c.token_heads)
            .dim_feedforward(2 * c.token_dim)
            .dropout(0.0));
    token_encoder_ = register_module(
        "token_encoder",
        torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(layer, c.token_layers)));
    token_proj_ = register_module("token_proj", torch::nn::Linear(c.token_dim, c.hidden));
    trunk += c.hidden;
  }
  value_head_ = register_module(
      "value_head", torch::nn::Sequential(torch::nn::Linear(trunk, c.hidden), torch::nn::ReLU(),
                                          torch::nn::Linear(c.hidden, 1)));
  factored_ = c.head == "factored";
  if (!factored_) {
    advantage_head_ =
        register_module("advantage_head",
                        torch::nn::Sequential(torch::nn::Linear(trunk, c.hidden), torch::nn::ReLU(),
                                              torch::nn::Linear(c.hidden, shape.action_count)));
    return;
  }
  auto layout = flat_action_layout(shape.action_count, c.sketch_actions, shape.kinds);
  if (!layout.ok()) throw std::invalid_argument(layout.error_text());
  layout_ = std::move(layout).value();
  kind_param_ = to_tensor(layout_.kind_param);
  scope_ = to_tensor(layout_.scope);
  node_ = to_tensor(layout_.node);
  buffer_ = to_tensor(layout_.buffer);
  buffer2_ = to_tensor(layout_.buffer2);
  const int w = std::max(32, c.hidden / 4);  // scored once per legal action: kept narrow
  const int inputs =
      env::kScopeFeatures + 2 * env::kBufferFeatures + layout_.kind_params + layout_.nodes + 1;
  state_proj_ = register_module("factored_state",
                                torch::nn::Linear(torch::nn::LinearOptions(trunk, w).bias(false)));
  action_proj_ = register_module("factored_action", torch::nn::Linear(inputs, w));
  score_ = register_module(
      "factored_score",
      torch::nn::Sequential(torch::nn::Linear(w, w), torch::nn::ReLU(), torch::nn::Linear(w, 1)));
}

torch::Tensor QNetworkImpl::factored_advantage(const torch::Tensor& h, const torch::Tensor& x,
                                               const torch::Tensor& mask) {
  const int64_t b = x.size(0), a = mask.size(1), ns = layout_.scopes, nb = layout_.buffers;
  const int64_t w = state_proj_->weight.size(0);
  // The first layer over [trunk, scope row, buffer row, buffer2 row, kind-and-parameter one-hot,
  // node one-hot] is linear, so it is the sum of one projection per part. Each part is projected
  // once where it lives (per state, per slot of a state, per action) into one table, and every
  // legal (row, action) pair sums five rows of it: one gather and, backward, one index_add,
  // instead of building each pair's input vector.
  const torch::Tensor& weight = action_proj_->weight;  // [w, inputs], columns in the order above
  const int64_t sf = env::kScopeFeatures, bf = env::kBufferFeatures;
  auto slots = [&](int64_t offset, int64_t count,
                   int64_t width) {  // with a zero row after the last
    torch::Tensor r = x.narrow(1, offset, count * width).reshape({b, count, width});
    return torch::cat({r, torch::zeros({b, 1, width}, r.options())}, 1).reshape({-1, width});
  };
  const int64_t buffers_at = env::kGlobalFeatures + env::kFeatureScopes * sf;
  torch::Tensor scopes = slots(env::kGlobalFeatures, ns, sf), buffers = slots(buffers_at, nb, bf);
  torch::Tensor kind_rows = weight.narrow(1, sf + 2 * bf, layout_.kind_params).t();  // [kp, w]
  torch::Tensor node_rows =
      weight.narrow(1, sf + 2 * bf + layout_.kind_params, layout_.nodes + 1).t();
  torch::Tensor per_action = kind_rows.index_select(0, kind_param_) +
                             node_rows.index_select(0, node_) + action_proj_->bias;  // [a, w]
  torch::Tensor table =
      torch::cat({torch::mm(scopes, weight.narrow(1, 0, sf).t()),         // b*(ns+1)
                  torch::mm(buffers, weight.narrow(1, sf, bf).t()),       // b*(nb+1)
                  torch::mm(buffers, weight.narrow(1, sf + bf, bf).t()),  // b*(nb+1)
                  per_action,                                             // a
                  state_proj_->forward(h)},                               // b
                 0);
  torch::Tensor pairs, rows;  // per legal pair: row * a + action; the five table rows it sums
  {
    torch::NoGradGuard indices_only;
    pairs = mask.to(torch::kBool).reshape({b * a}).nonzero().squeeze(1);  // row-major
    torch::Tensor row = pairs.div(a, "floor"), action = pairs.remainder(a);
    const int64_t at_buffers = b * (ns + 1), at_buffers2 = at_buffers + b * (nb + 1);
    const int64_t at_actions = at_buffers2 + b * (nb + 1), at_states = at_actions + a;
    rows = torch::stack({row * (ns + 1) + scope_.index_select(0, action),
                         at_buffers + row * (nb + 1) + buffer_.index_select(0, action),
                         at_buffers2 + row * (nb + 1) + buffer2_.index_select(0, action),
                         at_actions + action, at_states + row})
               .reshape({-1});
  }
  const int64_t n = pairs.size(0);
  torch::Tensor pre = table.index_select(0, rows).view({5, n, w}).sum(0);
  torch::Tensor score = score_->forward(torch::relu(pre)).squeeze(1);  // [n]
  // Into [b, a]; illegal entries are 0 (unspecified).
  return torch::zeros({b * a}, score.options()).index_copy(0, pairs, score).view({b, a});
}

torch::Tensor QNetworkImpl::forward(const torch::Tensor& features, const torch::Tensor& tokens,
                                    const torch::Tensor& mask) {
  torch::Tensor x = symlog(features);
  torch::Tensor h = feature_encoder_->forward(x);
  if (uses_tokens_) {
    torch::Tensor tok = tokens.narrow(1, 0, std::min<int64_t>(tokens.size(1), token_len_));
    torch::Tensor pad = tok.eq(0);  // [B, L], true at padding
    // A sequence that is all padding would make attention NaN; keep its first position visible.
    pad.select(1, 0).fill_(false);
    auto positions = torch::arange(tok.size(1), torch::kLong).unsqueeze(0);
    torch::Tensor x = token_embedding_->forward(tok) + position_embedding_->forward(positions);
    x = token_encoder_->forward(x.transpose(0, 1), {}, pad).transpose(0, 1);  // [B, L, D]
    torch::Tensor keep = (~pad).unsqueeze(2).to(x.dtype());
    torch::Tensor pooled = (x * keep).sum(1) / keep.sum(1).clamp_min(1.0);
    h = torch::cat({h, torch::relu(token_proj_->forward(pooled))}, 1);
  }
  torch::Tensor v = value_head_->forward(h);  // [B, 1]
  torch::Tensor a =
      factored_ ? factored_advantage(h, x, mask) : advantage_head_->forward(h);  // [B, A]
  // Mean over legal actions only: illegal advantages are never trained, so they must not move V.
  torch::Tensor m = mask.to(a.dtype());
  torch::Tensor mean = (a * m).sum(1, true) / m.sum(1, true).clamp_min(1.0);
  return v + a - mean;
}

torch::Tensor masked_q(const torch::Tensor& q, const torch::Tensor& mask) {
  return q.masked_fill(mask.logical_not(), kMaskedQ);
}

torch::Tensor masked_argmax(const torch::Tensor& q, const torch::Tensor& mask) {
  return masked_q(q, mask).argmax(1);
}

void use_single_thread() {
  torch::set_num_threads(1);
  // Debian's libtorch calls the system BLAS (OpenBLAS), whose own thread pool torch does not
  // control; looked up at run time so another BLAS simply skips this.
  using SetThreads = void (*)(int);
  if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(1);
}

std::string network_bytes(QNetwork& net) {
  torch::serialize::OutputArchive a;
  net->save(a);
  std::ostringstream out;
  a.save_to(out);
  return out.str();
}

std::string load_network_bytes(QNetwork& net, const std::string& bytes) {
  try {
    // The network was built from the checkpoint's header; LibTorch's load would give each
    // parameter whatever shape the archive holds. Weights that disagree with the header are a
    // corrupt checkpoint, not a different network.
    std::map<std::string, std::vector<int64_t>> want;
    for (const auto& p : net->named_parameters(true)) want[p.key()] = p.value().sizes().vec();
    for (const auto& b : net->named_buffers(true)) want[b.key()] = b.value().sizes().vec();
    torch::serialize::InputArchive a;
    std::istringstream in(bytes);
    a.load_from(in);
    net->load(a);
    auto shape = [](const std::vector<int64_t>& s) {
      std::string t = "[";
      for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
      return t + "]";
    };
    auto check = [&](const std::string& key, const torch::Tensor& t) -> std::string {
      const auto got = t.sizes().vec();
      if (got == want[key]) return "";
      return "the model's weights do not match the checkpoint's header: " + key + " is " +
             shape(got) + ", the header's network needs " + shape(want[key]);
    };
    for (const auto& p : net->named_parameters(true))
      if (auto e = check(p.key(), p.value()); !e.empty()) return e;
    for (const auto& b : net->named_buffers(true))
      if (auto e = check(b.key(), b.value()); !e.empty()) return e;
    return "";
  } catch (const std::exception& e) {
    std::string m = e.what();
    return "cannot read the model: " + m.substr(0, m.find('\n'));
  }
}

void hard_update(QNetwork& to, const QNetwork& from) {
  torch::NoGradGuard no_grad;
  auto dst = to->named_parameters(true);
  for (const auto& p : from->named_parameters(true)) dst[p.key()].copy_(p.value());
  auto dst_b = to->named_buffers(true);
  for (const auto& b : from->named_buffers(true)) dst_b[b.key()].copy_(b.value());
}

void soft_update(QNetwork& to, const QNetwork& from, double tau) {
  torch::NoGradGuard no_grad;
  auto dst = to->named_parameters(true);
  for (const auto& p : from->named_parameters(true))
    dst[p.key()].mul_(1.0 - tau).add_(p.value(), tau);
}

namespace {

// Rebuilds checkpoint `c`'s network from `old_shape` to `new_shape`: each parameter of the same
// size is copied, every other one is left to `adapt(key, old, now)`, which fills `now` from
// `old` and returns whether it could. Sets `c.model` and drops the optimiser's state (its
// moments are shaped like the old weights); returns "" or why not.
template <class Adapt>
std::string reshape_network(Checkpoint& c, const NetworkShape& old_shape,
                            const NetworkShape& new_shape, const std::string& what, Adapt adapt) {
  try {
    QNetwork from(c.config, old_shape), to(c.config, new_shape);
    if (auto e = load_network_bytes(from, c.model); !e.empty()) return e;
    torch::NoGradGuard no_grad;
    auto old_params = from->named_parameters(true);
    for (auto& p : to->named_parameters(true)) {
      const torch::Tensor& old = old_params[p.key()];
      torch::Tensor& now = p.value();
      if (old.sizes() == now.sizes())
        now.copy_(old);
      else if (!adapt(p.key(), old, now))
        return "cannot migrate " + p.key() + " to the current " + what;
    }
    for (auto& b : to->named_buffers(true)) b.value().copy_(from->named_buffers(true)[b.key()]);
    c.model = network_bytes(to);
  } catch (const std::exception& e) {
    return std::string("cannot migrate the checkpoint's network: ") + e.what();
  }
  c.optimizer.clear();
  return "";
}

}  // namespace

ir::Result<int> migrate_network(Checkpoint& c) {
  auto fail = [](const std::string& m) -> ir::Result<int> {
    return std::vector<ir::Diagnostic>{{{}, m}};
  };
  const int sketch = c.config.sketch_actions;
  const int kinds = flat_space_kinds(c.action_count, sketch);
  if (kinds == 0 && c.config.head != "factored") return transforms::kNumKinds;  // a custom space
  if (kinds == 0)
    return fail("the checkpoint's " + std::to_string(c.action_count) +
                " actions fit no layout of the flat space with " + std::to_string(sketch) +
                " sketch actions");
  if (kinds == transforms::kNumKinds) return kinds;
  transforms::FlatSpaceConfig old_config;
  old_config.kinds = kinds;
  const transforms::Target any;
  const int old_flat = transforms::FlatActionSpace(old_config, any).size();
  const transforms::FlatActionSpace space(transforms::FlatSpaceConfig{}, any);
  const int new_flat = space.size();
  const NetworkShape old_shape{c.feature_size, c.action_count, c.token_vocab, kinds};
  const NetworkShape new_shape{c.feature_size, new_flat + sketch + 1, c.token_vocab};
  // Kind-and-parameter ids: the old flat kinds' come first in both layouts, then the new
  // kinds', then the sketch actions' and stop's.
  int old_kp = 0, new_kp = 0;
  for (int k = 0; k < transforms::kNumKinds; ++k) {
    const int n = space.param_count(static_cast<transforms::Kind>(k));
    (k < kinds ? old_kp : new_kp) += n;
  }
  const int64_t kp_at = env::kScopeFeatures + 2 * env::kBufferFeatures + old_kp;
  auto adapt = [&](const std::string& key, const torch::Tensor& old, torch::Tensor& now) {
    if (key == "factored_action.weight") {  // [w, inputs]: columns inserted
      now.zero_();
      now.narrow(1, 0, kp_at).copy_(old.narrow(1, 0, kp_at));
      const int64_t rest = old.size(1) - kp_at;
      now.narrow(1, kp_at + new_kp, rest).copy_(old.narrow(1, kp_at, rest));
      return true;
    }
    if (key == "advantage_head.2.weight" || key == "advantage_head.2.bias") {
      now.zero_();  // rows per action: the new kinds' inserted before the sketch and stop rows
      now.narrow(0, 0, old_flat).copy_(old.narrow(0, 0, old_flat));
      now.narrow(0, new_flat, sketch + 1).copy_(old.narrow(0, old_flat, sketch + 1));
      return true;
    }
    return false;
  };
  if (auto e = reshape_network(c, old_shape, new_shape, "action space", adapt); !e.empty())
    return fail(e);
  c.action_count = new_shape.action_count;
  return kinds;
}

ir::Result<bool> migrate_features(Checkpoint& c) {
  if (c.feature_size != env::kFeatureSize - env::kTargetFeatures) return false;
  const int kinds = flat_space_kinds(c.action_count, c.config.sketch_actions);
  const NetworkShape old_shape{c.feature_size, c.action_count, c.token_vocab,
                               kinds > 0 ? kinds : transforms::kNumKinds};
  NetworkShape new_shape = old_shape;
  new_shape.feature_size = env::kFeatureSize;
  const int64_t old_size = c.feature_size;
  auto adapt = [&](const std::string&, const torch::Tensor& old, torch::Tensor& now) {
    // The features' first layer: the target block's columns start at zero.
    if (old.dim() != 2 || now.dim() != 2 || old.size(0) != now.size(0) || old.size(1) != old_size ||
        now.size(1) != env::kFeatureSize)
      return false;
    now.zero_();
    now.narrow(1, 0, old_size).copy_(old);
    return true;
  };
  if (auto e = reshape_network(c, old_shape, new_shape, "feature vector", adapt); !e.empty())
    return std::vector<ir::Diagnostic>{{{}, e}};
  c.feature_size = env::kFeatureSize;
  return true;
}

}  // namespace perfdojo::agents
