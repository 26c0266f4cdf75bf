// One run of train(): its state and its steps, in the order train() takes them. Set-up and the
// checkpoint (train_setup.cpp), resume (train_resume.cpp), the rollout/learn loop with its
// logging (train_loop.cpp). Internal to the agents module.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agents/dqn.h"
#include "agents/metrics.h"
#include "agents/train.h"

namespace perfdojo::agents::detail {

using Clock = std::chrono::steady_clock;

// One actor: its env, the current observation and the running episode's bookkeeping.
struct Actor {
  std::unique_ptr<env::Env> env;
  AgentObs obs;
  std::string kernel;
  double episode_return = 0;
  int episode_length = 0;
};

// printf of one number.
std::string fmt(const char* f, double v);

// Each step that can fail returns "" or the error that stops the run (train() puts it in the
// summary).
struct TrainRun {
  TrainRun(const AgentConfig& config, const TrainOptions& options, TrainSummary& out);

  // train_setup.cpp.
  // Determinism (one torch thread, every RNG from the seed), the ranked kernels, the actors and
  // the learner.
  std::string setup();
  // The metrics files and the clock.
  std::string open_outputs();
  // The teacher's demonstrations (config.demos > 0): made, stored in the learner, and learnt
  // from alone for demo_pretrain updates before the actors start.
  std::string demonstrate();
  // config.dagger_rounds DAgger passes over `kernels` (the demonstration kernels), each followed
  // by demonstration-only updates.
  void dagger(const std::vector<std::string>& kernels);
  // `n` updates on the demonstrations alone, with a progress bar saying `what`.
  void demo_updates(int n, const std::string& what);
  // Starts a new episode on actor `a` with a kernel from the curriculum's active set.
  std::string start_episode(Actor& a);
  // Starts every actor's first episode and announces the run.
  std::string start_actors();
  // Writes the checkpoint (a failure is said, not fatal).
  void save();
  // The final records: per-kernel best speed-ups, the checkpoint, the summary.
  void finish();

  // train_resume.cpp: continues from options.resume (learner, counters, curriculum, RNG).
  std::string resume();
  // Reads the checkpoint at `path` into `out`, checks it fits this run's network and loads its
  // weights into the learner (resume and init both start so). A checkpoint of an older flat
  // space is migrated when `migrate` (init), refused otherwise (resume: its optimiser state is
  // shaped like the old weights).
  std::string load_network(const std::string& path, Checkpoint* out, bool migrate);
  // Starts from options.init's network (train_setup.cpp): a new run, its counters, optimiser
  // state and replay fresh; the architecture must match.
  std::string init();
  // The config the teacher's demonstrations are made with: config.demo_backend's backend.
  AgentConfig teacher_config() const;
  // The actors' backend calls so far, summed (TimingStats of each env).
  env::TimingStats timing_stats() const;

  // train_loop.cpp: act (one batched forward), step every actor in parallel, store, learn.
  std::string loop();
  void act();
  std::string record_steps();
  // An episode ended on actor `a` with step result `r`: its best, its metrics, the next one.
  std::string end_episode(Actor& a, const env::StepResult& r);
  void learn(double p);
  double beta_at(double p) const;
  // Whether the learner runs on its own thread (config.learner, "auto" resolved).
  bool decoupled() const;
  // The learner thread's loop (decoupled runs): updates as fast as it can, at most
  // updates_per_step per stored transition, refreshing the actors' network every actor_sync.
  void learner_loop();
  // Books one update's losses (either thread).
  void book(const UpdateStats& s);
  // Decoupled: the actors wait while the learner is below min_updates_per_step; returns the
  // learner's error if it failed.
  std::string wait_for_learner();
  void write_metrics(double now);
  void log(double now);

  double elapsed() const {
    return elapsed_before + std::chrono::duration<double>(Clock::now() - t0).count();
  }
  double progress() const {
    return config.total_steps > 0 ? static_cast<double>(global_step) / config.total_steps
                                  : elapsed() / (config.minutes * 60.0);
  }
  std::map<std::string, double> best_speedups() const;
  void say(const std::string& line) {
    if (!options.quiet) bar.println(line);
  }

  AgentConfig config;
  const TrainOptions& options;
  TrainSummary& out;
  std::mt19937_64 rng;
  std::unique_ptr<Curriculum> curriculum;
  std::vector<Actor> actors;
  NetworkShape shape{};
  std::unique_ptr<DqnLearner> learner;
  MetricsWriter metrics;
  ProgressBar bar;
  std::string ckpt_path;
  Clock::time_point t0;

  // Counters (a resumed run starts from the checkpoint's).
  int64_t global_step = 0, episodes = 0;
  double elapsed_before = 0;
  std::map<std::string, KernelBest> best;

  // The loop's state.
  std::vector<env::StepResult> results;
  std::vector<int> actions;
  double update_debt = 0;
  std::mutex stats_mu;  // loss_sum, q_sum, loss_n and out.td_losses, booked by the learner thread
  double loss_sum = 0, q_sum = 0, margin_sum = 0, accuracy_sum = 0;
  int loss_n = 0, demo_n = 0;
  // Decoupled learning: what the learner thread reads of the actors' side, and its stop flag.
  std::atomic<int64_t> steps_stored{0};
  std::atomic<double> learner_progress{0};
  std::atomic<bool> learner_stop{false};
  // Where this run's learning began (step and update count; -1 before): the ceiling and the
  // floor on the update ratio count from there, as the synchronous loop's debt does.
  std::atomic<int64_t> learn_step0{-1}, learn_updates0{0};
  std::string learner_error;  // under stats_mu
  int64_t episodes_at_log = 0, step_at_log = 0, step_at_metrics = 0;
  double last_log = 0, last_ckpt = 0, last_metrics = 0, last_loss = 0;
  Exploration explore;
};

}  // namespace perfdojo::agents::detail
