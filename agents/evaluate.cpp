#include "agents/evaluate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <random>
#include <set>

#include "agents/train.h"
#include "gym/observation.h"
#include "transforms/flat_space.h"

namespace perfdojo::agents {

ir::Result<std::shared_ptr<Policy>> Policy::load(const std::string& path) {
  auto ck = load_checkpoint(path);
  if (!ck.ok()) return ck.errors();
  Checkpoint c = std::move(ck).value();
  auto fail = [&](const std::string& m) -> ir::Result<std::shared_ptr<Policy>> {
    return std::vector<ir::Diagnostic>{{{path, 0, 0}, m}};
  };
  if (auto e = validate(c.config); !e.empty()) return fail("checkpoint config: " + e);
  if (c.action_count < 1 || c.action_count > 1000000)
    return fail("implausible action count in the checkpoint");
  use_single_thread();
  // A checkpoint trained before the features' target block reads today's vector.
  if (auto m = migrate_features(c); !m.ok())
    return fail("the checkpoint's header does not fit its network: " + m.errors()[0].message);
  if (c.feature_size != env::kFeatureSize)
    return fail("the checkpoint's network reads " + std::to_string(c.feature_size) +
                " features, this build's env gives " + std::to_string(env::kFeatureSize));
  // A checkpoint trained before the flat space's last kinds were added acts in today's space.
  if (auto m = migrate_network(c); !m.ok())
    return fail("the checkpoint's header does not fit its network: " + m.errors()[0].message);
  QNetwork net(c.config, NetworkShape{c.feature_size, c.action_count, c.token_vocab});
  if (auto e = load_network_bytes(net, c.model); !e.empty()) return fail(e);
  net->eval();
  return std::shared_ptr<Policy>(new Policy(std::move(c), std::move(net)));
}

std::vector<float> Policy::q_values(const AgentObs& obs) {
  torch::NoGradGuard no_grad;
  torch::Tensor f, t, m;
  stack_observations({&obs}, net_->token_len(), checkpoint_.action_count, f, t, m);
  torch::Tensor q = net_->forward(f, t, m).contiguous();
  return std::vector<float>(q.data_ptr<float>(), q.data_ptr<float>() + q.numel());
}

std::string Policy::check_env(const env::Env& env) const {
  return check_compatible(checkpoint_, checkpoint_.config, env::kFeatureSize, env.action_spec().n,
                          env::token_vocabulary_size());
}

namespace {

// The refusal every search gives for an env the network does not fit ("" when it fits).
std::string refusal(Policy& policy, const env::EnvConfig& config) {
  auto made = env::Env::make(config);
  return made.ok() ? policy.check_env(*made.value()) : made.error_text();
}

SearchResult refused(const std::string& error, size_t budgets) {
  SearchResult r;
  r.error = error;
  r.best_at.assign(budgets, 1.0);
  return r;
}

}  // namespace

std::vector<int> q_order(Policy& policy, const env::Observation& obs,
                         const std::vector<uint8_t>& mask, double kind_penalty) {
  AgentObs o = to_agent_obs(obs, mask, policy.config());
  std::vector<float> q = policy.q_values(o);
  std::vector<int> actions;
  for (int i = 0; i + 1 < static_cast<int>(o.mask.size()); ++i)
    if (o.mask[i]) actions.push_back(i);
  std::stable_sort(actions.begin(), actions.end(), [&](int a, int b) { return q[a] > q[b]; });
  if (kind_penalty <= 0 || actions.size() < 3) return actions;
  // Each next action: the highest Q in standard deviations of Q over the legal actions, less
  // kind_penalty for every action of its kind placed before it (sketch actions are one kind).
  static const transforms::FlatActionSpace space(transforms::FlatSpaceConfig{},
                                                 transforms::Target{});
  std::vector<int> kind(actions.size());
  for (size_t i = 0; i < actions.size(); ++i)
    kind[i] = actions[i] < space.size() ? static_cast<int>(space.parts(actions[i]).kind)
                                        : transforms::kNumKinds;
  double mean = 0, var = 0;
  for (int a : actions) mean += q[a];
  mean /= static_cast<double>(actions.size());
  for (int a : actions) var += (q[a] - mean) * (q[a] - mean);
  const double sd = std::sqrt(var / static_cast<double>(actions.size()));
  if (!(sd > 0)) return actions;
  std::vector<int> placed(transforms::kNumKinds + 1, 0), out;
  std::vector<uint8_t> taken(actions.size(), 0);
  for (size_t n = 0; n < actions.size(); ++n) {
    size_t best = actions.size();
    double best_score = 0;
    for (size_t i = 0; i < actions.size(); ++i) {
      if (taken[i]) continue;
      const double score = q[actions[i]] / sd - kind_penalty * placed[kind[i]];
      if (best == actions.size() || score > best_score) best = i, best_score = score;
    }
    taken[best] = 1;
    out.push_back(actions[best]);
    ++placed[kind[best]];
  }
  return out;
}

namespace {

// The env `config` names, checked against the policy's network; nullptr and `error` when not.
std::unique_ptr<env::Env> policy_env(Policy& policy, const env::EnvConfig& config,
                                     std::string* error) {
  auto made = env::Env::make(config);
  if (!made.ok()) {
    *error = made.error_text();
    return nullptr;
  }
  std::unique_ptr<env::Env> e = std::move(made).value();
  if (auto m = policy.check_env(*e); !m.empty()) {
    *error = m;
    return nullptr;
  }
  return e;
}

}  // namespace

SearchResult agent_search(Policy& policy, const env::EnvConfig& config,
                          const std::vector<int>& budgets, uint64_t seed, double epsilon) {
  EvalBudget budget(budgets);
  auto fail = [&](const std::string& m) { return refused(m, budgets.size()); };
  std::string error;
  std::unique_ptr<env::Env> e = policy_env(policy, config, &error);
  if (!e) return fail(error);
  std::mt19937_64 rng(seed);
  const AgentConfig& ac = policy.config();
  for (int episode = 0; !budget.exhausted() && !budget.steps_exhausted(); ++episode) {
    auto [obs, info] = e->reset();
    if (info.error) return fail(*info.error);
    if (episode == 0) budget.start(*e, info.initial_time_s);
    Exploration x;
    x.epsilon = episode == 0 ? 0.0 : epsilon;
    AgentObs o = to_agent_obs(obs, info.action_mask, ac);
    for (;;) {
      std::vector<float> q = policy.q_values(o);
      int a = select_action(q.data(), o.mask, x, rng);
      if (a < 0) break;
      env::StepResult r = e->step(a);
      budget.record(*e, r);
      if (r.terminated || r.truncated || budget.exhausted() || budget.steps_exhausted()) break;
      o = to_agent_obs(r.observation, r.info.action_mask, ac);
    }
    // A purely greedy policy on a deterministic env repeats itself: without exploration one
    // episode is all there is.
    if (epsilon == 0) break;
  }
  return budget.finish();
}

SearchResult agent_policy(Policy& policy, const env::EnvConfig& config,
                          const std::vector<int>& budgets) {
  EvalBudget budget(budgets);
  auto fail = [&](const std::string& m) { return refused(m, budgets.size()); };
  std::string error;
  std::unique_ptr<env::Env> e = policy_env(policy, config, &error);
  if (!e) return fail(error);
  auto [obs, info] = e->reset();
  if (info.error) return fail(*info.error);
  budget.start(*e, info.initial_time_s);
  const AgentConfig& ac = policy.config();
  AgentObs o = to_agent_obs(obs, info.action_mask, ac);
  // A greedy policy that comes back to a program it left would go round the same loop to the
  // end of the episode (swap_scopes twice): at a program met again, the moves already taken
  // from it are left out, so the episode goes on with the next best.
  std::map<uint64_t, std::set<int>> taken;
  for (int step = 0; step < config.max_episode_steps; ++step) {
    const std::vector<float> q = policy.q_values(o);
    std::set<int>& before = taken[ir::structural_hash(e->program())];
    int a = -1;
    for (size_t i = 0; i < o.mask.size(); ++i)
      if (o.mask[i] && !before.count(static_cast<int>(i)) &&
          (a < 0 || q[i] > q[static_cast<size_t>(a)]))
        a = static_cast<int>(i);
    if (a < 0) break;
    before.insert(a);
    env::StepResult r = e->step(a);
    budget.record(*e, r);
    if (r.terminated || r.truncated || budget.exhausted()) break;
    o = to_agent_obs(r.observation, r.info.action_mask, ac);
  }
  return budget.finish();
}

std::string resolve_checkpoint(const std::string& name) {
  if (name == "default") return PERFDOJO_SOURCE_DIR "/agents/checkpoints/default.ckpt";
  return name;
}

SearchResult agent_best_first(Policy& policy, const env::EnvConfig& config,
                              const std::vector<int>& budgets) {
  EvalBudget budget(budgets);
  auto fail = [&](const std::string& m) { return refused(m, budgets.size()); };
  std::string error;
  std::unique_ptr<env::Env> root = policy_env(policy, config, &error);
  if (!root) return fail(error);
  auto [obs, info] = root->reset();
  if (info.error) return fail(*info.error);
  budget.start(*root, info.initial_time_s);
  const AgentConfig& ac = policy.config();
  const bool maxq = ac.target == "maxq";
  const double t0 = info.initial_time_s;

  struct Entry {
    double priority;
    int node, action;
    int64_t order;  // FIFO among equal priorities: reproducible
    bool operator<(const Entry& o) const {
      return priority != o.priority ? priority < o.priority : order > o.order;
    }
  };
  std::vector<std::unique_ptr<env::Env>> nodes;
  std::priority_queue<Entry> queue;
  int64_t order = 0;
  auto push_actions = [&](std::unique_ptr<env::Env> e, const env::Observation& o,
                          const std::vector<uint8_t>& mask, double time_s) {
    AgentObs a = to_agent_obs(o, mask, ac);
    std::vector<float> q = policy.q_values(a);
    const double base = maxq ? 0.0 : std::log(t0 / time_s);
    int id = static_cast<int>(nodes.size());
    for (int i = 0; i + 1 < static_cast<int>(a.mask.size()); ++i)
      if (a.mask[i]) queue.push({base + q[i], id, i, order++});
    nodes.push_back(std::move(e));
  };
  push_actions(std::move(root), obs, info.action_mask, t0);
  while (!budget.exhausted() && !budget.steps_exhausted() && !queue.empty()) {
    Entry top = queue.top();
    queue.pop();
    std::unique_ptr<env::Env> child = nodes[top.node]->fork();
    env::StepResult r = child->step(top.action);
    if (!budget.record(*child, r) || r.terminated || r.truncated) continue;
    push_actions(std::move(child), r.observation, r.info.action_mask, r.info.time_s);
  }
  return budget.finish();
}

SearchResult agent_greedy(Policy& policy, const env::EnvConfig& config,
                          const std::vector<int>& budgets, double tolerance, double kind_penalty) {
  if (auto e = refusal(policy, config); !e.empty()) return refused(e, budgets.size());
  auto order = [&](const env::Env&, const env::Observation& obs, const std::vector<uint8_t>& mask) {
    return q_order(policy, obs, mask, kind_penalty);
  };
  return eager_greedy_search(config, budgets, order, tolerance);
}

SearchResult agent_probe(Policy& policy, const env::EnvConfig& config,
                         const std::vector<int>& budgets, double tolerance, double kind_penalty) {
  if (auto e = refusal(policy, config); !e.empty()) return refused(e, budgets.size());
  auto order = [&](const env::Env&, const env::Observation& obs, const std::vector<uint8_t>& mask) {
    return q_order(policy, obs, mask, kind_penalty);
  };
  // The policy's greedy moves after `action`, untimed, until the episode ends (or nothing is
  // legal but stop).
  auto probe = [&](const env::Env& from, int action) {
    std::vector<int> more;
    std::unique_ptr<env::Env> e = from.fork();
    env::StepResult r = e->step_untimed(action);
    while (!r.terminated && !r.truncated && !r.info.illegal_action && !r.info.error) {
      std::vector<int> moves = q_order(policy, r.observation, r.info.action_mask, 0);
      if (moves.empty()) break;
      r = e->step_untimed(moves.front());
      if (r.info.illegal_action) break;  // the mask says legal: cannot happen, but never send it
      more.push_back(moves.front());
    }
    return more;
  };
  return eager_greedy_search(config, budgets, order, probe, tolerance);
}

}  // namespace perfdojo::agents
