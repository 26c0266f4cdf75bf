#include "agents/q_network.h"

#include <dlfcn.h>

#include <map>
#include <sstream>

namespace perfdojo::agents {
namespace {

// Feature values span orders of magnitude (counts, log2 sizes); symlog keeps them in a range an
// MLP trains on without a running normaliser, which would be one more piece of checkpoint state.
torch::Tensor symlog(const torch::Tensor& x) { return torch::sign(x) * torch::log1p(torch::abs(x)); }

torch::nn::Sequential mlp(int in, int hidden, int layers) {
  torch::nn::Sequential s;
  for (int i = 0; i < layers; ++i) {
    s->push_back(torch::nn::Linear(i == 0 ? in : hidden, hidden));
    s->push_back(torch::nn::ReLU());
  }
  return s;
}

}  // namespace

QNetworkImpl::QNetworkImpl(const AgentConfig& c, const NetworkShape& shape) {
  uses_tokens_ = c.encoder == "tokens";
  token_len_ = uses_tokens_ ? c.token_len : 0;
  feature_encoder_ = register_module("feature_encoder", mlp(shape.feature_size, c.hidden, c.layers));
  int trunk = c.hidden;
  if (uses_tokens_) {
    // Stands in for the brief's LLM embedding of the IR: a small transformer over the canonical
    // text's tokens, mean-pooled over non-padding positions.
    token_embedding_ = register_module("token_embedding", torch::nn::Embedding(shape.token_vocab, c.token_dim));
    position_embedding_ = register_module("position_embedding", torch::nn::Embedding(c.token_len, c.token_dim));
    auto layer = torch::nn::TransformerEncoderLayer(
        torch::nn::TransformerEncoderLayerOptions(c.token_dim, c.token_heads).dim_feedforward(2 * c.token_dim).dropout(0.0));
    token_encoder_ = register_module("token_encoder",
                                     torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(layer, c.token_layers)));
    token_proj_ = register_module("token_proj", torch::nn::Linear(c.token_dim, c.hidden));
    trunk += c.hidden;
  }
  value_head_ = register_module("value_head", torch::nn::Sequential(torch::nn::Linear(trunk, c.hidden), torch::nn::ReLU(),
                                                                    torch::nn::Linear(c.hidden, 1)));
  advantage_head_ = register_module(
      "advantage_head", torch::nn::Sequential(torch::nn::Linear(trunk, c.hidden), torch::nn::ReLU(),
                                              torch::nn::Linear(c.hidden, shape.action_count)));
}

torch::Tensor QNetworkImpl::forward(const torch::Tensor& features, const torch::Tensor& tokens, const torch::Tensor& mask) {
  torch::Tensor h = feature_encoder_->forward(symlog(features));
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
  torch::Tensor v = value_head_->forward(h);      // [B, 1]
  torch::Tensor a = advantage_head_->forward(h);  // [B, A]
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
      return "the model's weights do not match the checkpoint's header: " + key + " is " + shape(got) +
             ", the header's network needs " + shape(want[key]);
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
  for (const auto& p : from->named_parameters(true)) dst[p.key()].mul_(1.0 - tau).add_(p.value(), tau);
}

}  // namespace perfdojo::agents
