// The agent's one configuration struct (CleanRL style: every knob with a working default) and the
// table that drives parsing (flags, key=value files, flat JSON files), printing and --help.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace perfdojo::agents {

/// Every setting of a training run. Defaults train on the shipped training split with the cost
/// model in about ten minutes on two cores.
struct AgentConfig {
  // --- run
  double minutes = 10;      ///< wall-clock budget; ignored when total_steps > 0
  int64_t total_steps = 0;  ///< env-step budget (> 0: the run is reproducible bit for bit)
  uint64_t seed = 1;        ///< seeds torch, the replay sampler, exploration and the envs
  std::string backend = "cost_model";
  /// On a measured backend (x86_avx512...): the timed runs' budget per program in milliseconds
  /// (MeasureOptions::time_budget_s, at least 3 runs); the cost model ignores it. Every program
  /// is timed once per env and cached; timings take the machine's measure lock, one at a time.
  double measure_budget_ms = 30;
  /// On a measured backend: a program whose C takes longer than this to compile fails its step
  /// (the episode ends with the illegal-action penalty, as a crash would), so a policy learns
  /// that an unroll the cost model calls free costs minutes of compiler time.
  double compile_timeout_s = 4;
  std::string kernels = "train";  ///< train, test, all, or comma-separated URIs / .pdj paths
  int num_envs = 4;               ///< actor envs stepped in parallel (oneTBB)
  /// How acting and learning share the machine: "sync" steps the actors, then makes the updates
  /// owed (updates_per_step per transition), in turn, reproducibly; "async" runs the learner on
  /// its own thread beside the actors, which act on a copy of the network refreshed every
  /// actor_sync updates, with updates_per_step as a ceiling instead of a quota; "auto" is async
  /// for wall-clock budgets and sync when total_steps > 0.
  std::string learner = "auto";
  int actor_sync = 20;  ///< async: updates between refreshes of the actors' network copy
  /// async: the actors wait while the learner has made fewer than this many updates per
  /// transition stored since learning began (a floor under the replay ratio, as a rate limiter
  /// in Reverb); 0 never waits. At most updates_per_step.
  double min_updates_per_step = 0;
  int max_episode_steps = 30;  ///< truncation limit of one episode
  bool allow_stop = false;     ///< let the agent pick the stop action (only the peak counts)
  /// Macro actions in the env's action space: the micro-kernel sketch with the target's c-th
  /// block sizes at every GEMM-class nest, c < sketch_actions (env::EnvConfig::sketch_actions,
  /// docs/microkernel.md); 0 = atomic moves only. The baselines evaluated beside a policy get
  /// the same action space.
  int sketch_actions = 0;
  std::string out_dir = "runs/default";  ///< metrics, checkpoints and the summary land here
  double checkpoint_minutes =
      2;                    ///< periodic checkpoint interval (one is always written at the end)
  double log_seconds = 15;  ///< interval of the periodic progress lines

  // --- learning target
  std::string target = "maxq";  ///< maxq: y = max(r, g*Q'); sum: y = r + g*Q' (standard DQN)
  std::string reward_space;     ///< "" = log_speedup_total for maxq, log_speedup_step for sum
  /// Discount. With Max-Q a move that neither helps nor blocks costs only the discount, so 0.95
  /// makes a wasted move cost 5% of the value where 0.99 made it 1% (README, Agents).
  double gamma = 0.95;

  // --- network
  std::string encoder =
      "features";  ///< features, or tokens (features + transformer over IR tokens)
  /// How Q is read out for each action: "flat", one output per action index (a linear head
  /// that learns each index by itself); "factored", one small network scoring every legal action
  /// from the state, its kind and parameter and the feature rows of the scope and buffers it
  /// names, shared by all slots, so what it learns of a move on one loop carries to any loop
  /// with the same features (README, Agents).
  std::string head = "factored";
  int hidden = 256;
  int layers = 2;       ///< hidden layers of the feature encoder
  int token_len = 256;  ///< IR tokens read by the token encoder (truncated)
  int token_dim = 64;
  int token_heads = 4;
  int token_layers = 1;

  // --- optimisation
  double lr = 5e-4;
  int batch_size = 64;
  int buffer_size = 50000;
  int learning_starts = 1000;      ///< transitions collected before the first update
  double updates_per_step = 0.25;  ///< gradient updates per env transition
  int target_update = 500;         ///< hard sync of the target net every N updates (when tau == 0)
  double tau = 0;                  ///< Polyak factor per update; > 0 replaces hard syncs
  double grad_clip = 10;
  double huber_delta = 1;
  bool prioritized = false;  ///< prioritised replay (proportional, sum tree)
  double per_alpha = 0.6;
  double per_beta = 0.4;  ///< importance weight exponent, annealed to 1 over the run

  // --- exploration, by fraction of the budget spent
  double eps_start = 0.9;       ///< phase 1: epsilon-greedy, decaying ...
  double eps_phase1_end = 0.3;  ///< ... to this
  double phase1_end = 0.3;      ///< end of phase 1
  double temp_start = 1.0;  ///< phase 2: Boltzmann over Q, temperature decaying geometrically ...
  double temp_end = 0.05;   ///< ... to this
  double phase2_end = 0.8;  ///< end of phase 2; phase 3: epsilon-greedy with eps_final
  double eps_final = 0.01;

  // --- learning from demonstrations (DQfD; agents/demonstrations.h, docs/agents.md)
  /// Generated kernels of demo_families the teacher (the micro-kernel sketch and the optimiser's
  /// proposals) demonstrates on, besides the training kernels; 0 = no demonstrations at all.
  int demos = 0;
  std::string demo_families =
      "matmul,softmax,elementwise,attention";  ///< never the held-out conv2d, layernorm
  int demo_buffer = 100000;  ///< demonstration transitions kept (apart from the replay)
  double demo_ratio = 0.25;  ///< share of each batch drawn from the demonstrations
  double demo_margin = 0.8;  ///< DQfD's margin: the teacher's action must lead every other by this
  double demo_weight = 1.0;  ///< weight of the large-margin loss beside the TD loss
  int demo_pretrain = 2000;  ///< updates on demonstrations alone before the agent acts
  /// The backend the teacher's traces are chosen and their transitions timed on; "" = the
  /// run's backend. A run fine-tuning on measured rewards keeps the cost model's demonstrations
  /// (seconds to make, where measuring each would take hours) as the margin loss's anchor.
  std::string demo_backend;
  /// DAgger passes after the pretraining: the greedy policy plays dagger_kernels of the
  /// demonstration kernels, the teacher labels dagger_states states of each episode with its best
  /// trace from there, and dagger_updates demonstration-only updates follow (0 = none).
  int dagger_rounds = 0;
  int dagger_kernels = 200;
  int dagger_states = 4;
  int dagger_updates = 2000;

  // --- curriculum
  bool curriculum = true;
  int curriculum_start = 4;  ///< kernels in the first stage (simplest first)
  int curriculum_step = 4;   ///< kernels added per promotion
  double promote_speedup =
      1.5;  ///< promote once the active kernels' geomean best speed-up meets this
  double curriculum_fraction =
      0.5;  ///< budget share of the staged part; the rest fine-tunes on all

  // --- evaluation inside evaluate_agent
  double eval_epsilon = 0.1;  ///< exploration of restarts after the first, purely greedy episode
};

/// How a field is checked on --resume.
enum class FieldRole {
  kRun,           ///< may change freely between runs
  kArchitecture,  ///< must match the checkpoint (network shape, observation)
  kLearning,      ///< may change on resume, reported when it does
};

/// One row of the field table.
struct FieldInfo {
  const char* name;
  const char* help;
  FieldRole role;
};

/// The field table, in declaration order.
const std::vector<FieldInfo>& config_fields();

/// Sets field `key` from text; returns "" or a precise error ("lr: expected a number, got 'x'").
std::string set_field(AgentConfig& c, const std::string& key, const std::string& value);
/// A field's value as text (canonical: parse(get) == value).
std::string get_field(const AgentConfig& c, const std::string& key);
/// The whole config as `key=value` lines, in table order.
std::string to_text(const AgentConfig& c);
/// The whole config as one JSON object.
std::string to_json(const AgentConfig& c);
/// Reads a `key=value` file (# comments) or a flat JSON object into `c`; returns "" or an error
/// naming file:line.
std::string load_config_file(AgentConfig& c, const std::string& path);
/// Parses `key=value` lines (the checkpoint header form) into `c`; returns "" or an error.
std::string parse_text(AgentConfig& c, const std::string& text, const std::string& origin);
/// Checks ranges and names (target, encoder, reward space...); returns "" or the first problem.
std::string validate(const AgentConfig& c);
/// The reward space the config trains on (target's default when reward_space is empty).
std::string effective_reward_space(const AgentConfig& c);

}  // namespace perfdojo::agents
