#include "bridge/protocol.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "transforms/action.h"

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

// ---------------------------------------------------------------- frames

std::string encode_frame(std::string_view body) {
  std::string out(kFrameHeaderBytes + body.size(), '\0');
  const auto n = static_cast<uint32_t>(body.size());
  out[0] = static_cast<char>((n >> 24) & 0xff);
  out[1] = static_cast<char>((n >> 16) & 0xff);
  out[2] = static_cast<char>((n >> 8) & 0xff);
  out[3] = static_cast<char>(n & 0xff);
  std::memcpy(out.data() + kFrameHeaderBytes, body.data(), body.size());
  return out;
}

uint32_t decode_frame_length(const unsigned char* h) {
  return (uint32_t{h[0]} << 24) | (uint32_t{h[1]} << 16) | (uint32_t{h[2]} << 8) | uint32_t{h[3]};
}

void FrameDecoder::feed(const char* data, size_t n) {
  // Drop consumed bytes before growing, so the buffer stays near one frame plus one read.
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (64u << 10) && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(data, n);
}

FrameDecoder::Status FrameDecoder::next(std::string* body) {
  const size_t avail = buf_.size() - pos_;
  if (avail < kFrameHeaderBytes) return Status::kNeedMore;
  const uint32_t len =
      decode_frame_length(reinterpret_cast<const unsigned char*>(buf_.data() + pos_));
  if (len > max_) {
    refused_ = len;
    return Status::kTooLarge;
  }
  if (avail - kFrameHeaderBytes < len) return Status::kNeedMore;
  body->assign(buf_, pos_ + kFrameHeaderBytes, len);
  pos_ += kFrameHeaderBytes + len;
  return Status::kFrame;
}

// ---------------------------------------------------------------- requests and replies

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

// ---------------------------------------------------------------- env codecs

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
          "measure", "max_episode_steps", "seed", "illegal_action_penalty", "time_cache_entries"});
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

void write_observation(JsonWriter& w, const env::Observation& o,
                       const std::vector<std::string>& spaces) {
  w.begin_object();
  for (const auto& s : spaces) {
    w.key(s);
    if (s == "ir_text") {
      w.value(o.ir_text);
    } else if (s == "features") {
      w.begin_array();
      for (float f : o.features) w.value(f);
      w.end_array();
    } else if (s == "tokens") {
      w.begin_array();
      for (int32_t t : o.tokens) w.value(static_cast<int64_t>(t));
      w.end_array();
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

void write_step(JsonWriter& w, const env::StepResult& r, const std::vector<std::string>& spaces) {
  w.begin_object().key("observation");
  write_observation(w, r.observation, spaces);
  w.field("reward", r.reward).field("terminated", r.terminated).field("truncated", r.truncated);
  w.key("info");
  write_info(w, r.info);
  w.end_object();
}

void write_reset(JsonWriter& w, const env::Observation& o, const env::Info& info,
                 const std::vector<std::string>& spaces) {
  w.begin_object().key("observation");
  write_observation(w, o, spaces);
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

// ---------------------------------------------------------------- base64

namespace {
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(in[k])); };
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (b(i) << 16) | (b(i + 1) << 8) | b(i + 2);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  if (size_t rest = in.size() - i) {
    uint32_t v = b(i) << 16;
    if (rest == 2) v |= b(i + 1) << 8;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += rest == 2 ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string mask_base64(const std::vector<uint8_t>& mask) {
  std::string bits((mask.size() + 7) / 8, '\0');
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) bits[i >> 3] = static_cast<char>(bits[i >> 3] | (0x80 >> (i & 7)));
  return base64_encode(bits);
}

std::optional<std::string> base64_decode(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::array<int, 256> value;
  value.fill(-1);
  for (int k = 0; k < 64; ++k) value[static_cast<unsigned char>(kB64[k])] = k;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const auto c = static_cast<unsigned char>(in[i + k]);
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad || value[c] < 0) {
        return std::nullopt;  // a character outside the alphabet, or data after padding
      } else {
        v[k] = value[c];
      }
    }
    uint32_t n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

}  // namespace perfdojo::bridge
