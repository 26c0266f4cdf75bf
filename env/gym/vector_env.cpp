#include "gym/vector_env.h"

#include <tbb/parallel_for.h>

namespace perfdojo::env {

ir::Result<std::unique_ptr<VectorEnv>> VectorEnv::make(const EnvConfig& config, int n,
                                                       AutoReset mode) {
  if (n < 1)
    return std::vector<ir::Diagnostic>{{{"config", 0, 0}, "a vector env needs at least one env"}};
  std::unique_ptr<VectorEnv> v(new VectorEnv());
  v->mode_ = mode;
  for (int i = 0; i < n; ++i) {
    EnvConfig c = config;
    c.seed = config.seed + static_cast<uint64_t>(i);
    auto e = Env::make(c);
    if (!e.ok()) return e.errors();
    v->envs_.push_back(std::move(e).value());
  }
  v->needs_reset_.assign(n, false);
  return v;
}

std::vector<std::pair<Observation, Info>> VectorEnv::reset(std::optional<uint64_t> seed) {
  std::vector<std::pair<Observation, Info>> out(envs_.size());
  tbb::parallel_for(size_t{0}, envs_.size(), [&](size_t i) {
    std::optional<uint64_t> s;
    if (seed) s = *seed + i;
    out[i] = envs_[i]->reset(s);
    needs_reset_[i] = false;
  });
  return out;
}

std::vector<VectorStep> VectorEnv::step(const std::vector<int>& actions) {
  std::vector<VectorStep> out(envs_.size());
  if (actions.size() != envs_.size()) {
    for (auto& o : out) {
      o.result.info.error = "expected " + std::to_string(envs_.size()) + " actions, got " +
                            std::to_string(actions.size());
      o.result.info.action_had_no_effect = true;
    }
    return out;
  }
  tbb::parallel_for(size_t{0}, envs_.size(), [&](size_t i) {
    Env& e = *envs_[i];
    VectorStep& o = out[i];
    if (mode_ == AutoReset::kNextStep && needs_reset_[i]) {
      auto [obs, info] = e.reset();
      o.result.observation = std::move(obs);
      o.result.info = std::move(info);
      o.autoreset_ignored_action = true;
      needs_reset_[i] = false;
      return;
    }
    o.result = e.step(actions[i]);
    if (o.result.terminated || o.result.truncated) {
      if (mode_ == AutoReset::kNextStep) {
        needs_reset_[i] = true;
      } else {
        o.final_observation = std::move(o.result.observation);
        o.final_info = o.result.info;
        auto [obs, info] = e.reset();
        o.result.observation = std::move(obs);
        o.result.info = std::move(info);
      }
    }
  });
  return out;
}

}  // namespace perfdojo::env
