#include "agents/baselines.h"

#include <algorithm>
#include <memory>
#include <random>

namespace perfdojo::agents {

EvalBudget::EvalBudget(std::vector<int> budgets) : budgets_(std::move(budgets)) {
  if (budgets_.empty()) budgets_ = {1};
  result_.best_at.assign(budgets_.size(), 1.0);
}

void EvalBudget::start(const env::Env& env, double initial_time_s) {
  seen_.insert(ir::structural_hash(env.program()));
  if (result_.initial_time_s == 0) {
    result_.initial_time_s = result_.best_time_s = initial_time_s;
  }
}

bool EvalBudget::record(const env::Env& env, const env::StepResult& r) {
  ++steps_;
  if (r.info.error || r.info.illegal_action) return false;
  if (!seen_.insert(ir::structural_hash(env.program())).second) return false;
  ++evaluations_;
  if (r.info.time_s > 0 && r.info.time_s < result_.best_time_s) {
    result_.best_time_s = r.info.time_s;
    result_.best_trace = env.state().trace;
  }
  for (size_t i = 0; i < budgets_.size(); ++i)
    if (budgets_[i] == evaluations_)
      result_.best_at[i] = result_.initial_time_s / result_.best_time_s;
  return true;
}

SearchResult EvalBudget::finish() {
  double s = result_.best_time_s > 0 ? result_.initial_time_s / result_.best_time_s : 1.0;
  for (size_t i = 0; i < budgets_.size(); ++i)
    if (budgets_[i] > evaluations_) result_.best_at[i] = s;
  result_.best_speedup = s;
  result_.evaluations = evaluations_;
  return result_;
}

std::vector<int> legal_actions(const env::Env& env) {
  std::vector<uint8_t> m = env.action_mask();
  std::vector<int> out;
  for (int i = 0; i + 1 < static_cast<int>(m.size()); ++i)
    if (m[i]) out.push_back(i);
  return out;
}

namespace {

// Builds and resets an env; `error` set when it cannot.
std::unique_ptr<env::Env> start_env(const env::EnvConfig& config, EvalBudget& budget,
                                    std::string& error) {
  auto made = env::Env::make(config);
  if (!made.ok()) {
    error = made.error_text();
    return nullptr;
  }
  std::unique_ptr<env::Env> e = std::move(made).value();
  auto [obs, info] = e->reset();
  if (info.error) {
    error = *info.error;
    return nullptr;
  }
  budget.start(*e, info.initial_time_s);
  return e;
}

SearchResult failed(const std::string& error, size_t budgets) {
  SearchResult r;
  r.error = error;
  r.best_at.assign(budgets, 1.0);
  return r;
}

// A program of a tree search: a forked env holding it.
struct Node {
  std::unique_ptr<env::Env> env;
  double time_s = 0;
  bool expandable = true;
};

// Times every child of `node` not seen before (seeded order), until the budget runs out.
std::vector<Node> expand(const Node& node, EvalBudget& budget, std::mt19937_64& rng) {
  std::vector<Node> children;
  std::vector<int> actions = legal_actions(*node.env);
  std::shuffle(actions.begin(), actions.end(), rng);
  for (int a : actions) {
    if (budget.exhausted()) break;
    std::unique_ptr<env::Env> child = node.env->fork();
    env::StepResult r = child->step(a);
    if (!budget.record(*child, r)) continue;
    children.push_back({std::move(child), r.info.time_s, !(r.terminated || r.truncated)});
  }
  return children;
}

}  // namespace

SearchResult random_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                           uint64_t seed) {
  EvalBudget budget(budgets);
  std::string error;
  auto e = start_env(config, budget, error);
  if (!e) return failed(error, budgets.size());
  std::mt19937_64 rng(seed);
  bool done = false;
  while (!budget.exhausted() && !budget.steps_exhausted()) {
    if (done) {
      e->reset();
      done = false;
    }
    std::vector<int> legal = legal_actions(*e);
    if (legal.empty()) {
      if (e->state().trace.empty()) break;  // nothing applies to the starting program
      done = true;
      continue;
    }
    env::StepResult r =
        e->step(legal[std::uniform_int_distribution<size_t>(0, legal.size() - 1)(rng)]);
    budget.record(*e, r);
    done = r.terminated || r.truncated;
  }
  return budget.finish();
}

SearchResult greedy_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                           uint64_t seed) {
  EvalBudget budget(budgets);
  std::string error;
  auto root = start_env(config, budget, error);
  if (!root) return failed(error, budgets.size());
  std::mt19937_64 rng(seed);
  std::vector<Node> open;
  open.push_back({std::move(root), 0, true});
  open.back().time_s = open.back().env->state().initial_time_s;
  while (!budget.exhausted()) {
    // The fastest unexpanded program (earliest on ties, so the order is reproducible).
    int pick = -1;
    for (int i = 0; i < static_cast<int>(open.size()); ++i)
      if (open[i].expandable && (pick < 0 || open[i].time_s < open[pick].time_s)) pick = i;
    if (pick < 0) break;
    open[pick].expandable = false;
    std::vector<Node> children = expand(open[pick], budget, rng);
    open[pick].env.reset();  // expanded: its env is no longer needed
    for (auto& c : children) open.push_back(std::move(c));
  }
  return budget.finish();
}

SearchResult eager_greedy_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                                 const ChildOrder& order, double tolerance) {
  return eager_greedy_search(config, budgets, order, ChildExtension(), tolerance);
}

SearchResult eager_greedy_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                                 const ChildOrder& order, const ChildExtension& extend,
                                 double tolerance) {
  EvalBudget budget(budgets);
  auto made = env::Env::make(config);
  if (!made.ok()) return failed(made.error_text(), budgets.size());
  // A child to time: a move, and whether to time where `extend` leads from it instead.
  struct Child {
    int action;
    bool extended;
  };
  // A program found: the env holding it, how it was observed, and its children in order (made
  // when it is first picked: most programs never are).
  struct Program {
    std::unique_ptr<env::Env> env;
    double time_s = 0;
    env::Observation obs;
    std::vector<uint8_t> mask;
    bool ordered = false;
    std::vector<Child> children = {};
    size_t next = 0;
  };
  std::vector<Program> found;
  {
    std::unique_ptr<env::Env> root = std::move(made).value();
    auto [obs, info] = root->reset();
    if (info.error) return failed(*info.error, budgets.size());
    budget.start(*root, info.initial_time_s);
    found.push_back(
        {std::move(root), info.initial_time_s, std::move(obs), std::move(info.action_mask)});
  }
  while (!budget.exhausted() && !budget.steps_exhausted()) {
    // The fastest program with a child left; in discovery order, a later one wins only when it is
    // faster by more than the tolerance (reproducible, and near the start on near-ties).
    int pick = -1;
    for (int i = 0; i < static_cast<int>(found.size()); ++i) {
      const Program& p = found[i];
      if (!p.env || (p.ordered && p.next >= p.children.size())) continue;
      if (pick < 0 || p.time_s < found[pick].time_s * (1.0 - tolerance)) pick = i;
    }
    if (pick < 0) break;
    Program& p = found[pick];
    if (!p.ordered) {
      for (int a : order(*p.env, p.obs, p.mask))
        p.children.push_back({a, static_cast<bool>(extend)});
      p.ordered = true;
      if (p.children.empty()) {
        p.env.reset();
        continue;
      }
    }
    const Child c = p.children[p.next++];
    std::vector<int> moves = {c.action};
    if (c.extended) {
      std::vector<int> more = extend(*p.env, c.action);
      if (!more.empty()) {
        moves.insert(moves.end(), more.begin(), more.end());
        // The move alone comes next: the sequence's end is not always the best place on it.
        p.children.insert(p.children.begin() + static_cast<long>(p.next), Child{c.action, false});
      }
    }
    std::unique_ptr<env::Env> child = p.env->fork();
    env::StepResult r = child->step(moves, /*time_each=*/false);
    if (p.next >= p.children.size()) p.env.reset();  // every child timed: no longer needed
    if (!budget.record(*child, r)) continue;
    if (r.terminated || r.truncated) continue;  // timed, but the episode cannot go on from it
    found.push_back(
        {std::move(child), r.info.time_s, std::move(r.observation), std::move(r.info.action_mask)});
  }
  return budget.finish();
}

SearchResult eager_random_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                                 uint64_t seed) {
  std::mt19937_64 rng(seed);
  return eager_greedy_search(
      config, budgets,
      [&](const env::Env& e, const env::Observation&, const std::vector<uint8_t>&) {
        std::vector<int> actions = legal_actions(e);
        std::shuffle(actions.begin(), actions.end(), rng);
        return actions;
      });
}

SearchResult beam_search(const env::EnvConfig& config, const std::vector<int>& budgets,
                         uint64_t seed, int width) {
  EvalBudget budget(budgets);
  std::string error;
  auto root = start_env(config, budget, error);
  if (!root) return failed(error, budgets.size());
  std::mt19937_64 rng(seed);
  std::vector<Node> beam;
  beam.push_back({std::move(root), 0, true});
  while (!budget.exhausted() && !beam.empty()) {
    std::vector<Node> next;
    for (const Node& n : beam) {
      if (!n.expandable) continue;
      for (auto& c : expand(n, budget, rng)) next.push_back(std::move(c));
      if (budget.exhausted()) break;
    }
    std::stable_sort(next.begin(), next.end(),
                     [](const Node& a, const Node& b) { return a.time_s < b.time_s; });
    if (static_cast<int>(next.size()) > width) next.resize(width);
    beam = std::move(next);
  }
  return budget.finish();
}

}  // namespace perfdojo::agents
