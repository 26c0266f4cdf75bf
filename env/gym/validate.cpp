#include <cmath>
#include <functional>
#include <map>

#include "backends/backend.h"
#include "gym/dataset.h"
#include "gym/env.h"
#include "ir/check.h"
#include "ir/interp.h"
#include "target/target_of.h"
#include "transforms/registry.h"

namespace perfdojo::env {
namespace {

// Interpreting more than this many scope iterations takes too long for a validation.
constexpr double kMaxInterpretedWork = 2e7;

}  // namespace

Validation validate(const EpisodeState& s, const EnvConfig& base) {
  Validation v;
  std::vector<transforms::Action> actions;
  for (size_t i = 0; i < s.trace.size(); ++i) {
    auto a = transforms::parse_action(s.trace[i], "<trace>", static_cast<int>(i) + 1);
    if (!a.ok()) {
      v.message = a.error_text();
      return v;
    }
    actions.push_back(a.value());
  }
  EnvConfig cfg = base;
  cfg.benchmark = s.benchmark;
  cfg.backend = s.backend.empty() ? base.backend : s.backend;
  cfg.reward_space = s.reward_space.empty() ? base.reward_space : s.reward_space;
  cfg.seed = s.seed;
  auto made = Env::make(cfg);
  if (!made.ok()) {
    v.message = made.error_text();
    return v;
  }
  Env& e = *made.value();
  e.reset(s.seed);
  const transforms::Target target =
      target_of(*backends::make_backend(cfg.backend, cfg.backend_config), cfg.backend);
  const ir::Program original = e.program();
  auto replayed = transforms::replay(original, actions, target);
  if (!replayed.ok()) {
    v.message = "the trace does not replay: " + replayed.error_text();
    return v;
  }
  v.trace_legal = true;
  for (const auto& a : actions) {
    auto r = e.step_action(a);
    if (r.info.error) {
      v.message = *r.info.error;
      return v;
    }
  }
  double final_time = e.state().final_time_s;
  v.reward_reproduced = !e.deterministic() || final_time == s.final_time_s;
  // Semantics: interpret both on the same seeded inputs, scaled down when needed.
  if (auto inst = transforms::small_instance(original, actions, target, kMaxInterpretedWork)) {
    const auto& [small, small_final] = *inst;
    auto inputs = ir::make_inputs(small, s.seed);
    auto a = ir::interpret(small, inputs);
    auto b = ir::interpret(small_final, inputs);
    if (a.ok() && b.ok()) {
      v.semantics_checked = true;
      v.semantics_equal = true;
      for (const auto& d : small.buffers)
        if (d.role == ir::Role::kOutput &&
            ir::max_relative_error(a->at(d.name), b->at(d.name)) != 0)
          v.semantics_equal = false;
      if (!structurally_equal(small, original)) v.scaled_note = "checked on a scaled-down instance";
    }
  }
  if (!v.semantics_checked) {
    v.message = "the kernel is too large to interpret and no scaled-down copy admits the trace";
  } else if (!v.semantics_equal) {
    v.message = "the final program computes something different";
  } else if (!v.reward_reproduced) {
    v.message = "the final time did not reproduce";
  } else {
    v.ok = true;
    v.message = "ok";
  }
  return v;
}

}  // namespace perfdojo::env
