#include "agents/dqn.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace perfdojo::agents {

Exploration exploration_at(const AgentConfig& c, double progress) {
  Exploration e;
  if (progress < c.phase1_end) {
    double f = c.phase1_end > 0 ? progress / c.phase1_end : 1.0;
    e.epsilon = c.eps_start + (c.eps_phase1_end - c.eps_start) * f;
  } else if (progress < c.phase2_end) {
    double f = (progress - c.phase1_end) / (c.phase2_end - c.phase1_end);
    e.boltzmann = true;
    e.temperature = c.temp_start * std::pow(c.temp_end / c.temp_start, f);
  } else {
    e.epsilon = c.eps_final;
  }
  return e;
}

int select_action(const float* q, const std::vector<uint8_t>& mask, const Exploration& e,
                  std::mt19937_64& rng) {
  std::vector<int> legal;
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) legal.push_back(static_cast<int>(i));
  if (legal.empty()) return -1;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (!e.boltzmann) {
    if (u(rng) < e.epsilon)
      return legal[std::uniform_int_distribution<size_t>(0, legal.size() - 1)(rng)];
    int best = legal[0];
    for (int a : legal)
      if (q[a] > q[best]) best = a;
    return best;
  }
  double top = q[legal[0]], mean = 0;
  for (int a : legal) {
    top = std::max(top, static_cast<double>(q[a]));
    mean += q[a];
  }
  mean /= static_cast<double>(legal.size());
  double var = 0;
  for (int a : legal) var += (q[a] - mean) * (q[a] - mean);
  const double sd = std::sqrt(var / static_cast<double>(legal.size()));
  // Q values all (nearly) equal: every choice is as good, pick uniformly.
  const double scale = e.temperature * std::max(sd, 1e-12);
  std::vector<double> w(legal.size());
  double total = 0;
  for (size_t k = 0; k < legal.size(); ++k) total += w[k] = std::exp((q[legal[k]] - top) / scale);
  double x = u(rng) * total;
  for (size_t k = 0; k < legal.size(); ++k) {
    x -= w[k];
    if (x <= 0) return legal[k];
  }
  return legal.back();
}

torch::Tensor td_targets(const torch::Tensor& rewards, const torch::Tensor& terminated,
                         const torch::Tensor& q_next, const torch::Tensor& has_legal, double gamma,
                         bool maxq) {
  // Bootstrap unless the episode terminated (a truncated one still bootstraps) or s' offers no
  // legal action at all.
  torch::Tensor bootstrap = (1.0 - terminated) * has_legal;
  // Max-Q (peak reward) Bellman target: the value of s' competes with r instead of adding to it.
  if (maxq) return torch::where(bootstrap > 0, torch::maximum(rewards, gamma * q_next), rewards);
  return rewards + gamma * bootstrap * q_next;
}

void stack_observations(const std::vector<const AgentObs*>& obs, int token_len, int action_count,
                        torch::Tensor& features, torch::Tensor& tokens, torch::Tensor& mask) {
  const int64_t n = static_cast<int64_t>(obs.size());
  const int64_t f = n ? static_cast<int64_t>(obs[0]->features.size()) : 0;
  features = torch::empty({n, f}, torch::kFloat32);
  mask = torch::zeros({n, action_count}, torch::kBool);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(obs[i]->features.data(), f, features.data_ptr<float>() + i * f);
    bool* m = mask.data_ptr<bool>() + i * action_count;
    for (int a = 0; a < action_count && a < static_cast<int>(obs[i]->mask.size()); ++a)
      m[a] = obs[i]->mask[a];
  }
  tokens = torch::Tensor();
  if (token_len > 0) {
    tokens = torch::zeros({n, token_len}, torch::kInt64);
    for (int64_t i = 0; i < n; ++i) {
      int64_t* t = tokens.data_ptr<int64_t>() + i * token_len;
      for (int k = 0; k < token_len && k < static_cast<int>(obs[i]->tokens.size()); ++k)
        t[k] = obs[i]->tokens[k];
    }
  }
}

DqnLearner::DqnLearner(const AgentConfig& config, const NetworkShape& shape)
    : config_(config),
      shape_(shape),
      online_(config, shape),
      target_(config, shape),
      optimizer_(online_->parameters(), torch::optim::AdamOptions(config.lr)),
      replay_(config.buffer_size, shape.feature_size,
              config.encoder == "tokens" ? config.token_len : 0, shape.action_count,
              config.prioritized, config.per_alpha),
      rng_(config.seed * 0x9e3779b97f4a7c15ULL + 17) {
  hard_update(target_, online_);
  target_->eval();
}

torch::Tensor DqnLearner::q_values(const std::vector<const AgentObs*>& obs) {
  torch::NoGradGuard no_grad;
  torch::Tensor f, t, m;
  stack_observations(obs, online_->token_len(), shape_.action_count, f, t, m);
  if (!actor_.is_empty()) {
    std::lock_guard lock(actor_mu_);
    return actor_->forward(f, t, m);
  }
  std::lock_guard lock(net_mu_);
  return online_->forward(f, t, m);
}

void DqnLearner::make_actor_copy() {
  std::lock_guard lock(net_mu_);
  std::lock_guard alock(actor_mu_);
  actor_ = QNetwork(config_, shape_);
  actor_->eval();
  hard_update(actor_, online_);
}

void DqnLearner::publish_to_actors() {
  if (actor_.is_empty()) return;
  std::lock_guard lock(net_mu_);
  std::lock_guard alock(actor_mu_);
  hard_update(actor_, online_);
}

int DqnLearner::replay_size() const {
  std::lock_guard lock(replay_mu_);
  return replay_.size();
}

namespace {

// The transition s --action--> next, pointing into the observations.
Transition transition(const AgentObs& s, int action, double reward, const AgentObs& next,
                      bool terminated) {
  Transition t;
  t.obs = &s.features;
  t.tokens = s.tokens.empty() ? nullptr : &s.tokens;
  t.mask = &s.mask;
  t.action = action;
  t.reward = static_cast<float>(reward);
  t.next_obs = &next.features;
  t.next_tokens = next.tokens.empty() ? nullptr : &next.tokens;
  t.next_mask = &next.mask;
  t.terminated = terminated;
  return t;
}

}  // namespace

void DqnLearner::remember(const AgentObs& s, int action, double reward, const AgentObs& next,
                          bool terminated) {
  const Transition t = transition(s, action, reward, next, terminated);
  std::lock_guard lock(replay_mu_);
  replay_.add(t);
}

void DqnLearner::remember_demo(const AgentObs& s, int action, double reward, const AgentObs& next) {
  const Transition t = transition(s, action, reward, next, false);
  std::lock_guard lock(replay_mu_);
  if (!demos_)
    demos_ = std::make_unique<ReplayBuffer>(config_.demo_buffer, shape_.feature_size,
                                            config_.encoder == "tokens" ? config_.token_len : 0,
                                            shape_.action_count, false, 0.0);
  demos_->add(t);
}

int DqnLearner::demo_size() const {
  std::lock_guard lock(replay_mu_);
  return demos_ ? demos_->size() : 0;
}

namespace {

// `a` then `b`, row-wise (an undefined tensor stays undefined).
torch::Tensor rows(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.defined() || a.numel() == 0) return b;
  if (!b.defined() || b.numel() == 0) return a;
  return torch::cat({a, b}, 0);
}

Batch concat(Batch a, const Batch& b) {
  a.obs = rows(a.obs, b.obs);
  a.tokens = rows(a.tokens, b.tokens);
  a.mask = rows(a.mask, b.mask);
  a.actions = rows(a.actions, b.actions);
  a.rewards = rows(a.rewards, b.rewards);
  a.terminated = rows(a.terminated, b.terminated);
  a.next_obs = rows(a.next_obs, b.next_obs);
  a.next_tokens = rows(a.next_tokens, b.next_tokens);
  a.next_mask = rows(a.next_mask, b.next_mask);
  a.weights = rows(a.weights, b.weights);
  return a;  // indices stay the replay part's (the demonstrations have no priorities)
}

}  // namespace

UpdateStats DqnLearner::update(double beta, bool demos_only) {
  std::lock_guard lock(net_mu_);
  Batch b;
  int nd = 0, nr = config_.batch_size;
  {
    std::lock_guard rlock(replay_mu_);
    if (demos_ && demos_->size() > 0 && (config_.demo_ratio > 0 || demos_only)) {
      nd = demos_only || replay_.size() == 0
               ? config_.batch_size
               : std::clamp(static_cast<int>(std::lround(config_.batch_size * config_.demo_ratio)),
                            1, config_.batch_size);
      nr = config_.batch_size - nd;
    }
    if (nr > 0) b = replay_.sample(nr, beta, rng_);
    if (nd > 0) b = concat(std::move(b), demos_->sample(nd, 1.0, rng_));
  }
  torch::Tensor q_all = online_->forward(b.obs, b.tokens, b.mask);
  torch::Tensor q = q_all.gather(1, b.actions.unsqueeze(1)).squeeze(1);
  torch::Tensor y;
  {
    torch::NoGradGuard no_grad;
    // Double DQN: the online net picks a' among legal actions, the target net scores it.
    torch::Tensor a_next =
        masked_argmax(online_->forward(b.next_obs, b.next_tokens, b.next_mask), b.next_mask);
    torch::Tensor q_next = target_->forward(b.next_obs, b.next_tokens, b.next_mask)
                               .gather(1, a_next.unsqueeze(1))
                               .squeeze(1);
    y = td_targets(b.rewards, b.terminated, q_next, b.next_mask.any(1).to(torch::kFloat32),
                   config_.gamma, config_.target == "maxq");
  }
  torch::Tensor td = q - y;
  torch::Tensor abs = td.abs();
  torch::Tensor quad = abs.clamp_max(config_.huber_delta);
  torch::Tensor huber = 0.5 * quad * quad + config_.huber_delta * (abs - quad);
  torch::Tensor loss = (b.weights * huber).mean();
  UpdateStats stats;
  stats.td_loss = loss.item<double>();
  stats.demos = nd;
  if (nd > 0) {
    // DQfD's large-margin loss on the demonstration rows (the batch's last nd).
    const int64_t n = nr + nd;
    torch::Tensor qd = q_all.slice(0, nr, n), md = b.mask.slice(0, nr, n),
                  ad = b.actions.slice(0, nr, n);
    torch::Tensor margins =
        torch::full_like(qd, config_.demo_margin).scatter_(1, ad.unsqueeze(1), 0.0);
    torch::Tensor top = (qd + margins).masked_fill(md.logical_not(), -1e30).amax(1);
    torch::Tensor margin_loss = (top - q.slice(0, nr, n)).mean();
    loss = loss + config_.demo_weight * margin_loss;
    stats.demo_margin_loss = margin_loss.item<double>();
    torch::Tensor greedy = qd.detach().masked_fill(md.logical_not(), -1e30).argmax(1);
    stats.demo_accuracy = greedy.eq(ad).to(torch::kFloat32).mean().item<double>();
  }
  optimizer_.zero_grad();
  loss.backward();
  torch::nn::utils::clip_grad_norm_(online_->parameters(), config_.grad_clip);
  optimizer_.step();
  ++updates_;
  if (config_.tau > 0)
    soft_update(target_, online_, config_.tau);
  else if (updates_ % config_.target_update == 0)
    hard_update(target_, online_);
  if (replay_.prioritized() && nr > 0) {
    torch::Tensor td_cpu = td.detach().slice(0, 0, nr).contiguous();
    std::vector<float> errors(td_cpu.data_ptr<float>(), td_cpu.data_ptr<float>() + td_cpu.numel());
    std::lock_guard rlock(replay_mu_);
    replay_.update_priorities(b.indices, errors);
  }
  stats.q_mean = q.detach().mean().item<double>();
  return stats;
}

DqnLearner::Snapshot DqnLearner::snapshot() {
  std::lock_guard lock(net_mu_);
  return {model_bytes(), optimizer_bytes(), updates_};
}

std::string DqnLearner::model_bytes() {
  std::lock_guard lock(net_mu_);
  return network_bytes(online_);
}

// Adam's state, parameter by parameter in the network's order. LibTorch's own save keys each
// parameter's state by the address of its tensor, which differs from run to run: identical runs
// then wrote different checkpoints. Here the keys are positions, so the bytes are the run's.
std::string DqnLearner::optimizer_bytes() {
  std::lock_guard lock(net_mu_);
  torch::serialize::OutputArchive a;
  const auto& group = optimizer_.param_groups().at(0);
  const auto& params = group.params();
  a.write("params", torch::tensor(static_cast<int64_t>(params.size()), torch::kInt64));
  a.write("lr", torch::tensor(static_cast<const torch::optim::AdamOptions&>(group.options()).lr(),
                              torch::kFloat64));
  const auto& state = optimizer_.state();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto it = state.find(c10::guts::to_string(params[i].unsafeGetTensorImpl()));
    if (it == state.end()) continue;  // never stepped
    const auto& s = static_cast<const torch::optim::AdamParamState&>(*it->second);
    const std::string k = "p" + std::to_string(i) + ".";
    a.write(k + "step", torch::tensor(s.step(), torch::kInt64));
    a.write(k + "exp_avg", s.exp_avg());
    a.write(k + "exp_avg_sq", s.exp_avg_sq());
    if (s.max_exp_avg_sq().defined()) a.write(k + "max_exp_avg_sq", s.max_exp_avg_sq());
  }
  std::ostringstream out;
  a.save_to(out);
  return out.str();
}

std::string DqnLearner::load_model_bytes(const std::string& bytes) {
  std::string e;
  {
    std::lock_guard lock(net_mu_);
    e = load_network_bytes(online_, bytes);
    if (e.empty()) hard_update(target_, online_);
  }
  if (e.empty()) publish_to_actors();
  return e;
}

std::string DqnLearner::load_optimizer_bytes(const std::string& bytes) {
  std::lock_guard lock(net_mu_);
  try {
    torch::serialize::InputArchive a;
    std::istringstream in(bytes);
    a.load_from(in);
    auto& group = optimizer_.param_groups().at(0);
    const auto& params = group.params();
    torch::Tensor t;
    if (!a.try_read("params", t) || t.item<int64_t>() != static_cast<int64_t>(params.size()))
      return "cannot read the optimiser state: it is not for this network's " +
             std::to_string(params.size()) + " parameters";
    // Read everything first: a refused archive leaves the learner's state as it was.
    std::vector<std::pair<std::string, std::unique_ptr<torch::optim::AdamParamState>>> read;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string k = "p" + std::to_string(i) + ".";
      torch::Tensor step, m, v, vmax;
      if (!a.try_read(k + "step", step)) continue;  // never stepped
      if (!a.try_read(k + "exp_avg", m) || !a.try_read(k + "exp_avg_sq", v) ||
          !m.sizes().equals(params[i].sizes()) || !v.sizes().equals(params[i].sizes()))
        return "cannot read the optimiser state: parameter " + std::to_string(i) +
               "'s moments are missing or misshapen";
      auto s = std::make_unique<torch::optim::AdamParamState>();
      s->step(step.item<int64_t>());
      s->exp_avg(m);
      s->exp_avg_sq(v);
      if (a.try_read(k + "max_exp_avg_sq", vmax)) s->max_exp_avg_sq(vmax);
      read.emplace_back(c10::guts::to_string(params[i].unsafeGetTensorImpl()), std::move(s));
    }
    if (a.try_read("lr", t))
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(t.item<double>());
    auto& state = optimizer_.state();
    state.clear();
    for (auto& [key, s] : read) state[key] = std::move(s);
    return "";
  } catch (const std::exception& e) {
    std::string m = e.what();
    return "cannot read the optimiser state: " + m.substr(0, m.find('\n'));
  }
}

}  // namespace perfdojo::agents
