#include "agents/train.h"

#include <tbb/parallel_for.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>

#include <torch/torch.h>

#include "agents/dqn.h"
#include "agents/metrics.h"
#include "gym/observation.h"
#include "transforms/action.h"

namespace perfdojo::agents {

env::EnvConfig env_config_for(const AgentConfig& c, const std::string& benchmark, uint64_t seed) {
  env::EnvConfig e;
  e.benchmark = benchmark;
  e.backend = c.backend;
  e.observation_spaces = {"features"};
  if (c.encoder == "tokens") e.observation_spaces.push_back("tokens");
  e.reward_space = effective_reward_space(c);
  e.max_episode_steps = c.max_episode_steps;
  e.seed = seed;
  return e;
}

AgentObs to_agent_obs(const env::Observation& o, const std::vector<uint8_t>& env_mask, const AgentConfig& c) {
  AgentObs a;
  a.features = o.features;
  if (c.encoder == "tokens") a.tokens = o.tokens;
  a.mask = env_mask;
  if (!c.allow_stop && !a.mask.empty()) {
    // Only the best program along the trajectory counts, so stopping early gains nothing; the
    // stop action stays legal only where nothing else is, so every state has a legal action.
    bool other = false;
    for (size_t i = 0; i + 1 < a.mask.size(); ++i) other = other || a.mask[i];
    if (other) a.mask.back() = 0;
  }
  return a;
}

std::string short_name(const std::string& uri) {
  const std::string suite = "perfdojo://suite/";
  return uri.rfind(suite, 0) == 0 ? uri.substr(suite.size()) : uri;
}

namespace {

using Clock = std::chrono::steady_clock;

// One actor: its env, the current observation and the running episode's bookkeeping.
struct Actor {
  std::unique_ptr<env::Env> env;
  AgentObs obs;
  std::string kernel;
  double episode_return = 0;
  int episode_length = 0;
};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

TrainSummary train(const AgentConfig& config_in, const TrainOptions& options) {
  TrainSummary out;
  AgentConfig config = config_in;
  out.config = config;
  if (auto e = validate(config); !e.empty()) {
    out.error = "bad config: " + e;
    return out;
  }

  // ---- Determinism: one torch thread, every RNG from the seed. With total_steps > 0 the whole
  // run (weights, losses, traces) is reproducible on a deterministic backend; a wall-clock
  // budget only changes how many steps fit.
  use_single_thread();
  torch::manual_seed(config.seed);
  std::mt19937_64 rng(config.seed);

  // ---- Kernels, ranked for the curriculum.
  auto uris = resolve_kernels(config.kernels);
  if (!uris.ok()) {
    out.error = uris.error_text();
    return out;
  }
  auto ranked = rank_kernels(uris.value());
  if (!ranked.ok()) {
    out.error = ranked.error_text();
    return out;
  }
  out.kernels = ranked.value();
  Curriculum curriculum(out.kernels, config);

  // ---- Actors. Each env has its own backend and seed.
  std::vector<Actor> actors(config.num_envs);
  for (int i = 0; i < config.num_envs; ++i) {
    auto e = env::Env::make(env_config_for(config, out.kernels[0].uri, config.seed * 1000 + i));
    if (!e.ok()) {
      out.error = e.error_text();
      return out;
    }
    actors[i].env = std::move(e).value();
  }
  NetworkShape shape{env::kFeatureSize, actors[0].env->action_spec().n, env::token_vocabulary_size()};
  DqnLearner learner(config, shape);

  // ---- Resume.
  int64_t global_step = 0, episodes = 0;
  double elapsed_before = 0;
  std::map<std::string, KernelBest> best;
  if (!options.resume.empty()) {
    auto ck = load_checkpoint(options.resume);
    if (!ck.ok()) {
      out.error = ck.error_text();
      return out;
    }
    const Checkpoint& c = ck.value();
    if (auto e = check_compatible(c, config, shape.feature_size, shape.action_count, shape.token_vocab); !e.empty()) {
      out.error = options.resume + ": " + e;
      return out;
    }
    if (auto e = learner.load_model_bytes(c.model); !e.empty()) {
      out.error = options.resume + ": " + e;
      return out;
    }
    if (auto e = learner.load_optimizer_bytes(c.optimizer); !e.empty()) {
      out.error = options.resume + ": " + e;
      return out;
    }
    learner.set_updates(c.updates);
    global_step = c.global_step;
    episodes = c.episodes;
    elapsed_before = c.elapsed_s;
    best = c.best;
    curriculum.set_stage(c.curriculum_stage, c.stage_started);
    std::istringstream rs(c.rng_state);
    rs >> rng;
    learner.seed(config.seed + static_cast<uint64_t>(global_step));
  }

  MetricsWriter metrics;
  if (auto e = metrics.open(config.out_dir, !options.resume.empty()); !e.empty()) {
    out.error = e;
    return out;
  }
  ProgressBar bar(options.progress_bar);
  auto say = [&](const std::string& line) {
    if (!options.quiet) bar.println(line);
  };

  const auto t0 = Clock::now();
  auto elapsed = [&] { return elapsed_before + std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto progress = [&] {
    return config.total_steps > 0 ? static_cast<double>(global_step) / config.total_steps
                                  : elapsed() / (config.minutes * 60.0);
  };
  auto best_speedups = [&] {
    std::map<std::string, double> m;
    for (const auto& [k, b] : best) m[k] = b.speedup;
    return m;
  };
  const std::string ckpt_path = config.out_dir + "/agent.ckpt";
  auto save = [&] {
    Checkpoint c;
    c.config = config;
    c.feature_size = shape.feature_size;
    c.action_count = shape.action_count;
    c.token_vocab = shape.token_vocab;
    c.global_step = global_step;
    c.updates = learner.updates();
    c.episodes = episodes;
    c.elapsed_s = elapsed();
    c.progress = progress();
    c.curriculum_stage = curriculum.stage();
    c.stage_started = curriculum.stage_started();
    std::ostringstream rs;
    rs << rng;
    c.rng_state = rs.str();
    c.replay_size = learner.replay().size();
    c.replay_capacity = learner.replay().capacity();
    c.replay_prioritized = learner.replay().prioritized();
    c.best = best;
    c.model = learner.model_bytes();
    c.optimizer = learner.optimizer_bytes();
    if (auto e = save_checkpoint(c, ckpt_path); !e.empty()) say("checkpoint: " + e);
  };

  // Starts a new episode on actor `a` with a kernel from the curriculum's active set.
  auto start_episode = [&](Actor& a) -> std::string {
    for (int tries = 0; tries < 8; ++tries) {
      a.kernel = curriculum.sample(rng);
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
  };
  for (auto& a : actors)
    if (auto e = start_episode(a); !e.empty()) {
      out.error = e;
      return out;
    }

  say("train_agent: " + std::to_string(out.kernels.size()) + " kernels, " + std::to_string(shape.action_count) +
      " actions, target " + config.target + " on " + effective_reward_space(config) + ", " +
      (config.total_steps > 0 ? std::to_string(config.total_steps) + " steps"
                              : fmt("%.3g", config.minutes) + " min") +
      ", curriculum " + std::to_string(curriculum.stages()) + " stage(s), out " + config.out_dir);

  // ---- The loop: act (one batched forward), step every actor in parallel, store, learn.
  std::vector<env::StepResult> results(actors.size());
  std::vector<int> actions(actors.size());
  double update_debt = 0, loss_sum = 0, q_sum = 0;
  int loss_n = 0;
  int64_t episodes_at_log = episodes, step_at_log = global_step, step_at_metrics = global_step;
  double last_log = elapsed(), last_ckpt = elapsed(), last_metrics = elapsed(), last_loss = 0;
  Exploration explore;
  while (progress() < 1.0) {
    if (options.stop && options.stop->load()) {
      out.interrupted = true;
      break;
    }
    const double p = progress();
    explore = exploration_at(config, p);

    std::vector<const AgentObs*> batch;
    for (auto& a : actors) batch.push_back(&a.obs);
    torch::Tensor q = learner.q_values(batch).contiguous();
    for (size_t i = 0; i < actors.size(); ++i)
      actions[i] = select_action(q.data_ptr<float>() + i * shape.action_count, actors[i].obs.mask, explore, rng);

    tbb::parallel_for(size_t{0}, actors.size(), [&](size_t i) { results[i] = actors[i].env->step(actions[i]); });

    for (size_t i = 0; i < actors.size(); ++i) {
      Actor& a = actors[i];
      env::StepResult& r = results[i];
      AgentObs next = to_agent_obs(r.observation, r.info.action_mask, config);
      // terminated (stop, backend failure): no bootstrap; truncated (step limit): bootstrap.
      learner.remember(a.obs, actions[i], r.reward, next, r.terminated);
      a.episode_return += r.reward;
      ++a.episode_length;
      ++global_step;
      if (!(r.terminated || r.truncated)) {
        a.obs = std::move(next);
        continue;
      }
      ++episodes;
      const double speedup = r.info.best_time_s > 0 ? r.info.initial_time_s / r.info.best_time_s : 1.0;
      KernelBest& kb = best[a.kernel];
      if (kb.trace.empty() && kb.initial_time_s == 0) kb = KernelBest{1.0, r.info.initial_time_s, r.info.initial_time_s, {}};
      if (speedup > kb.speedup) {
        kb.speedup = speedup;
        kb.initial_time_s = r.info.initial_time_s;
        kb.best_time_s = r.info.best_time_s;
        kb.trace.clear();
        for (const auto& act : r.info.best_trace) kb.trace.push_back(transforms::print_action(act));
      }
      metrics.write(global_step, elapsed(),
                    {{"charts/episodic_return", a.episode_return},
                     {"charts/episodic_length", a.episode_length},
                     {"charts/episode_speedup", speedup},
                     {"charts/best_speedup", kb.speedup}},
                    short_name(a.kernel));
      if (auto e = start_episode(a); !e.empty()) {
        out.error = e;
        return out;
      }
    }

    if (learner.replay().size() >= config.learning_starts) {
      update_debt += config.updates_per_step * actors.size();
      const double beta = config.per_beta + (1.0 - config.per_beta) * std::min(1.0, p);
      for (; update_debt >= 1.0; update_debt -= 1.0) {
        UpdateStats s = learner.update(beta);
        out.td_losses.push_back(static_cast<float>(s.td_loss));
        loss_sum += s.td_loss;
        q_sum += s.q_mean;
        ++loss_n;
      }
    }

    if (curriculum.update(progress(), best_speedups()))
      say("curriculum: stage " + std::to_string(curriculum.stage() + 1) + "/" + std::to_string(curriculum.stages()) +
          ", " + std::to_string(curriculum.active()) + " of " + std::to_string(out.kernels.size()) + " kernels" +
          (curriculum.stage() == curriculum.stages() - 1 ? " (fine-tuning on all)" : ""));

    const double now = elapsed();
    if (global_step - step_at_metrics >= 500) {
      std::vector<std::pair<std::string, double>> s = {
          {"charts/epsilon", explore.boltzmann ? 0.0 : explore.epsilon},
          {"charts/temperature", explore.boltzmann ? explore.temperature : 0.0},
          {"charts/curriculum_stage", curriculum.stage()},
          {"charts/SPS", (global_step - step_at_metrics) / std::max(1e-9, now - last_metrics)}};
      if (loss_n > 0) {
        last_loss = loss_sum / loss_n;
        s.push_back({"losses/td_loss", last_loss});
        s.push_back({"losses/q_values", q_sum / loss_n});
        loss_sum = q_sum = 0;
        loss_n = 0;
      }
      metrics.write(global_step, now, s);
      step_at_metrics = global_step;
      last_metrics = now;
    }
    std::string explore_text =
        explore.boltzmann ? "temp " + fmt("%.3f", explore.temperature) : "eps " + fmt("%.2f", explore.epsilon);
    bar.update(progress(), now,
               std::to_string(global_step) + " steps " + fmt("%.0f", (global_step - step_at_log) / std::max(1e-9, now - last_log)) +
                   " SPS | " + explore_text + " | loss " + fmt("%.4f", last_loss));
    if (now - last_log >= config.log_seconds) {
      std::string line = "[" + format_duration(now) + "] step " + std::to_string(global_step) + " | " +
                         fmt("%.1f", (episodes - episodes_at_log) / (now - last_log)) + " ep/s | " +
                         fmt("%.0f", (global_step - step_at_log) / (now - last_log)) + " SPS | loss " +
                         fmt("%.4f", last_loss) + " | " + explore_text + " | stage " +
                         std::to_string(curriculum.stage() + 1) + "/" + std::to_string(curriculum.stages()) + " |";
      for (int k = 0; k < curriculum.active(); ++k) {
        auto it = best.find(out.kernels[k].uri);
        if (it != best.end()) line += " " + short_name(it->first) + " " + fmt("%.2fx", it->second.speedup);
      }
      say(line);
      metrics.flush();
      last_log = now;
      episodes_at_log = episodes;
      step_at_log = global_step;
    }
    if (now - last_ckpt >= config.checkpoint_minutes * 60) {
      save();
      last_ckpt = now;
    }
  }
  bar.clear();

  // ---- Final records: per-kernel best speed-ups, the checkpoint, the summary.
  for (const auto& [uri, b] : best)
    metrics.write(global_step, elapsed(), {{"charts/best_speedup", b.speedup}}, short_name(uri));
  metrics.flush();
  save();
  out.global_step = global_step;
  out.updates = learner.updates();
  out.episodes = episodes;
  out.elapsed_s = elapsed();
  out.best = best;
  out.checkpoint_path = ckpt_path;
  return out;
}

}  // namespace perfdojo::agents
