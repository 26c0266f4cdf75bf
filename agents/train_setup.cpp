#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>

#include "agents/demonstrations.h"
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

AgentConfig TrainRun::teacher_config() const {
  AgentConfig c = config;
  if (!config.demo_backend.empty()) c.backend = config.demo_backend;
  return c;
}

std::string TrainRun::init() {
  if (options.init.empty()) return "";
  if (!options.resume.empty()) return "give --init or --resume, not both";
  // The network only: Adam's moments, the counters, the replay and the curriculum start afresh,
  // as fine-tuning on another backend or other kernels wants.
  Checkpoint c;
  if (auto e = load_network(options.init, &c, true); !e.empty()) return e;
  say("initialised from " + options.init + " (" + std::to_string(c.updates) +
      " updates); counters, optimiser state and replay start afresh");
  return "";
}

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

  // Actors. Each env has its own backend and seed; with several backends, actor i plays on the
  // i-th (round robin).
  actors.resize(config.num_envs);
  for (int i = 0; i < config.num_envs; ++i) {
    env::EnvConfig ec = env_config_for(config, out.kernels[0].uri, config.seed * 1000 + i);
    ec.backend = actor_backend(config.backend, i);
    auto e = env::Env::make(ec);
    if (!e.ok()) return e.error_text();
    actors[i].env = std::move(e).value();
  }
  shape = {env::kFeatureSize, actors[0].env->action_spec().n, env::token_vocabulary_size()};
  if (config.head == "factored")
    if (auto l = flat_action_layout(shape.action_count, config.sketch_actions); !l.ok())
      return l.errors()[0].message;
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

std::string TrainRun::demonstrate() {
  if (config.demos <= 0) return "";
  std::vector<std::string> training;
  for (const auto& k : out.kernels) training.push_back(k.uri);
  const auto kernels = demonstration_kernels(config, training);
  say("demonstrations: the sketch and the optimiser's proposals on " +
      std::to_string(kernels.size()) + " kernels");
  const auto start = Clock::now();
  const AgentConfig teacher = teacher_config();
  const DemoSummary d = add_demonstrations(teacher, kernels, *learner, [&](double f) {
    bar.update(f, std::chrono::duration<double>(Clock::now() - start).count(), "demonstrations");
  });
  bar.clear();
  say("demonstrations: " + std::to_string(d.demonstrated) + " of " + std::to_string(d.kernels) +
      " kernels, " + std::to_string(d.transitions) + " transitions, teacher's geomean speed-up " +
      fmt("%.2f", d.geomean_speedup) + " on " + teacher.backend + ", " + fmt("%.0f", d.seconds) +
      " s" +
      (d.unreachable
           ? ", " + std::to_string(d.unreachable) + " expert traces not playable as actions"
           : ""));
  if (!d.first_error.empty()) say("demonstrations: not every kernel loaded, e.g. " + d.first_error);
  out.demo_transitions = d.transitions;
  if (d.transitions == 0) return "";
  demo_updates(config.demo_pretrain, "pretraining on demonstrations");
  if (config.demo_pretrain > 0) {
    std::lock_guard lock(stats_mu);
    say("pretrained " + std::to_string(config.demo_pretrain) +
        " updates on demonstrations: margin loss " +
        fmt("%.3f", demo_n ? margin_sum / demo_n : 0.0) + ", teacher's action chosen " +
        fmt("%.0f%%", 100.0 * (demo_n ? accuracy_sum / demo_n : 0.0)));
    metrics.write(global_step, elapsed(),
                  {{"losses/demo_margin", demo_n ? margin_sum / demo_n : 0.0},
                   {"charts/demo_accuracy", demo_n ? accuracy_sum / demo_n : 0.0}});
    loss_sum = q_sum = margin_sum = accuracy_sum = 0;
    loss_n = demo_n = 0;
  }
  dagger(kernels);
  learner->publish_to_actors();
  return "";
}

void TrainRun::demo_updates(int n, const std::string& what) {
  const auto start = Clock::now();
  for (int u = 0; u < n; ++u) {
    const UpdateStats s = learner->update(1.0, /*demos_only=*/true);
    book(s);
    if ((u + 1) % 50 == 0 || u + 1 == n)
      bar.update(static_cast<double>(u + 1) / n,
                 std::chrono::duration<double>(Clock::now() - start).count(),
                 what + ": accuracy " + fmt("%.2f", s.demo_accuracy));
  }
  bar.clear();
}

void TrainRun::dagger(const std::vector<std::string>& kernels) {
  const QFunction q = [&](const AgentObs& o) {
    const torch::Tensor t = learner->q_values({&o}).to(torch::kFloat).contiguous();
    return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  };
  for (int round = 0; round < config.dagger_rounds; ++round) {
    // A different draw of the demonstration kernels each pass, from the run's seed.
    std::vector<std::string> drawn = kernels;
    std::mt19937_64 draw(config.seed * 1000003ULL + static_cast<uint64_t>(round));
    std::shuffle(drawn.begin(), drawn.end(), draw);
    drawn.resize(std::min(drawn.size(), static_cast<size_t>(config.dagger_kernels)));
    learner->publish_to_actors();  // the policy as pretrained so far
    const std::string what =
        "DAgger pass " + std::to_string(round + 1) + "/" + std::to_string(config.dagger_rounds);
    const auto start = Clock::now();
    const DemoSummary d =
        add_dagger_demonstrations(teacher_config(), drawn, q, *learner, [&](double f) {
          bar.update(f, std::chrono::duration<double>(Clock::now() - start).count(), what);
        });
    bar.clear();
    say(what + ": the policy played " + std::to_string(drawn.size()) +
        " kernels; the teacher gained 1% or more from " + std::to_string(d.demonstrated) + " of " +
        std::to_string(d.kernels) + " states it reached (geomean " +
        fmt("%.2f", d.geomean_speedup) + "x), " + std::to_string(d.transitions) + " transitions, " +
        fmt("%.0f", d.seconds) + " s" +
        (d.unreachable
             ? ", " + std::to_string(d.unreachable) + " expert traces not playable as actions"
             : ""));
    if (!d.first_error.empty()) say(what + ": not every state replayed, e.g. " + d.first_error);
    out.demo_transitions += d.transitions;
    demo_updates(config.dagger_updates, what + ": updates");
    std::lock_guard lock(stats_mu);
    if (demo_n > 0) {
      say(what + ": " + std::to_string(config.dagger_updates) +
          " updates on demonstrations, teacher's action chosen " +
          fmt("%.0f%%", 100.0 * accuracy_sum / demo_n));
      metrics.write(global_step, elapsed(),
                    {{"losses/demo_margin", margin_sum / demo_n},
                     {"charts/demo_accuracy", accuracy_sum / demo_n},
                     {"charts/dagger_teacher_gain", d.geomean_speedup}});
    }
    loss_sum = q_sum = margin_sum = accuracy_sum = 0;
    loss_n = demo_n = 0;
  }
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
  say("train_agent: " + std::to_string(out.kernels.size()) + " kernels, " +
      std::to_string(shape.action_count) + " actions, target " + config.target + " on " +
      effective_reward_space(config) + ", " +
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
  out.timing = timing_stats();
}

env::TimingStats TrainRun::timing_stats() const {
  env::TimingStats t;
  for (const auto& a : actors)
    if (a.env) t += a.env->timing_stats();
  return t;
}

}  // namespace perfdojo::agents::detail
