#include "bridge/reply.h"

#include <bit>

#include "bridge/base64.h"
#include "transforms/action.h"

namespace perfdojo::bridge {

std::string ok_reply(std::string_view id, std::string_view result_json) {
  std::string out;
  out.reserve(id.size() + result_json.size() + 32);
  out += "{\"id\":";
  out += id;
  out += ",\"ok\":true,\"result\":";
  out += result_json;
  out += '}';
  return out;
}

std::string error_reply(std::string_view id, const Error& e) {
  JsonWriter w;
  w.begin_object().key("id").raw(id).field("ok", false).key("error").begin_object();
  w.field("type", error_type_name(e.type)).field("message", e.message).end_object().end_object();
  return w.take();
}

namespace {

// A numeric observation: a JSON list, or the base64 of its little-endian 4-byte values.
template <class T, class Write>
void write_numbers(JsonWriter& w, const std::vector<T>& v, ObservationFormat format, Write one) {
  static_assert(sizeof(T) == 4 && std::endian::native == std::endian::little);
  if (format == ObservationFormat::kBase64) {
    w.value(base64_encode(
        std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T))));
    return;
  }
  w.begin_array();
  for (T x : v) one(x);
  w.end_array();
}

}  // namespace

void write_observation(JsonWriter& w, const env::Observation& o,
                       const std::vector<std::string>& spaces, ObservationFormat format) {
  w.begin_object();
  for (const auto& s : spaces) {
    w.key(s);
    if (s == "ir_text") {
      w.value(o.ir_text);
    } else if (s == "features") {
      write_numbers(w, o.features, format, [&](float f) { w.value(f); });
    } else if (s == "tokens") {
      write_numbers(w, o.tokens, format, [&](int32_t t) { w.value(static_cast<int64_t>(t)); });
    } else if (s == "graph") {
      const env::Graph& g = o.graph;
      w.begin_object().field("num_nodes", g.num_nodes).key("node_features").begin_array();
      for (float f : g.node_features) w.value(f);
      w.end_array();
      auto ints = [&](const char* name, const std::vector<int32_t>& v) {
        w.key(name).begin_array();
        for (int32_t x : v) w.value(static_cast<int64_t>(x));
        w.end_array();
      };
      ints("edge_src", g.edge_src);
      ints("edge_dst", g.edge_dst);
      ints("edge_type", g.edge_type);
      w.end_object();
    } else {
      w.null();
    }
  }
  w.end_object();
}

void write_info(JsonWriter& w, const env::Info& i) {
  w.begin_object()
      .field("benchmark", i.benchmark)
      .field("step", i.step)
      .field("action", i.action)
      .field("illegal_action", i.illegal_action)
      .field("legality", i.legality)
      .field("legality_message", i.legality_message)
      .field("action_had_no_effect", i.action_had_no_effect)
      .field("time_s", i.time_s)
      .field("initial_time_s", i.initial_time_s)
      .field("best_time_s", i.best_time_s);
  w.key("best_trace").begin_array();
  for (const auto& a : i.best_trace) w.value(transforms::print_action(a));
  w.end_array();
  w.field("action_mask", mask_base64(i.action_mask));
  w.key("error");
  if (i.error) {
    w.value(*i.error);
  } else {
    w.null();
  }
  w.field("cursor", i.cursor).end_object();
}

void write_step(JsonWriter& w, const env::StepResult& r, const std::vector<std::string>& spaces,
                ObservationFormat format) {
  w.begin_object().key("observation");
  write_observation(w, r.observation, spaces, format);
  w.field("reward", r.reward).field("terminated", r.terminated).field("truncated", r.truncated);
  w.key("info");
  write_info(w, r.info);
  w.end_object();
}

void write_reset(JsonWriter& w, const env::Observation& o, const env::Info& info,
                 const std::vector<std::string>& spaces, ObservationFormat format) {
  w.begin_object().key("observation");
  write_observation(w, o, spaces, format);
  w.key("info");
  write_info(w, info);
  w.end_object();
}

void write_spaces(JsonWriter& w, const env::Env& e) {
  const env::ActionSpec a = e.action_spec();
  const env::EnvConfig& c = e.config();
  w.begin_object().key("action_space").begin_object();
  w.field("type", "discrete").field("kind", a.kind).field("n", a.n).field("stop", a.stop);
  w.end_object().key("observation_spaces").begin_array();
  for (const auto& s : e.observation_spec()) {
    w.begin_object()
        .field("name", s.name)
        .field("dtype", s.dtype)
        .field("deterministic", s.deterministic)
        .field("platform_dependent", s.platform_dependent);
    w.key("shape").begin_array();
    for (int d : s.shape) w.value(d);
    w.end_array();
    if (s.name == "features") {
      // Finite per-entry bounds (Box(low, high)); the same for every program.
      static const env::FeatureBounds bounds = env::feature_bounds();
      w.key("low").begin_array();
      for (float v : bounds.low) w.value(static_cast<double>(v));
      w.end_array().key("high").begin_array();
      for (float v : bounds.high) w.value(static_cast<double>(v));
      w.end_array();
    }
    if (s.name == "tokens") w.field("vocabulary_size", env::token_vocabulary_size());
    if (s.name == "graph") w.field("node_features", env::kGraphNodeFeatures).field("edge_types", 4);
    w.end_object();
  }
  w.end_array();
  w.field("deterministic", e.deterministic())
      .field("benchmark", c.benchmark)
      .field("backend", c.backend)
      .field("reward_space", c.reward_space)
      .field("max_episode_steps", c.max_episode_steps)
      .field("stop_after_progress", c.stop_after_progress)
      .field("contract", c.contract)
      .field("seed", c.seed)
      .end_object();
}

void write_state(JsonWriter& w, const env::EpisodeState& s) {
  w.begin_object()
      .field("benchmark", s.benchmark)
      .field("backend", s.backend)
      .field("reward_space", s.reward_space)
      .field("seed", s.seed);
  w.key("trace").begin_array();
  for (const auto& t : s.trace) w.value(t);
  w.end_array().key("rewards").begin_array();
  for (double r : s.rewards) w.value(r);
  w.end_array();
  w.field("initial_time_s", s.initial_time_s).field("final_time_s", s.final_time_s).end_object();
}

void write_validation(JsonWriter& w, const env::Validation& v) {
  w.begin_object()
      .field("ok", v.ok)
      .field("trace_legal", v.trace_legal)
      .field("reward_reproduced", v.reward_reproduced)
      .field("semantics_checked", v.semantics_checked)
      .field("semantics_equal", v.semantics_equal)
      .field("scaled_note", v.scaled_note)
      .field("message", v.message)
      .end_object();
}

}  // namespace perfdojo::bridge
