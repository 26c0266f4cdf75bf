#include <tbb/parallel_for.h>
#include <torch/torch.h>

#include <algorithm>

#include "agents/train_run.h"
#include "transforms/action.h"

namespace perfdojo::agents::detail {

bool TrainRun::decoupled() const {
  return config.learner == "async" || (config.learner == "auto" && config.total_steps <= 0);
}

std::string TrainRun::loop() {
  // Decoupled: the learner thread starts now and is stopped and joined however the loop ends.
  std::thread learner_thread;
  struct Join {
    TrainRun& run;
    std::thread& t;
    ~Join() {
      run.learner_stop = true;
      if (t.joinable()) t.join();
    }
  } join{*this, learner_thread};
  if (decoupled()) {
    learner->make_actor_copy();
    steps_stored = global_step;
    learner_progress = progress();
    learner_thread = std::thread([this] { learner_loop(); });
  }
  results.resize(actors.size());
  actions.resize(actors.size());
  episodes_at_log = episodes;
  step_at_log = step_at_metrics = global_step;
  last_log = last_ckpt = last_metrics = elapsed();
  while (progress() < 1.0) {
    if (options.stop && options.stop->load()) {
      out.interrupted = true;
      break;
    }
    const double p = progress();
    explore = exploration_at(config, p);
    act();
    tbb::parallel_for(size_t{0}, actors.size(),
                      [&](size_t i) { results[i] = actors[i].env->step(actions[i]); });
    if (auto e = record_steps(); !e.empty()) return e;
    if (decoupled()) {
      if (learn_step0 < 0 && learner->replay_size() >= config.learning_starts) {
        learn_updates0 = learner->updates();
        learn_step0 = global_step;  // the learner starts
      }
      steps_stored = global_step;
      learner_progress = progress();
      if (auto e = wait_for_learner(); !e.empty()) return e;
    } else {
      learn(p);
    }
    if (curriculum->update(progress(), best_speedups()))
      say("curriculum: stage " + std::to_string(curriculum->stage() + 1) + "/" +
          std::to_string(curriculum->stages()) + ", " + std::to_string(curriculum->active()) +
          " of " + std::to_string(out.kernels.size()) + " kernels" +
          (curriculum->stage() == curriculum->stages() - 1 ? " (fine-tuning on all)" : ""));
    const double now = elapsed();
    write_metrics(now);
    log(now);
    if (now - last_ckpt >= config.checkpoint_minutes * 60) {
      save();
      last_ckpt = now;
    }
  }
  bar.clear();
  return "";
}

// One batched forward over every actor's observation, then each actor's action.
void TrainRun::act() {
  std::vector<const AgentObs*> batch;
  for (auto& a : actors) batch.push_back(&a.obs);
  torch::Tensor q = learner->q_values(batch).contiguous();
  for (size_t i = 0; i < actors.size(); ++i)
    actions[i] = select_action(q.data_ptr<float>() + i * shape.action_count, actors[i].obs.mask,
                               explore, rng);
}

// Stores every actor's transition; ends and restarts the episodes that finished.
std::string TrainRun::record_steps() {
  for (size_t i = 0; i < actors.size(); ++i) {
    Actor& a = actors[i];
    env::StepResult& r = results[i];
    AgentObs next = to_agent_obs(r.observation, r.info.action_mask, config);
    // terminated (stop, backend failure): no bootstrap; truncated (step limit): bootstrap.
    learner->remember(a.obs, actions[i], r.reward, next, r.terminated);
    a.episode_return += r.reward;
    ++a.episode_length;
    ++global_step;
    if (!(r.terminated || r.truncated)) {
      a.obs = std::move(next);
      continue;
    }
    if (auto e = end_episode(a, r); !e.empty()) return e;
  }
  return "";
}

std::string TrainRun::end_episode(Actor& a, const env::StepResult& r) {
  ++episodes;
  const double speedup = r.info.best_time_s > 0 ? r.info.initial_time_s / r.info.best_time_s : 1.0;
  KernelBest& kb = best[a.kernel];
  if (kb.trace.empty() && kb.initial_time_s == 0)
    kb = KernelBest{1.0, r.info.initial_time_s, r.info.initial_time_s, {}};
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
  return start_episode(a);
}

// Prioritised replay's importance-weight exponent at progress p: per_beta annealed to 1.
double TrainRun::beta_at(double p) const {
  return config.per_beta + (1.0 - config.per_beta) * std::min(1.0, p);
}

// Updates owed by the steps taken (updates_per_step per actor step), once learning has started.
void TrainRun::learn(double p) {
  if (learner->replay_size() < config.learning_starts) return;
  update_debt += config.updates_per_step * actors.size();
  for (; update_debt >= 1.0; update_debt -= 1.0) book(learner->update(beta_at(p)));
}

std::string TrainRun::wait_for_learner() {
  while (true) {
    {
      std::lock_guard lock(stats_mu);
      if (!learner_error.empty()) return learner_error;
    }
    const int64_t s0 = learn_step0;
    if (config.min_updates_per_step <= 0 || s0 < 0 || (options.stop && options.stop->load()))
      return "";
    const double owed = config.min_updates_per_step * static_cast<double>(global_step - s0) -
                        static_cast<double>(actors.size());
    if (static_cast<double>(learner->updates() - learn_updates0) >= owed) return "";
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void TrainRun::book(const UpdateStats& s) {
  std::lock_guard lock(stats_mu);
  out.td_losses.push_back(static_cast<float>(s.td_loss));
  loss_sum += s.td_loss;
  q_sum += s.q_mean;
  ++loss_n;
  if (s.demos > 0) {
    margin_sum += s.demo_margin_loss;
    accuracy_sum += s.demo_accuracy;
    ++demo_n;
  }
}

// The learner thread. Actors and learner share two cores: the actors step while the learner
// computes, instead of waiting for it (Ape-X, Horgan et al. 2018, on one machine). The ratio
// updates_per_step is a ceiling here: a learner faster than the actors waits for data.
void TrainRun::learner_loop() {
  try {
    while (!learner_stop) {
      const int64_t s0 = learn_step0;  // set after learn_updates0
      const double allowed =
          s0 < 0 ? 0
                 : static_cast<double>(learn_updates0) +
                       config.updates_per_step * static_cast<double>(steps_stored - s0);
      if (s0 < 0 || static_cast<double>(learner->updates()) >= allowed) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      book(learner->update(beta_at(learner_progress)));
      if (learner->updates() % config.actor_sync == 0) learner->publish_to_actors();
    }
  } catch (const std::exception& e) {
    // A LibTorch error ends learning, not the process; the actors' side reports it.
    std::lock_guard lock(stats_mu);
    learner_error = std::string("learner: ") + e.what();
  }
  learner->publish_to_actors();
}

// Every 500 steps: exploration, stage, steps per second and the mean losses since the last.
void TrainRun::write_metrics(double now) {
  if (global_step - step_at_metrics < 500) return;
  std::lock_guard lock(stats_mu);
  std::vector<std::pair<std::string, double>> s = {
      {"charts/epsilon", explore.boltzmann ? 0.0 : explore.epsilon},
      {"charts/temperature", explore.boltzmann ? explore.temperature : 0.0},
      {"charts/curriculum_stage", curriculum->stage()},
      {"charts/SPS", (global_step - step_at_metrics) / std::max(1e-9, now - last_metrics)}};
  if (loss_n > 0) {
    last_loss = loss_sum / loss_n;
    s.push_back({"losses/td_loss", last_loss});
    s.push_back({"losses/q_values", q_sum / loss_n});
    if (demo_n > 0) {
      s.push_back({"losses/demo_margin", margin_sum / demo_n});
      s.push_back({"charts/demo_accuracy", accuracy_sum / demo_n});
    }
    loss_sum = q_sum = margin_sum = accuracy_sum = 0;
    loss_n = demo_n = 0;
  }
  if (const env::TimingStats t = timing_stats(); t.measured + t.cached > 0) {
    s.push_back({"charts/measured_programs", static_cast<double>(t.measured)});
    s.push_back({"charts/measure_cache_hits", static_cast<double>(t.cached)});
    s.push_back({"charts/measure_seconds", t.seconds});
  }
  metrics.write(global_step, now, s);
  step_at_metrics = global_step;
  last_metrics = now;
}

// The progress bar, and every log_seconds a line with the active kernels' best speed-ups.
void TrainRun::log(double now) {
  std::string explore_text = explore.boltzmann ? "temp " + fmt("%.3f", explore.temperature)
                                               : "eps " + fmt("%.2f", explore.epsilon);
  bar.update(progress(), now,
             std::to_string(global_step) + " steps " +
                 fmt("%.0f", (global_step - step_at_log) / std::max(1e-9, now - last_log)) +
                 " SPS | " + explore_text + " | loss " + fmt("%.4f", last_loss));
  if (now - last_log < config.log_seconds) return;
  std::string line = "[" + format_duration(now) + "] step " + std::to_string(global_step) + " | " +
                     fmt("%.1f", (episodes - episodes_at_log) / (now - last_log)) + " ep/s | " +
                     fmt("%.0f", (global_step - step_at_log) / (now - last_log)) + " SPS | loss " +
                     fmt("%.4f", last_loss) + " | " + explore_text + " | stage " +
                     std::to_string(curriculum->stage() + 1) + "/" +
                     std::to_string(curriculum->stages()) + " |";
  if (const env::TimingStats t = timing_stats(); t.measured + t.cached > 0)
    line += " measured " + std::to_string(t.measured) + " (" + std::to_string(t.cached) +
            " cached, " + fmt("%.0f", t.seconds) + " s) |";
  for (int k = 0; k < curriculum->active(); ++k) {
    auto it = best.find(out.kernels[k].uri);
    if (it != best.end())
      line += " " + short_name(it->first) + " " + fmt("%.2fx", it->second.speedup);
  }
  say(line);
  metrics.flush();
  last_log = now;
  episodes_at_log = episodes;
  step_at_log = global_step;
}

}  // namespace perfdojo::agents::detail
