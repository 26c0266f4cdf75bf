#include <cstdio>
#include <sstream>

#include <torch/torch.h>

#include "agents/train_run.h"
#include "gym/observation.h"

namespace perfdojo::agents::detail {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

TrainRun::TrainRun(const AgentConfig& config, const TrainOptions& options, TrainSummary& out)
    : config(config), options(options), out(out), bar(options.progress_bar) {}

std::map<std::string, double> TrainRun::best_speedups() const {
  std::map<std::string, double> m;
  for (const auto& [k, b] : best) m[k] = b.speedup;
  return m;
}

std::string TrainRun::setup() {
  // Determinism: one torch thread, every RNG from the seed. With total_steps > 0 the whole run
  // (weights, losses, traces) is reproducible on a deterministic backend; a wall-clock budget
  // only changes how many steps fit.
  use_single_thread();
  torch::manual_seed(config.seed);
  rng.seed(config.seed);

  // Kernels, ranked for the curriculum.
  auto uris = resolve_kernels(config.kernels);
  if (!uris.ok()) return uris.error_text();
  auto ranked = rank_kernels(uris.value());
  if (!ranked.ok()) return ranked.error_text();
  out.kernels = ranked.value();
  curriculum = std::make_unique<Curriculum>(out.kernels, config);

  // Actors. Each env has its own backend and seed.
  actors.resize(config.num_envs);
  for (int i = 0; i < config.num_envs; ++i) {
    auto e = env::Env::make(env_config_for(config, out.kernels[0].uri, config.seed * 1000 + i));
    if (!e.ok()) return e.error_text();
    actors[i].env = std::move(e).value();
  }
  shape = {env::kFeatureSize, actors[0].env->action_spec().n, env::token_vocabulary_size()};
  if (config.head == "factored")
    if (auto l = flat_action_layout(shape.action_count, config.sketch_actions); !l.ok()) return l.errors()[0].message;
  learner = std::make_unique<DqnLearner>(config, shape);
  return "";
}

std::string TrainRun::open_outputs() {
  if (auto e = metrics.open(config.out_dir, !options.resume.empty()); !e.empty()) return e;
  ckpt_path = config.out_dir + "/agent.ckpt";
  t0 = Clock::now();
  return "";
}

void TrainRun::save() {
  Checkpoint c;
  c.config = config;
  c.feature_size = shape.feature_size;
  c.action_count = shape.action_count;
  c.token_vocab = shape.token_vocab;
  c.global_step = global_step;
  DqnLearner::Snapshot snap = learner->snapshot();
  c.updates = snap.updates;
  c.episodes = episodes;
  c.elapsed_s = elapsed();
  c.progress = progress();
  c.curriculum_stage = curriculum->stage();
  c.stage_started = curriculum->stage_started();
  std::ostringstream rs;
  rs << rng;
  c.rng_state = rs.str();
  c.replay_size = learner->replay_size();
  c.replay_capacity = learner->replay().capacity();
  c.replay_prioritized = learner->replay().prioritized();
  c.best = best;
  c.model = std::move(snap.model);
  c.optimizer = std::move(snap.optimizer);
  if (auto e = save_checkpoint(c, ckpt_path); !e.empty()) say("checkpoint: " + e);
}

std::string TrainRun::start_episode(Actor& a) {
  for (int tries = 0; tries < 8; ++tries) {
    a.kernel = curriculum->sample(rng);
    auto [obs, info] = a.env->reset(std::nullopt, env::ResetOptions{a.kernel});
    if (info.error) {
      say("reset " + short_name(a.kernel) + ": " + *info.error);
      continue;
    }
    a.obs = to_agent_obs(obs, info.action_mask, config);
    a.episode_return = 0;
    a.episode_length = 0;
    return "";
  }
  return "could not start an episode (every reset failed; see above)";
}

std::string TrainRun::start_actors() {
  for (auto& a : actors)
    if (auto e = start_episode(a); !e.empty()) return e;
  say("train_agent: " + std::to_string(out.kernels.size()) + " kernels, " + std::to_string(shape.action_count) +
      " actions, target " + config.target + " on " + effective_reward_space(config) + ", " +
      (config.total_steps > 0 ? std::to_string(config.total_steps) + " steps"
                              : fmt("%.3g", config.minutes) + " min") +
      ", curriculum " + std::to_string(curriculum->stages()) + " stage(s), learner " +
      (decoupled() ? "async" : "sync") + ", out " + config.out_dir);
  return "";
}

void TrainRun::finish() {
  for (const auto& [uri, b] : best)
    metrics.write(global_step, elapsed(), {{"charts/best_speedup", b.speedup}}, short_name(uri));
  metrics.flush();
  save();
  out.global_step = global_step;
  out.updates = learner->updates();
  out.episodes = episodes;
  out.elapsed_s = elapsed();
  out.best = best;
  out.checkpoint_path = ckpt_path;
}

}  // namespace perfdojo::agents::detail
