#include <torch/torch.h>

#include <sstream>

#include "agents/train_run.h"

namespace perfdojo::agents::detail {

std::string TrainRun::load_network(const std::string& path, Checkpoint* out, bool migrate) {
  auto ck = load_checkpoint(path);
  if (!ck.ok()) return ck.error_text();
  *out = std::move(ck).value();
  if (out->feature_size == env::kFeatureSize - env::kTargetFeatures) {
    // Trained before the features' target block: the network carries over, its optimiser state
    // and replay cannot.
    if (!migrate)
      return path + ": the checkpoint reads " + std::to_string(out->feature_size) +
             " features, this build's env gives " + std::to_string(env::kFeatureSize) +
             "; start a new run from its network with --init instead";
    if (auto m = migrate_features(*out); !m.ok()) return path + ": " + m.error_text();
    say("migrated " + path + " to the feature vector with the target block");
  }
  const int kinds = flat_space_kinds(out->action_count, out->config.sketch_actions);
  if (kinds > 0 && kinds < transforms::kNumKinds) {
    // Trained before the flat space's last kinds were added: the network carries over, its
    // optimiser state and replay cannot.
    if (!migrate)
      return path + ": the checkpoint was trained on the flat space's first " +
             std::to_string(kinds) + " kinds, this build's has " +
             std::to_string(transforms::kNumKinds) +
             "; start a new run from its network with --init instead";
    if (auto m = migrate_network(*out); !m.ok()) return path + ": " + m.error_text();
    say("migrated " + path + " from the flat space's first " + std::to_string(kinds) +
        " kinds to all " + std::to_string(transforms::kNumKinds));
  }
  if (auto e =
          check_compatible(*out, config, shape.feature_size, shape.action_count, shape.token_vocab);
      !e.empty())
    return path + ": " + e;
  if (auto e = learner->load_model_bytes(out->model); !e.empty()) return path + ": " + e;
  return "";
}

std::string TrainRun::resume() {
  if (options.resume.empty()) return "";
  Checkpoint c;
  if (auto e = load_network(options.resume, &c, false); !e.empty()) return e;
  if (auto e = learner->load_optimizer_bytes(c.optimizer); !e.empty())
    return options.resume + ": " + e;
  learner->set_updates(c.updates);
  global_step = c.global_step;
  episodes = c.episodes;
  elapsed_before = c.elapsed_s;
  best = c.best;
  curriculum->set_stage(c.curriculum_stage, c.stage_started);
  std::istringstream rs(c.rng_state);
  rs >> rng;
  learner->seed(config.seed + static_cast<uint64_t>(global_step));
  return "";
}

}  // namespace perfdojo::agents::detail
