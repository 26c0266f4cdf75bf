#include "bridge/request.h"

#include <algorithm>
#include <limits>

namespace perfdojo::bridge {

const char* error_type_name(ErrorType t) {
  switch (t) {
    case ErrorType::kFrameTooLarge:
      return "frame_too_large";
    case ErrorType::kInvalidJson:
      return "invalid_json";
    case ErrorType::kBadRequest:
      return "bad_request";
    case ErrorType::kUnknownOp:
      return "unknown_op";
    case ErrorType::kHandshakeRequired:
      return "handshake_required";
    case ErrorType::kAuthFailed:
      return "auth_failed";
    case ErrorType::kVersionMismatch:
      return "version_mismatch";
    case ErrorType::kUnknownSession:
      return "unknown_session";
    case ErrorType::kSessionLimit:
      return "session_limit";
    case ErrorType::kConfigError:
      return "config_error";
    case ErrorType::kInvalidAction:
      return "invalid_action";
    case ErrorType::kInvalidState:
      return "invalid_state";
    case ErrorType::kForbidden:
      return "forbidden";
    case ErrorType::kIdleTimeout:
      return "idle_timeout";
    case ErrorType::kServerBusy:
      return "server_busy";
    case ErrorType::kInternal:
      return "internal";
  }
  return "internal";
}

namespace {

[[noreturn]] void fail(ErrorType t, std::string message) {
  throw RequestError{{t, std::move(message)}};
}

std::string id_text(const json::Value& id) {
  if (id.IsInt64()) return std::to_string(id.GetInt64());
  if (id.IsUint64()) return std::to_string(id.GetUint64());
  return util::json_quote(util::json_string(id));
}

}  // namespace

std::optional<Error> parse_request(std::string_view body, Request* out) {
  out->id = "null";
  // A request is an object: anything else is refused before a parse (a megabyte of '[' included).
  const size_t first = body.find_first_not_of(" \t\n\r");
  if (first != std::string_view::npos && body[first] != '{')
    return Error{ErrorType::kInvalidJson, "a request must be a JSON object"};
  util::JsonParseOptions options;
  options.max_depth = kMaxRequestDepth;
  if (auto e = util::parse_json(body, &out->doc, options)) {
    return Error{ErrorType::kInvalidJson, "invalid JSON at byte " + std::to_string(e->offset) +
                                              " (line " + std::to_string(e->line) + ", column " +
                                              std::to_string(e->column) + "): " + e->what};
  }
  if (!out->doc.IsObject())
    return Error{ErrorType::kInvalidJson, "a request must be a JSON object"};
  const json::Value* id = member(out->doc, "id");
  if (!id) return Error{ErrorType::kBadRequest, "missing field 'id' (an integer or a string)"};
  if (!id->IsInt64() && !id->IsUint64() && !id->IsString())
    return Error{ErrorType::kBadRequest, "field 'id' must be an integer or a string"};
  if (id->IsString() && id->GetStringLength() > 256)
    return Error{ErrorType::kBadRequest, "field 'id' is longer than 256 characters"};
  out->id = id_text(*id);
  const json::Value* op = member(out->doc, "op");
  if (!op) return Error{ErrorType::kBadRequest, "missing field 'op'"};
  if (!op->IsString()) return Error{ErrorType::kBadRequest, "field 'op' must be a string"};
  out->op.assign(op->GetString(), op->GetStringLength());
  return std::nullopt;
}

const json::Value* member(const json::Value& obj, const char* name) {
  return util::json_member(obj, name);
}

std::string get_string(const json::Value& obj, const char* name) {
  const json::Value* m = member(obj, name);
  if (!m) fail(ErrorType::kBadRequest, std::string("missing field '") + name + "'");
  if (!m->IsString())
    fail(ErrorType::kBadRequest, std::string("field '") + name + "' must be a string");
  return std::string(m->GetString(), m->GetStringLength());
}

std::optional<std::string> opt_string(const json::Value& obj, const char* name) {
  if (!member(obj, name)) return std::nullopt;
  return get_string(obj, name);
}

std::optional<uint64_t> opt_uint64(const json::Value& obj, const char* name) {
  const json::Value* m = member(obj, name);
  if (!m) return std::nullopt;
  if (!m->IsUint64())
    fail(ErrorType::kBadRequest,
         std::string("field '") + name + "' must be an integer in [0, 2^64)");
  return m->GetUint64();
}

uint64_t get_session(const json::Value& obj) {
  auto s = opt_uint64(obj, "session");
  if (!s) fail(ErrorType::kBadRequest, "missing field 'session' (the id 'make' returned)");
  return *s;
}

void check_fields(const json::Value& obj, const std::vector<std::string_view>& allowed,
                  std::string_view what) {
  for (auto it = obj.MemberBegin(); it != obj.MemberEnd(); ++it) {
    std::string_view name(it->name.GetString(), it->name.GetStringLength());
    if (std::find(allowed.begin(), allowed.end(), name) != allowed.end()) continue;
    std::string list;
    for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    std::string shown(name.substr(0, 64));
    fail(ErrorType::kBadRequest,
         "unknown field '" + shown + "' in " + std::string(what) + "; expected " + list);
  }
}

// ---------------------------------------------------------------- env decoders

namespace {

// Typed readers for config and state objects: absent or null means "keep the default".
struct Reader {
  const json::Value& obj;
  ErrorType type;
  std::string where;  // "config", "config.flat", ...

  [[noreturn]] void bad(const char* name, const std::string& expected) const {
    fail(type, "field '" + where + "." + name + "' must be " + expected);
  }
  bool str(const char* name, std::string* out) const {
    const json::Value* m = member(obj, name);
    if (!m) return false;
    if (!m->IsString()) bad(name, "a string");
    out->assign(m->GetString(), m->GetStringLength());
    return true;
  }
  bool boolean(const char* name, bool* out) const {
    const json::Value* m = member(obj, name);
    if (!m) return false;
    if (!m->IsBool()) bad(name, "true or false");
    *out = m->GetBool();
    return true;
  }
  bool integer(const char* name, int* out, int lo, int hi) const {
    const json::Value* m = member(obj, name);
    if (!m) return false;
    if (!m->IsInt64() || m->GetInt64() < lo || m->GetInt64() > hi)
      bad(name, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    *out = static_cast<int>(m->GetInt64());
    return true;
  }
  bool uint64(const char* name, uint64_t* out) const {
    const json::Value* m = member(obj, name);
    if (!m) return false;
    if (!m->IsUint64()) bad(name, "an integer in [0, 2^64)");
    *out = m->GetUint64();
    return true;
  }
  bool number(const char* name, double* out, double lo, double hi) const {
    const json::Value* m = member(obj, name);
    if (!m) return false;
    if (!m->IsNumber() || !(m->GetDouble() >= lo && m->GetDouble() <= hi)) {
      std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
      bad(name, "a number in " + range);
    }
    *out = m->GetDouble();
    return true;
  }
  const json::Value* object(const char* name) const {
    const json::Value* m = member(obj, name);
    if (m && !m->IsObject()) bad(name, "an object");
    return m;
  }
  void only(const std::vector<std::string_view>& allowed) const {
    try {
      check_fields(obj, allowed, where);
    } catch (RequestError& e) {
      e.error.type = type;
      throw;
    }
  }
};

bool is_file_benchmark(const std::string& uri) { return uri.rfind("perfdojo://", 0) != 0; }

}  // namespace

void check_benchmark_allowed(const std::string& uri, const ConfigPolicy& policy) {
  if (is_file_benchmark(uri) && !policy.allow_files)
    fail(ErrorType::kForbidden,
         "benchmark '" + uri.substr(0, 200) +
             "' is a file path; this server was started without "
             "--allow-files (use perfdojo://suite/ or perfdojo://gen/ URIs)");
}

env::EnvConfig config_from_json(const json::Value& obj, const ConfigPolicy& policy) {
  env::EnvConfig c;
  c.backend_config = policy.backend_config;
  if (!obj.IsObject()) fail(ErrorType::kConfigError, "field 'config' must be an object");
  if (member(obj, "backend_config"))
    fail(ErrorType::kConfigError,
         "config.backend_config is set by the server (perfdojo serve --compiler, --cache-dir, "
         "--machine-profile), never by a client");
  Reader r{obj, ErrorType::kConfigError, "config"};
  r.only({"benchmark", "backend", "observation_spaces", "reward_space", "action_space", "flat",
          "measure", "max_episode_steps", "seed", "illegal_action_penalty", "time_cache_entries",
          "sketch_actions", "stop_after_progress", "contract"});
  if (r.str("benchmark", &c.benchmark)) check_benchmark_allowed(c.benchmark, policy);
  r.str("backend", &c.backend);
  r.str("reward_space", &c.reward_space);
  r.str("action_space", &c.action_space);
  if (const json::Value* o = member(obj, "observation_spaces")) {
    c.observation_spaces.clear();
    if (o->IsString()) {
      c.observation_spaces.emplace_back(o->GetString(), o->GetStringLength());
    } else if (o->IsArray() && !o->Empty()) {
      for (const auto& s : o->GetArray()) {
        if (!s.IsString()) r.bad("observation_spaces", "a string or a non-empty list of strings");
        std::string name(s.GetString(), s.GetStringLength());
        if (std::find(c.observation_spaces.begin(), c.observation_spaces.end(), name) !=
            c.observation_spaces.end())
          fail(ErrorType::kConfigError, "observation space '" + name + "' is listed twice");
        c.observation_spaces.push_back(name);
      }
    } else {
      r.bad("observation_spaces", "a string or a non-empty list of strings");
    }
  }
  r.integer("max_episode_steps", &c.max_episode_steps, 1, 1000000);
  r.integer("sketch_actions", &c.sketch_actions, 0, 8);
  r.boolean("stop_after_progress", &c.stop_after_progress);
  r.boolean("contract", &c.contract);
  r.uint64("seed", &c.seed);
  r.number("illegal_action_penalty", &c.illegal_action_penalty, -1e9, 1e9);
  r.integer("time_cache_entries", &c.time_cache_entries, 0, 1 << 20);
  if (const json::Value* f = r.object("flat")) {
    Reader fr{*f, ErrorType::kConfigError, "config.flat"};
    fr.only({"max_scopes", "max_nodes", "max_buffers"});
    fr.integer("max_scopes", &c.flat.max_scopes, 1, 4096);
    fr.integer("max_nodes", &c.flat.max_nodes, 1, 4096);
    fr.integer("max_buffers", &c.flat.max_buffers, 2, 4096);
  }
  if (const json::Value* m = r.object("measure")) {
    Reader mr{*m, ErrorType::kConfigError, "config.measure"};
    mr.only({"verify", "time_budget_s", "min_reps", "max_reps", "target_spread", "flush_cache",
             "timeout_s"});
    mr.boolean("verify", &c.measure.verify);
    mr.number("time_budget_s", &c.measure.time_budget_s, 0, 3600);
    mr.integer("min_reps", &c.measure.min_reps, 1, 100000);
    mr.integer("max_reps", &c.measure.max_reps, 1, 100000);
    mr.number("target_spread", &c.measure.target_spread, 0, 1e9);
    mr.boolean("flush_cache", &c.measure.flush_cache);
    mr.number("timeout_s", &c.measure.timeout_s, 0.001, 3600);
    if (c.measure.max_reps < c.measure.min_reps)
      fail(ErrorType::kConfigError, "config.measure.max_reps must be at least min_reps");
  }
  return c;
}

env::EpisodeState state_from_json(const json::Value& v) {
  if (!v.IsObject()) fail(ErrorType::kInvalidState, "field 'state' must be an object");
  env::EpisodeState s;
  Reader r{v, ErrorType::kInvalidState, "state"};
  r.only({"benchmark", "backend", "reward_space", "seed", "trace", "rewards", "initial_time_s",
          "final_time_s"});
  if (!r.str("benchmark", &s.benchmark))
    fail(ErrorType::kInvalidState, "missing field 'state.benchmark'");
  r.str("backend", &s.backend);
  r.str("reward_space", &s.reward_space);
  r.uint64("seed", &s.seed);
  constexpr double kBig = std::numeric_limits<double>::max();
  r.number("initial_time_s", &s.initial_time_s, -kBig, kBig);
  r.number("final_time_s", &s.final_time_s, -kBig, kBig);
  if (const json::Value* t = member(v, "trace")) {
    if (!t->IsArray()) r.bad("trace", "a list of action texts");
    for (const auto& a : t->GetArray()) {
      if (!a.IsString()) r.bad("trace", "a list of action texts");
      s.trace.emplace_back(a.GetString(), a.GetStringLength());
    }
  }
  if (const json::Value* t = member(v, "rewards")) {
    if (!t->IsArray()) r.bad("rewards", "a list of numbers");
    for (const auto& x : t->GetArray()) {
      if (x.IsNull()) {
        s.rewards.push_back(std::numeric_limits<double>::quiet_NaN());
      } else if (x.IsNumber()) {
        s.rewards.push_back(x.GetDouble());
      } else {
        r.bad("rewards", "a list of numbers");
      }
    }
  }
  return s;
}

}  // namespace perfdojo::bridge
