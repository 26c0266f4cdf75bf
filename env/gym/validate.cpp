#include <cmath>
#include <functional>
#include <map>

#include "ir/check.h"

#include "backends/backend.h"
#include "gym/dataset.h"
#include "gym/env.h"
#include "ir/interp.h"
#include "transforms/registry.h"

namespace perfdojo::env {
namespace {

// Interpreting more than this many operations takes too long for a validation.
constexpr double kMaxInterpretedFlops = 2e7;

// `p` with every size divided by `g` where that keeps it whole; buffers keep their size names.
std::optional<ir::Program> scaled(const ir::Program& p, int64_t g) {
  ir::Program q = p;
  std::map<std::string, int64_t> value;
  for (auto& s : q.sizes) {
    if (s.value % g == 0 && s.value / g >= 1) s.value /= g;
    value[s.name] = s.value;
  }
  // Re-derive every named extent and dimension from the new sizes.
  for (auto& b : q.buffers)
    for (size_t i = 0; i < b.shape.size(); ++i)
      if (!b.shape_names[i].empty()) b.shape[i] = value[b.shape_names[i]];
  std::function<ir::NodePtr(const ir::NodePtr&)> walk = [&](const ir::NodePtr& n) -> ir::NodePtr {
    if (!n->is_scope) return n;
    std::vector<ir::NodePtr> body;
    for (const auto& c : n->body) body.push_back(walk(c));
    int64_t e = n->extent_name.empty() ? n->extent : value[n->extent_name];
    return ir::Node::scope(e, n->extent_name, n->annot, std::move(body), n->loc);
  };
  for (auto& n : q.body) n = walk(n);
  if (!ir::check_program(q).empty()) return std::nullopt;
  return q;
}

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
  auto target_caps = backends::make_backend(cfg.backend, cfg.backend_config)->capabilities();
  transforms::Target target{cfg.backend, target_caps.vector_widths, target_caps.parallel};
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
  for (int64_t g = 1; g <= 4096; g *= 2) {
    auto small = scaled(original, g);
    if (!small) break;
    if (backends::flop_count(*small) > kMaxInterpretedFlops && g < 4096) continue;
    auto small_final = transforms::replay(*small, actions, target);
    if (!small_final.ok()) continue;  // a tile factor no longer divides: scale less
    if (backends::flop_count(*small) > kMaxInterpretedFlops) break;
    auto inputs = ir::make_inputs(*small, s.seed);
    auto a = ir::interpret(*small, inputs);
    auto b = ir::interpret(small_final.value(), inputs);
    if (!a.ok() || !b.ok()) break;
    v.semantics_checked = true;
    v.semantics_equal = true;
    for (const auto& d : small->buffers)
      if (d.role == ir::Role::kOutput && ir::max_relative_error(a->at(d.name), b->at(d.name)) != 0)
        v.semantics_equal = false;
    if (g > 1) v.scaled_note = "sizes divided by " + std::to_string(g);
    break;
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
