#include "agents/train.h"

#include <torch/torch.h>

#include "agents/train_run.h"
#include "backends/backend.h"
#include "backends/compiler.h"
#include "backends/result_cache.h"

namespace perfdojo::agents {

std::vector<std::string> backend_list(const std::string& backends) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= backends.size()) {
    const size_t comma = std::min(backends.find(',', at), backends.size());
    if (comma > at) out.push_back(backends.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

std::string backend_for(const std::string& backends, const std::string& benchmark, uint64_t seed) {
  const std::vector<std::string> list = backend_list(backends);
  if (list.size() <= 1) return list.empty() ? backends : list[0];
  const uint64_t h = backends::stable_hash(benchmark, 0xcbf29ce484222325ULL ^ seed);
  return list[h % list.size()];
}

std::string actor_backend(const std::string& backends, int actor) {
  const std::vector<std::string> list = backend_list(backends);
  if (list.size() <= 1) return list.empty() ? backends : list[0];
  return list[static_cast<size_t>(actor) % list.size()];
}

env::EnvConfig env_config_for(const AgentConfig& c, const std::string& benchmark, uint64_t seed) {
  env::EnvConfig e;
  e.benchmark = benchmark;
  e.backend = backend_for(c.backend, benchmark, seed);
  // A measured backend times each new program once per env (the env caches it) and keeps its
  // results on disk: a program met again in a later run costs a lookup.
  e.measure.time_budget_s = c.measure_budget_ms / 1000.0;
  e.measure.min_reps = 3;
  e.measure.max_reps = 20;
  if (!backends::is_cost_model(e.backend)) {
    e.backend_config.cache_dir = backends::default_cache_dir();
    e.backend_config.compile_timeout_s = c.compile_timeout_s;
  }
  e.observation_spaces = {"features"};
  if (c.encoder == "tokens") e.observation_spaces.push_back("tokens");
  e.reward_space = effective_reward_space(c);
  e.max_episode_steps = c.max_episode_steps;
  e.sketch_actions = c.sketch_actions;
  e.seed = seed;
  return e;
}

AgentObs to_agent_obs(const env::Observation& o, const std::vector<uint8_t>& env_mask,
                      const AgentConfig& c) {
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

TrainSummary train(const AgentConfig& config_in, const TrainOptions& options) {
  TrainSummary out;
  out.config = config_in;
  if (auto e = validate(config_in); !e.empty()) {
    out.error = "bad config: " + e;
    return out;
  }
  // Set-up, init or resume, outputs, first episodes and the loop, in that order; the first
  // error ends the run.
  detail::TrainRun run(config_in, options, out);
  for (auto step : {&detail::TrainRun::setup, &detail::TrainRun::init, &detail::TrainRun::resume,
                    &detail::TrainRun::open_outputs, &detail::TrainRun::demonstrate,
                    &detail::TrainRun::start_actors, &detail::TrainRun::loop}) {
    if (auto e = (run.*step)(); !e.empty()) {
      out.error = e;
      return out;
    }
  }
  run.finish();
  return out;
}

}  // namespace perfdojo::agents
