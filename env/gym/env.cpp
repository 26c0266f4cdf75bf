#include "gym/env.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "gym/dataset.h"
#include "target/target_of.h"
#include "transforms/contract.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/registry.h"

namespace perfdojo::env {

const std::vector<std::string>& reward_spaces() {
  static const std::vector<std::string> kSpaces = {"log_speedup_best", "log_speedup_step",
                                                   "relative_step", "log_speedup_total"};
  return kSpaces;
}

namespace {

// Longest trace and reward history an episode keeps.
constexpr size_t kMaxHistory = 100000;

transforms::Target target_for(const backends::Backend& b) { return target_of(b); }

std::vector<ir::Diagnostic> config_error(const std::string& m) { return {{{"config", 0, 0}, m}}; }

}  // namespace

std::optional<RewardSpace> parse_reward_space(const std::string& name) {
  if (name == "log_speedup_best") return RewardSpace::kLogSpeedupBest;
  if (name == "log_speedup_step") return RewardSpace::kLogSpeedupStep;
  if (name == "relative_step") return RewardSpace::kRelativeStep;
  if (name == "log_speedup_total") return RewardSpace::kLogSpeedupTotal;
  return std::nullopt;
}

std::optional<ActionSpaceKind> parse_action_space(const std::string& name) {
  if (name == "flat") return ActionSpaceKind::kFlat;
  if (name == "cursor") return ActionSpaceKind::kCursor;
  return std::nullopt;
}

Env::Env(EnvConfig config, std::unique_ptr<backends::Backend> backend)
    : config_(std::move(config)),
      reward_space_(*parse_reward_space(config_.reward_space)),
      action_kind_(*parse_action_space(config_.action_space)),
      model_backend_(backends::is_cost_model(config_.backend)),
      backend_(std::move(backend)),
      target_(target_for(*backend_)),
      flat_(config_.flat, target_),
      cursor_space_(target_) {
  for (const auto& s : config_.observation_spaces) observe_.add(s);
}

ir::Result<std::unique_ptr<Env>> Env::make(const EnvConfig& config) {
  auto backend = backends::make_backend(config.backend, config.backend_config);
  if (!backend) {
    std::string all;
    for (const auto& n : backends::backend_names()) all += (all.empty() ? "" : ", ") + n;
    return config_error("unknown backend '" + config.backend + "'; expected one of " + all +
                        ", or cost_model:FILE (a machine profile)");
  }
  if (auto av = backend->available(); !av.ok)
    return config_error("backend '" + config.backend + "' is not available here: " + av.why);
  if (!parse_reward_space(config.reward_space))
    return config_error(
        "unknown reward space '" + config.reward_space +
        "'; expected log_speedup_best, log_speedup_step, relative_step or log_speedup_total");
  if (!parse_action_space(config.action_space))
    return config_error("unknown action space '" + config.action_space +
                        "'; expected flat or cursor");
  for (const auto& s : config.observation_spaces)
    if (!ObservationSet().add(s))
      return config_error("unknown observation space '" + s +
                          "'; expected ir_text, features, tokens or graph");
  if (config.max_episode_steps < 1) return config_error("max_episode_steps must be at least 1");
  if (config.sketch_actions < 0 || config.sketch_actions > 8)
    return config_error("sketch_actions must be in [0, 8]");
  if (config.flat.max_scopes < 1 || config.flat.max_nodes < 1 || config.flat.max_buffers < 2)
    return config_error("flat action space slots must be positive (max_buffers at least 2)");
  auto program = load_benchmark(config.benchmark);
  if (!program.ok()) return program.errors();
  std::unique_ptr<Env> env(new Env(config, std::move(backend)));
  env->benchmark_ = config.benchmark;
  env->original_ = env->program_ = program.value();
  return env;
}

double Env::time_of(const ir::Program& p, std::optional<std::string>* error) {
  backends::MeasureOptions o = config_.measure;
  o.seed = config_.seed;
  // The cost model is a deterministic function of the program that costs about twice a
  // structural hash: estimating again gives the very time a cache would, for less.
  if (model_backend_) {
    backends::Measurement m = backend_->measure(p, o);
    if (!m.ok()) *error = m.error;
    return m.ok() ? m.median_s : 0;
  }
  uint64_t h = ir::structural_hash(p);
  if (auto it = time_cache_.find(h); it != time_cache_.end()) {
    ++timing_stats_.cached;
    return it->second;
  }
  // A program that failed (too slow to compile, crashed, wrong) fails again without a second
  // compile: a policy that keeps proposing it costs a lookup.
  if (auto it = failure_cache_.find(h); it != failure_cache_.end()) {
    ++timing_stats_.cached;
    *error = it->second;
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  backends::Measurement m = backend_->measure(p, o);
  timing_stats_.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++(m.cached ? timing_stats_.cached : timing_stats_.measured);
  if (!m.ok()) {
    *error = m.error;
    if (static_cast<int>(failure_cache_.size()) >= config_.time_cache_entries)
      failure_cache_.clear();
    failure_cache_[h] = m.error.value_or("failed");
    return 0;
  }
  if (static_cast<int>(time_cache_.size()) >= config_.time_cache_entries) time_cache_.clear();
  time_cache_[h] = m.median_s;
  return m.median_s;
}

double Env::reward(double prev, double now) const {
  if (prev <= 0 || now <= 0) return 0;
  // Pays only for beating the best program of the episode so far (best_time_ is not yet
  // updated with `now`): exploring never costs, and the return is log(initial / best).
  switch (reward_space_) {
    case RewardSpace::kLogSpeedupBest:
      return best_time_ > 0 && now < best_time_ ? std::log(best_time_ / now) : 0;
    case RewardSpace::kRelativeStep:
      return (prev - now) / prev;
    case RewardSpace::kLogSpeedupTotal:
      return std::log(initial_time_ / now);
    case RewardSpace::kLogSpeedupStep:
      break;
  }
  return std::log(prev / now);
}

std::pair<Observation, Info> Env::reset(std::optional<uint64_t> seed, const ResetOptions& options) {
  if (seed) config_.seed = *seed;
  Info info;
  if (options.benchmark && *options.benchmark != benchmark_) {
    auto p = load_benchmark(*options.benchmark);
    if (!p.ok()) {
      // Keep the previous benchmark: a bad option must not lose the env's state.
      info = make_info();
      info.error = p.error_text();
      return {observe_now(), info};
    }
    benchmark_ = *options.benchmark;
    original_ = p.value();
    time_cache_.clear();
    failure_cache_.clear();
  } else if (benchmark_.rfind("perfdojo://gen/", 0) == 0 && seed &&
             benchmark_.find("?seed=") == std::string::npos) {
    // A generator without an explicit seed draws its instance from the reset seed.
    auto p = load_benchmark(benchmark_ + "?seed=" + std::to_string(*seed));
    if (p.ok()) original_ = p.value();
  }
  // The episode starts from the kernel with its multiply-adds fused, as the optimiser's search
  // does (transforms/contract.h), unless the config says as written.
  program_ = config_.contract && transforms::contracts_on(target_) ? transforms::contract(original_)
                                                                   : original_;
  cursor_ = 0;
  steps_ = 0;
  trace_.clear();
  best_trace_.clear();
  rewards_.clear();
  std::optional<std::string> error;
  if (model_backend_ && !start_body_.empty() && start_body_ == program_.body) {
    initial_time_ = start_time_;  // a deterministic function of the program
  } else {
    initial_time_ = time_of(program_, &error);
    start_body_.clear();
    if (!error && model_backend_) {
      start_body_ = program_.body;
      start_time_ = initial_time_;
    }
  }
  time_ = best_time_ = initial_time_;
  done_ = error.has_value();
  info = make_info();
  info.error = error;
  // Every reset returns to this program: its nodes' verdicts stay remembered through the episode.
  mask_memo_.pin();
  return {observe_now(), info};
}

std::optional<transforms::Action> Env::decode(int action) const {
  if (!cursor_on()) return flat_.decode(program_, action);
  if (action < 0 || action >= cursor_space_.size()) return std::nullopt;
  return cursor_space_.to_action(program_, cursor_, action);
}

int Env::base_actions() const { return !cursor_on() ? flat_.size() : cursor_space_.size(); }

ActionSpec Env::action_spec() const {
  const int n = base_actions() + config_.sketch_actions;
  return {config_.action_space, n + 1, n};
}

StepResult Env::step_sketch(int c) {
  ++steps_;
  Info info;
  info.action = "microkernel_sketch " + std::to_string(c);
  auto e = transforms::sketch_program(program_, target_, static_cast<size_t>(c));
  if (e.trace.empty()) {
    info.illegal_action = true;
    info.action_had_no_effect = true;
    info.legality = "nothing_to_do";
    info.legality_message = info.action + ": no GEMM-class nest with a candidate " +
                            std::to_string(c) + " for this target";
    return finish_step(config_.illegal_action_penalty, info);
  }
  // Every step of the expansion went through its own check: the program is legal as it is.
  std::optional<std::string> error;
  const double t = untimed_ ? time_ : time_of(e.program, &error);
  if (error) {
    info.error = "backend failure on '" + info.action + "': " + *error;
    done_ = true;
    return finish_step(config_.illegal_action_penalty, info);
  }
  return commit(std::move(e.program), t, e.trace, std::move(info));
}

StepResult Env::commit(ir::Program next, double t, const std::vector<transforms::Action>& actions,
                       Info info) {
  const double prev = time_;
  const double r = untimed_ ? 0.0 : reward(prev, t);  // before best_time_ takes t in
  program_ = std::move(next);
  time_ = t;
  for (const auto& a : actions)
    if (trace_.size() < kMaxHistory) trace_.push_back(a);
  if (t < best_time_) {
    best_time_ = t;
    best_trace_ = trace_;
  }
  if (cursor_on()) cursor_ = transforms::CursorActionSpace::clamp(program_, cursor_);
  return finish_step(r, std::move(info));
}

std::vector<ObservationSpaceInfo> Env::observation_spec() const {
  std::vector<ObservationSpaceInfo> out;
  for (const auto& s : config_.observation_spaces) {
    ObservationSpaceInfo info = *find_observation_space(s);
    out.push_back(info);
  }
  return out;
}

bool Env::mask_is_current() const {
  if (!mask_valid_ || mask_cursor_ != cursor_ || mask_program_ != program_.body ||
      mask_streams_.size() != program_.buffers.size())
    return false;
  for (size_t b = 0; b < program_.buffers.size(); ++b)
    if (static_cast<bool>(mask_streams_[b]) != program_.buffers[b].stream) return false;
  return true;
}

std::vector<uint8_t> Env::action_mask() const {
  // The mask is a pure function of (program, cursor); refused actions, repeated calls and the
  // bridge's several mask views all hit this cache.
  if (mask_is_current()) {
    mask_.back() = stop_allowed(mask_);
    return mask_;
  }
  mask_ = !cursor_on() ? flat_.mask(program_, &mask_memo_) : cursor_space_.mask(program_, cursor_);
  if (config_.sketch_actions > 0) {
    // Opt-in cost (a scan for GEMM-class nests, fission included, once per program: the mask
    // is cached): a nest with a c-th candidate. The expansion itself runs at the step; one that
    // fails there is refused like an illegal action.
    const size_t choices = transforms::sketch_choices(program_, target_);
    for (int c = 0; c < config_.sketch_actions; ++c)
      mask_.push_back(static_cast<size_t>(c) < choices);
  }
  mask_.push_back(1);  // stop: decided below, on every call (it depends on the episode)
  mask_program_ = program_.body;
  mask_streams_.resize(program_.buffers.size());
  for (size_t b = 0; b < program_.buffers.size(); ++b)
    mask_streams_[b] = program_.buffers[b].stream;
  mask_cursor_ = cursor_;
  mask_valid_ = true;
  mask_.back() = stop_allowed(mask_);
  return mask_;
}

bool Env::stop_allowed(const std::vector<uint8_t>& mask) const {
  if (!config_.stop_after_progress || best_time_ < initial_time_) return true;
  // Before any progress stop is refused, unless nothing else is legal: every state keeps a
  // legal action.
  for (size_t a = 0; a + 1 < mask.size(); ++a)
    if (mask[a]) return false;
  return true;
}

Observation Env::observe_now() const {
  // The cursor features say -1 without a cursor space (docs/env.md), as info.cursor does.
  const TargetTraits traits = target_traits();
  return observe(program_, observe_, cursor_on() ? cursor_ : -1, &feature_memo_, &traits);
}

TargetTraits Env::target_traits() const {
  TargetTraits t;
  t.lanes = target_.widest_lanes();
  t.registers = t.lanes > 0 ? target_.registers() : 0;
  t.fma = target_.fma;
  return t;
}

Info Env::make_info() const {
  Info i;
  i.benchmark = benchmark_;
  i.step = steps_;
  i.legality = "ok";
  i.time_s = time_;
  i.initial_time_s = initial_time_;
  i.best_time_s = best_time_;
  i.best_trace = best_trace_;
  i.action_mask = action_mask();
  i.cursor = cursor_on() ? cursor_ : -1;
  return i;
}

StepResult Env::finish_step(double r, Info info) {
  // History is bounded: an endless episode must not grow the env.
  if (rewards_.size() < kMaxHistory) rewards_.push_back(r);
  StepResult res;
  res.reward = r;
  res.truncated = !done_ && !restoring_ && steps_ >= config_.max_episode_steps;
  res.terminated = done_;
  if (res.truncated) done_ = true;
  Info full = make_info();
  full.action = info.action;
  full.illegal_action = info.illegal_action;
  full.legality = info.legality;
  full.legality_message = info.legality_message;
  full.action_had_no_effect = info.action_had_no_effect;
  full.error = info.error;
  res.info = std::move(full);
  res.observation = observe_now();
  return res;
}

StepResult Env::step_action(const transforms::Action& a) { return step_action(a, false); }

StepResult Env::step_action(const transforms::Action& a, bool known_legal) {
  Info info;
  info.action = transforms::print_action(a);
  if (done_) {
    info.error = "the episode is over; call reset()";
    info.action_had_no_effect = true;
    StepResult r;
    r.terminated = true;
    r.observation = observe_now();
    Info full = make_info();
    full.error = info.error;
    full.action = info.action;
    full.action_had_no_effect = true;
    r.info = std::move(full);
    return r;
  }
  ++steps_;
  // The mask equals the checks (a tested invariant): an action it marks legal needs no check.
  transforms::Legality l;
  if (!known_legal) l = transforms::check(program_, a, target_);
  if (!l.ok()) {
    info.illegal_action = true;
    info.action_had_no_effect = true;
    info.legality = transforms::reason_name(l.reason);
    info.legality_message = transforms::explain(a, l);
    return finish_step(config_.illegal_action_penalty, info);
  }
  // Checked just above: apply without checking again.
  ir::Program candidate =
      transforms::registry()[static_cast<int>(a.kind)].apply(program_, a, target_);
  std::optional<std::string> error;
  double t = untimed_ ? time_ : time_of(candidate, &error);
  if (error) {
    // The kernel failed (crash, timeout, wrong result): keep the last good program, end cleanly.
    info.error = "backend failure on '" + info.action + "': " + *error;
    done_ = true;
    return finish_step(config_.illegal_action_penalty, info);
  }
  info.action_had_no_effect = ir::structurally_equal(candidate, program_);
  return commit(std::move(candidate), t, {a}, std::move(info));
}

StepResult Env::step(int action) {
  const ActionSpec spec = action_spec();
  if (!done_ && action == spec.stop) {
    ++steps_;
    Info info;
    info.action = "stop";
    info.action_had_no_effect = true;
    if (!action_mask().back()) {
      info.illegal_action = true;
      info.legality = "no_progress";
      info.legality_message =
          "stop is legal once the episode has found a program faster than its start "
          "(stop_after_progress); the episode goes on";
      return finish_step(config_.illegal_action_penalty, info);
    }
    done_ = true;
    return finish_step(0, info);
  }
  if (!done_ && cursor_on() && action >= 0 && action < cursor_space_.size() &&
      cursor_space_.at(action).is_move) {
    ++steps_;
    Info info;
    info.action = cursor_space_.describe(action);
    int moved = cursor_space_.moved(program_, cursor_, action);
    info.action_had_no_effect = moved == cursor_;
    if (moved == cursor_) {
      info.illegal_action = true;
      info.legality = "no_such_location";
      info.legality_message =
          "the cursor cannot move " + info.action + " from scope " + std::to_string(cursor_);
      return finish_step(config_.illegal_action_penalty, info);
    }
    cursor_ = moved;
    return finish_step(0, info);
  }
  if (!done_ && action >= base_actions() && action < spec.stop)
    return step_sketch(action - base_actions());
  auto a = done_ ? std::optional<transforms::Action>(transforms::Action{}) : decode(action);
  if (!a) {
    ++steps_;
    Info info;
    info.illegal_action = true;
    info.action_had_no_effect = true;
    info.legality = "no_such_location";
    info.legality_message =
        action < 0 || action >= spec.n
            ? "action " + std::to_string(action) + " is out of range [0, " +
                  std::to_string(spec.n) + ")"
            : "action " + std::to_string(action) + " (" +
                  (!cursor_on() ? flat_.describe(action) : cursor_space_.describe(action)) +
                  ") names a location this program does not have";
    return finish_step(config_.illegal_action_penalty, info);
  }
  // The flat mask of this very program, when already computed, decides legality.
  const bool known_legal = !done_ && !cursor_on() && mask_is_current() && action >= 0 &&
                           action < static_cast<int>(mask_.size()) && mask_[action] == 1;
  return step_action(*a, known_legal);
}

StepResult Env::step_untimed(int action) {
  untimed_ = true;
  StepResult r = step(action);
  untimed_ = false;
  return r;
}

StepResult Env::step(const std::vector<int>& actions, bool time_each) {
  StepResult last;
  double total = 0;
  bool any = false;
  for (size_t i = 0; i < actions.size(); ++i) {
    const int a = actions[i];
    // Untimed unless this step ends the sequence: its last action, or the episode's last step.
    const bool ends =
        i + 1 == actions.size() || (!restoring_ && steps_ + 1 >= config_.max_episode_steps);
    last = time_each || ends ? step(a) : step_untimed(a);
    total += last.reward;
    any = true;
    if (last.terminated || last.truncated) break;
  }
  if (!any) {
    last.observation = observe_now();
    last.info = make_info();
    last.terminated = done_;
  }
  last.reward = total;
  return last;
}

EpisodeState Env::state() const {
  EpisodeState s;
  s.benchmark = benchmark_;
  s.backend = config_.backend;
  s.reward_space = config_.reward_space;
  s.seed = config_.seed;
  for (const auto& a : trace_) s.trace.push_back(transforms::print_action(a));
  s.rewards = rewards_;
  s.initial_time_s = initial_time_;
  s.final_time_s = time_;
  return s;
}

ir::Result<bool> Env::restore(const EpisodeState& s) {
  // Parse everything first: a bad state must leave the env as it was.
  std::vector<transforms::Action> actions;
  for (size_t i = 0; i < s.trace.size(); ++i) {
    auto a = transforms::parse_action(s.trace[i], "<state trace>", static_cast<int>(i) + 1);
    if (!a.ok()) return a.errors();
    actions.push_back(a.value());
  }
  auto p = load_benchmark(s.benchmark);
  if (!p.ok()) return p.errors();
  auto replayed = transforms::replay(p.value(), actions, target_);
  if (!replayed.ok()) return replayed.errors();
  reset(s.seed, ResetOptions{s.benchmark});
  // A sketch action is one step of many atomic actions: replay them without the step limit,
  // then count the steps the episode took (one reward each).
  restoring_ = true;
  for (const auto& a : actions) step_action(a);
  restoring_ = false;
  rewards_ = s.rewards;
  steps_ = static_cast<int>(s.rewards.size());
  done_ = done_ || steps_ >= config_.max_episode_steps;
  return true;
}

std::unique_ptr<Env> Env::fork() const {
  std::unique_ptr<Env> e(new Env(config_, backend_->clone()));
  e->time_cache_ = time_cache_;
  e->failure_cache_ = failure_cache_;
  e->benchmark_ = benchmark_;
  e->original_ = original_;
  e->program_ = program_;
  e->cursor_ = cursor_;
  e->steps_ = steps_;
  e->done_ = done_;
  e->initial_time_ = initial_time_;
  e->time_ = time_;
  e->best_time_ = best_time_;
  e->trace_ = trace_;
  e->best_trace_ = best_trace_;
  e->rewards_ = rewards_;
  return e;
}

}  // namespace perfdojo::env
