// perfdojo-env: the Gymnasium contract in C++. Spec first (EnvConfig, observation and action
// specs), then reset and step. Nothing here throws on bad input: illegal actions, out-of-range
// indices and backend failures become data in Info.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "gym/observation.h"
#include "gym/state.h"
#include "ir/diagnostic.h"
#include "ir/ir.h"
#include "transforms/action_space.h"

namespace perfdojo::env {

/// Everything that defines an environment. Defaults give a deterministic, instant env.
struct EnvConfig {
  std::string benchmark = "perfdojo://suite/softmax";  ///< URI or .pdj path (dataset.h)
  std::string backend = "cost_model";                  ///< backends::backend_names()
  backends::BackendConfig backend_config;
  backends::MeasureOptions measure;
  std::vector<std::string> observation_spaces = {"features"};  ///< ir_text features tokens graph
  /// log_speedup_best (default: log of the improvement over the episode's best so far, never
  /// negative; docs/env.md "Rewards" says why), log_speedup_step, relative_step, log_speedup_total
  std::string reward_space = "log_speedup_best";
  std::string action_space = "flat";  ///< or "cursor"
  transforms::FlatSpaceConfig flat;
  int max_episode_steps = 30;            ///< truncation limit
  uint64_t seed = 0;                     ///< default reset seed (input data, generators)
  double illegal_action_penalty = -0.1;  ///< reward of an illegal or out-of-range action
  int time_cache_entries = 4096;         ///< program times remembered per env (bounded)
  /// Macro actions after the flat or cursor space's own, before stop: action base + c expands
  /// the micro-kernel sketch with the target's c-th block sizes at every GEMM-class nest
  /// (docs/microkernel.md) and applies its atomic actions in one step. 0 (default) to 8.
  int sketch_actions = 0;
  /// The stop action is legal only once the episode has found a program faster than its start
  /// (or when nothing else is legal): a policy cannot win by stopping at once (docs/env.md,
  /// "Rewards"). false: stop is always legal.
  bool stop_after_progress = true;
  /// Episodes start from the kernel with its multiply-adds fused (transforms/contract.h), as
  /// the optimiser's search does, on targets with FMA; false: from the kernel as written.
  bool contract = true;
};

/// Names of the reward spaces.
const std::vector<std::string>& reward_spaces();

/// EnvConfig's names as Env::make parses them, once: nothing compares a config string per step.
enum class RewardSpace { kLogSpeedupBest, kLogSpeedupStep, kRelativeStep, kLogSpeedupTotal };
std::optional<RewardSpace> parse_reward_space(const std::string& name);
enum class ActionSpaceKind { kFlat, kCursor };
std::optional<ActionSpaceKind> parse_action_space(const std::string& name);

/// The action space as a Gymnasium Discrete(n); the last index is the explicit stop action.
struct ActionSpec {
  std::string kind;  ///< "flat" or "cursor"
  int n = 0;         ///< number of actions including stop
  int stop = 0;      ///< index of the stop action (n - 1)
};

/// Per-step diagnostics (Gymnasium's info dict).
struct Info {
  std::string benchmark;
  int step = 0;                                ///< steps taken in this episode
  std::string action;                          ///< the action's text ("" for stop or invalid index)
  bool illegal_action = false;                 ///< refused: program unchanged, penalty given
  std::string legality = "ok";                 ///< reason name ("ok" when legal)
  std::string legality_message;                ///< the explanation, when refused
  bool action_had_no_effect = false;           ///< the program did not change
  double time_s = 0;                           ///< time of the current program
  double initial_time_s = 0;                   ///< time of the episode's starting program
  double best_time_s = 0;                      ///< best time seen this episode
  std::vector<transforms::Action> best_trace;  ///< actions that reached the best program
  std::vector<uint8_t> action_mask;            ///< 1 = legal, including the stop action
  std::optional<std::string> error;            ///< backend failure or misuse; episode ended
  int cursor = -1;                             ///< cursor space: the cursor's scope index
};

/// Gymnasium's step 5-tuple.
struct StepResult {
  Observation observation;
  double reward = 0;
  bool terminated = false;
  bool truncated = false;
  Info info;
};

/// Options for reset.
struct ResetOptions {
  std::optional<std::string> benchmark;  ///< switch benchmark for this and later episodes
};

/// What an env's backend calls cost so far (a measured backend's; the cost model's estimates
/// are not counted): the measurement budget a training run reports.
struct TimingStats {
  int64_t measured = 0;  ///< programs the backend compiled and timed
  int64_t cached = 0;    ///< programs timed before: the env's memory or the backend's disk cache
  double seconds = 0;    ///< wall-clock time inside the backend's measure calls
  TimingStats& operator+=(const TimingStats& o) {
    measured += o.measured;
    cached += o.cached;
    seconds += o.seconds;
    return *this;
  }
};

/// One environment. Not thread-safe; use one per thread (VectorEnv does).
class Env {
 public:
  /// Builds an env, or says precisely what is wrong with the config.
  static ir::Result<std::unique_ptr<Env>> make(const EnvConfig& config);

  /// Starts an episode. `seed` (when given) becomes the env's seed.
  std::pair<Observation, Info> reset(std::optional<uint64_t> seed = std::nullopt,
                                     const ResetOptions& options = {});
  /// Applies one action index.
  StepResult step(int action);
  /// Applies several in order (one round trip); stops at the end of the episode. The reward is
  /// the sum of the step rewards, the observation and info those of the last step taken.
  /// `time_each` false: only the program where the sequence ends (at its last action or at the
  /// episode's end) is timed; the steps before it are step_untimed's.
  StepResult step(const std::vector<int>& actions, bool time_each = true);
  /// Applies one action as step() does, but without timing the new program: no backend call, so
  /// a search can follow a policy for several moves and spend one evaluation where it ends.
  /// Legality, the mask, the observation, the trace and the step count are step()'s; a move it
  /// applies pays 0, and info.time_s (the time later rewards compare with) stays that of the
  /// last program timed. The next timed step times its own program as usual.
  StepResult step_untimed(int action);
  /// Applies an action given as a registry action (text interface); illegal ones are refused.
  StepResult step_action(const transforms::Action& action);

  /// Legal actions of the current state (1 = legal), stop included.
  std::vector<uint8_t> action_mask() const;
  /// The action space.
  ActionSpec action_spec() const;
  /// The observation spaces this env fills.
  std::vector<ObservationSpaceInfo> observation_spec() const;
  /// The registry action an index means now (nullopt: stop, a move, empty slot, out of range).
  std::optional<transforms::Action> decode(int action) const;

  /// The flat-space index of a registry action on the current program (what step() takes), or
  /// -1 when the flat space cannot address it (a location beyond the slots, a parameter not
  /// offered there) or the env uses the cursor space.
  int encode(const transforms::Action& a) const {
    return action_kind_ == ActionSpaceKind::kFlat ? flat_.encode(program_, a) : -1;
  }
  /// The target the env's actions are checked for (its backend's).
  const transforms::Target& target() const { return target_; }
  /// The target as the features' last block describes it (observation.h).
  TargetTraits target_traits() const;
  /// The current program.
  const ir::Program& program() const { return program_; }
  /// The configuration.
  const EnvConfig& config() const { return config_; }
  /// Whether rewards are reproducible bit for bit (deterministic backend).
  bool deterministic() const { return backend_->deterministic(); }
  /// The backend calls so far, over every episode (zero on the cost model).
  const TimingStats& timing_stats() const { return timing_stats_; }

  /// The episode so far, enough to restore or validate it.
  EpisodeState state() const;
  /// Restores an episode: resets to its benchmark and seed and replays its trace.
  ir::Result<bool> restore(const EpisodeState& s);
  /// An independent env in the same state, with its own backend instance.
  std::unique_ptr<Env> fork() const;

 private:
  Env(EnvConfig config, std::unique_ptr<backends::Backend> backend);
  double time_of(const ir::Program& p, std::optional<std::string>* error);
  double reward(double prev, double now) const;
  /// Whether stop is legal given the rest of the mask (stop_after_progress).
  bool stop_allowed(const std::vector<uint8_t>& mask) const;
  Info make_info() const;
  /// step_action; `known_legal`: the action is legal on the current program (no check needed).
  StepResult step_action(const transforms::Action& action, bool known_legal);
  Observation observe_now() const;
  StepResult finish_step(double reward, Info info);
  /// Makes `next` (timed `t`, reached by `actions`) the current program: trace, best, cursor,
  /// and the reward against the time it replaces.
  StepResult commit(ir::Program next, double t, const std::vector<transforms::Action>& actions,
                    Info info);
  /// Actions of the base (flat or cursor) space, before the sketch actions and stop.
  int base_actions() const;
  /// Steps through the sketch action `c`.
  StepResult step_sketch(int c);

  EnvConfig config_;
  // config_'s names, parsed once in make().
  RewardSpace reward_space_ = RewardSpace::kLogSpeedupBest;
  ActionSpaceKind action_kind_ = ActionSpaceKind::kFlat;
  ObservationSet observe_;
  bool cursor_on() const { return action_kind_ == ActionSpaceKind::kCursor; }
  bool model_backend_ = false;  // the cost model: an estimate costs less than a cache lookup
  std::unique_ptr<backends::Backend> backend_;
  transforms::Target target_;
  transforms::FlatActionSpace flat_;
  transforms::CursorActionSpace cursor_space_;
  std::map<uint64_t, double> time_cache_;          // structural hash -> time (bounded)
  std::map<uint64_t, std::string> failure_cache_;  // structural hash -> the backend's error
  TimingStats timing_stats_;
  std::string benchmark_;
  ir::Program original_, program_;
  int cursor_ = 0;
  int steps_ = 0;
  bool done_ = true;
  double initial_time_ = 0, time_ = 0, best_time_ = 0;
  std::vector<transforms::Action> trace_, best_trace_;
  std::vector<double> rewards_;
  // Mask cache. Holding the body's node pointers keeps those nodes alive, so pointer equality
  // means the same immutable program, but for the declarations' `stream` flags (stream_stores
  // changes nothing else), which are compared too; every other declaration change comes with
  // a new body.
  bool restoring_ = false;  ///< restore() replays a trace: no truncation on the way
  bool untimed_ = false;    ///< inside step_untimed: apply without a backend call
  mutable bool mask_valid_ = false;
  mutable std::vector<ir::NodePtr> mask_program_;
  mutable std::vector<char> mask_streams_;
  bool mask_is_current() const;
  mutable int mask_cursor_ = -1;
  mutable std::vector<uint8_t> mask_;
  // Verdicts of the nodes a step did not rebuild (flat space): each mask checks only new nodes.
  mutable transforms::MaskMemo mask_memo_;
  // Feature rows of the nests a step did not rebuild.
  mutable FeatureMemo feature_memo_;
  // The cost model's estimate of the episodes' starting program (held, so its address cannot be
  // reused while remembered): every reset returns to it.
  std::vector<ir::NodePtr> start_body_;
  double start_time_ = 0;
};

}  // namespace perfdojo::env

namespace perfdojo::env {

/// Replays `s` from its benchmark: every action must be legal, the final time must reproduce
/// (deterministic backends), and the final program must interpret equal to the original on
/// seeded inputs — on a copy with sizes scaled down when the kernel is too large to interpret.
Validation validate(const EpisodeState& s, const EnvConfig& base);

}  // namespace perfdojo::env
