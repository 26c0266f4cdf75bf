#include "bridge/handlers.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backends/backend.h"
#include "gym/dataset.h"
#include "ir/print.h"
#include "transforms/action.h"

namespace perfdojo::bridge {

namespace {

[[noreturn]] void fail(ErrorType t, std::string message) {
  throw RequestError{{t, std::move(message)}};
}

// The request field `observation_format`: "list" (the default) or "base64".
ObservationFormat observation_format_of(const json::Value& request) {
  const std::optional<std::string> f = opt_string(request, "observation_format");
  if (!f || *f == "list") return ObservationFormat::kList;
  if (*f == "base64") return ObservationFormat::kBase64;
  fail(ErrorType::kBadRequest, "field 'observation_format' must be \"list\" or \"base64\"");
}

std::string string_list(const std::vector<std::string>& v) {
  JsonWriter w;
  w.begin_array();
  for (const auto& s : v) w.value(s);
  w.end_array();
  return w.take();
}

// The binary state format is defined by env::save_state/load_state, which work on files; a
// private temporary file lets the bridge carry exactly those bytes (and reuse their checks).
std::string temp_state_path() {
  static std::atomic<uint64_t> counter{0};
  return (std::filesystem::temp_directory_path() /
          ("perfdojo-bridge-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) +
           ".state"))
      .string();
}

std::string binary_state(const env::EpisodeState& s) {
  const std::string path = temp_state_path();
  if (std::string err = env::save_state(s, path, "binary"); !err.empty()) {
    std::filesystem::remove(path + ".tmp");
    fail(ErrorType::kInternal, "cannot serialise the state: " + err);
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  std::filesystem::remove(path);
  return buf.str();
}

env::EpisodeState parse_binary_state(const std::string& bytes) {
  const std::string path = temp_state_path();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) fail(ErrorType::kInternal, "cannot write a temporary state file");
  }
  auto s = env::load_state(path, "binary");
  std::filesystem::remove(path);
  if (!s.ok()) {
    std::string msg;
    for (const auto& d : s.errors()) msg += (msg.empty() ? "" : "; ") + d.message;
    fail(ErrorType::kInvalidState, "binary state: " + msg);
  }
  return s.value();
}

// The state a restore or validate request carries, in its declared format.
env::EpisodeState request_state(const json::Value& doc, const ConfigPolicy& policy) {
  const std::string format = opt_string(doc, "format").value_or("json");
  const json::Value* v = member(doc, "state");
  if (!v) fail(ErrorType::kBadRequest, "missing field 'state'");
  env::EpisodeState s;
  if (format == "json") {
    s = state_from_json(*v);
  } else if (format == "binary") {
    if (!v->IsString()) fail(ErrorType::kBadRequest, "a binary state must be a base64 string");
    auto bytes = base64_decode(std::string_view(v->GetString(), v->GetStringLength()));
    if (!bytes) fail(ErrorType::kInvalidState, "the binary state is not valid base64");
    s = parse_binary_state(*bytes);
  } else {
    fail(ErrorType::kBadRequest, "field 'format' must be \"json\" or \"binary\"");
  }
  check_benchmark_allowed(s.benchmark, policy);
  return s;
}

std::string reset_op(env::Env& e, const Request& req, const ConfigPolicy& policy) {
  const json::Value& d = req.doc;
  check_fields(d, {"id", "op", "session", "seed", "options", "observation_format"}, "reset");
  const ObservationFormat format = observation_format_of(d);
  std::optional<uint64_t> seed = opt_uint64(d, "seed");
  env::ResetOptions options;
  if (const json::Value* o = member(d, "options")) {
    if (!o->IsObject()) fail(ErrorType::kBadRequest, "field 'options' must be an object");
    check_fields(*o, {"benchmark"}, "reset options");
    options.benchmark = opt_string(*o, "benchmark");
    if (options.benchmark) check_benchmark_allowed(*options.benchmark, policy);
  }
  auto [obs, info] = e.reset(seed, options);
  JsonWriter w;
  write_reset(w, obs, info, e.config().observation_spaces, format);
  return w.take();
}

int checked_index(const json::Value& v, int n, const char* field) {
  if (!v.IsInt64())
    fail(ErrorType::kBadRequest,
         std::string("field '") + field + "' must hold integers (action indices)");
  const int64_t a = v.GetInt64();
  if (a < 0 || a >= n)
    fail(ErrorType::kInvalidAction, "action " + std::to_string(a) + " is out of range [0, " +
                                        std::to_string(n) + "); the session is unchanged");
  return static_cast<int>(a);
}

std::string step_op(env::Env& e, const Request& req, const ConfigPolicy&) {
  const json::Value& d = req.doc;
  check_fields(d, {"id", "op", "session", "action", "actions", "timed", "observation_format"},
               "step");
  const ObservationFormat format = observation_format_of(d);
  const json::Value* one = member(d, "action");
  const json::Value* many = member(d, "actions");
  if (!one == !many)
    fail(ErrorType::kBadRequest,
         "give exactly one of 'action' (an index or action text) and "
         "'actions' (a list of indices)");
  // timed false: Env::step_untimed for one index; for a list, only where it ends is timed.
  const json::Value* timed_field = member(d, "timed");
  if (timed_field && !timed_field->IsBool())
    fail(ErrorType::kBadRequest, "field 'timed' must be true or false");
  const bool timed = !timed_field || timed_field->GetBool();
  const int n = e.action_spec().n;
  env::StepResult r;
  if (many) {
    if (!many->IsArray()) fail(ErrorType::kBadRequest, "field 'actions' must be a list of indices");
    // Check every index before applying any, so a bad list changes nothing.
    std::vector<int> actions;
    actions.reserve(many->Size());
    for (const auto& a : many->GetArray()) actions.push_back(checked_index(a, n, "actions"));
    r = e.step(actions, timed);
  } else if (one->IsString()) {
    if (!timed)
      fail(ErrorType::kBadRequest, "'timed': false takes an action index, not action text");
    std::string_view text(one->GetString(), one->GetStringLength());
    auto a = transforms::parse_action(text, "<action>");
    if (!a.ok()) fail(ErrorType::kInvalidAction, a.error_text());
    r = e.step_action(a.value());
  } else {
    const int a = checked_index(*one, n, "action");
    r = timed ? e.step(a) : e.step_untimed(a);
  }
  JsonWriter w;
  w.reserve(16 << 10);
  write_step(w, r, e.config().observation_spaces, format);
  return w.take();
}

std::string action_mask_op(env::Env& e, const Request& req, const ConfigPolicy&) {
  check_fields(req.doc, {"id", "op", "session", "format"}, "action_mask");
  const std::string format = opt_string(req.doc, "format").value_or("base64");
  if (format != "base64" && format != "list")
    fail(ErrorType::kBadRequest, "field 'format' must be \"base64\" or \"list\"");
  const std::vector<uint8_t> mask = e.action_mask();
  JsonWriter w;
  w.begin_object().field("n", e.action_spec().n).field("format", format).key("mask");
  if (format == "base64") {
    w.value(mask_base64(mask));
  } else {
    w.begin_array();
    for (uint8_t m : mask) w.raw(m ? "1" : "0");
    w.end_array();
  }
  w.end_object();
  return w.take();
}

std::string spaces_op(env::Env& e, const Request& req, const ConfigPolicy&) {
  check_fields(req.doc, {"id", "op", "session"}, "spaces");
  JsonWriter w;
  write_spaces(w, e);
  return w.take();
}

std::string program_op(env::Env& e, const Request& req, const ConfigPolicy&) {
  check_fields(req.doc, {"id", "op", "session"}, "program");
  JsonWriter w;
  w.begin_object().field("ir_text", ir::print_program(e.program())).end_object();
  return w.take();
}

std::string save_op(env::Env& e, const Request& req, const ConfigPolicy&) {
  check_fields(req.doc, {"id", "op", "session", "format"}, "save");
  const std::string format = opt_string(req.doc, "format").value_or("json");
  JsonWriter w;
  w.begin_object().field("format", format).key("state");
  if (format == "json") {
    write_state(w, e.state());
  } else if (format == "binary") {
    w.value(base64_encode(binary_state(e.state())));
  } else {
    fail(ErrorType::kBadRequest, "field 'format' must be \"json\" or \"binary\"");
  }
  w.end_object();
  return w.take();
}

std::string restore_op(env::Env& e, const Request& req, const ConfigPolicy& policy) {
  check_fields(req.doc, {"id", "op", "session", "state", "format", "observation_format"},
               "restore");
  const ObservationFormat obs_format = observation_format_of(req.doc);
  env::EpisodeState s = request_state(req.doc, policy);
  // Env::restore checks the whole trace before it resets, so a bad state leaves e as it was.
  auto restored = e.restore(s);
  if (!restored.ok()) fail(ErrorType::kInvalidState, restored.error_text());
  // An empty step list reports the current observation and info without acting.
  env::StepResult now = e.step(std::vector<int>{});
  JsonWriter w;
  write_reset(w, now.observation, now.info, e.config().observation_spaces, obs_format);
  return w.take();
}

std::string validate_op(env::Env& e, const Request& req, const ConfigPolicy& policy) {
  check_fields(req.doc, {"id", "op", "session", "state", "format"}, "validate");
  env::EpisodeState s = member(req.doc, "state") ? request_state(req.doc, policy) : e.state();
  JsonWriter w;
  write_validation(w, env::validate(s, e.config()));
  return w.take();
}

}  // namespace

const std::vector<Operation>& operations() {
  static const std::vector<Operation> kOps = {
      {"hello", Route::kHello},
      {"ping", Route::kPing},
      {"list_benchmarks", Route::kListBenchmarks},
      {"make", Route::kMake},
      {"spaces", Route::kEnv, true, true, spaces_op},
      {"reset", Route::kEnv, true, true, reset_op},
      {"step", Route::kEnv, true, true, step_op},
      {"action_mask", Route::kEnv, true, true, action_mask_op},
      {"fork", Route::kFork, true},
      {"program", Route::kEnv, true, true, program_op},
      {"save", Route::kEnv, true, false, save_op},
      {"restore", Route::kEnv, true, false, restore_op},
      {"validate", Route::kEnv, true, false, validate_op},
      {"close", Route::kClose, true},
  };
  return kOps;
}

const Operation* find_operation(std::string_view name) {
  for (const Operation& op : operations())
    if (op.name == name) return &op;
  return nullptr;
}

const std::vector<std::string>& operation_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const Operation& op : operations()) names.emplace_back(op.name);
    return names;
  }();
  return kNames;
}

bool is_session_op(const std::string& op) {
  const Operation* o = find_operation(op);
  return o && o->session;
}

Error unknown_op_error(std::string_view op) {
  std::string ops;
  for (const auto& o : operation_names()) ops += (ops.empty() ? "" : ", ") + o;
  return {ErrorType::kUnknownOp,
          "unknown op '" + std::string(op.substr(0, 64)) + "'; expected one of " + ops};
}

std::string hello_result(const Limits& limits) {
  JsonWriter w;
  w.begin_object().field("server", "perfdojo-bridge").field("version", kProtocolVersion);
  w.key("limits")
      .begin_object()
      .field("max_frame_bytes", static_cast<uint64_t>(limits.max_frame_bytes))
      .field("max_sessions", limits.max_sessions)
      .field("max_connections", limits.max_connections)
      .field("max_pending", limits.max_pending)
      .field("idle_timeout_s", limits.idle_timeout_s)
      .field("frame_timeout_s", limits.frame_timeout_s)
      .end_object();
  w.key("operations").raw(string_list(operation_names()));
  w.key("backends").raw(string_list(backends::backend_names()));
  w.key("reward_spaces").raw(string_list(env::reward_spaces()));
  std::vector<std::string> obs;
  for (const auto& s : env::observation_spaces()) obs.push_back(s.name);
  w.key("observation_spaces").raw(string_list(obs));
  // Optional request fields added within this protocol version: a client asks for one only
  // where the server names it, so old servers keep working with new clients.
  w.key("extensions").raw(string_list({"observation_format"}));
  w.end_object();
  return w.take();
}

std::string list_benchmarks_result(const Request& req) {
  check_fields(req.doc, {"id", "op"}, "list_benchmarks");
  JsonWriter w;
  w.begin_object();
  w.key("suite").raw(string_list(env::suite_uris()));
  w.key("train").raw(string_list(env::train_split()));
  w.key("test").raw(string_list(env::test_split()));
  w.key("generators").raw(string_list(env::generator_families()));
  w.end_object();
  return w.take();
}

std::unique_ptr<env::Env> make_env(const Request& req, const ConfigPolicy& policy) {
  check_fields(req.doc, {"id", "op", "config"}, "make");
  static const json::Value kEmpty(json::kObjectType);
  const json::Value* c = member(req.doc, "config");
  env::EnvConfig config = config_from_json(c ? *c : kEmpty, policy);
  auto made = env::Env::make(config);
  if (!made.ok()) fail(ErrorType::kConfigError, made.error_text());
  return std::move(made).value();
}

std::string session_result(uint64_t id, const env::Env& e) {
  JsonWriter w;
  w.begin_object().field("session", id).key("spaces");
  write_spaces(w, e);
  w.end_object();
  return w.take();
}

std::string handle_session_op(env::Env& e, const Request& req, const ConfigPolicy& policy) {
  const Operation* op = find_operation(req.op);
  if (!op || !op->run)
    return error_reply(
        req.id, {ErrorType::kUnknownOp, "operation '" + req.op + "' is not a session operation"});
  return handle_session_op(*op, e, req, policy);
}

std::string handle_session_op(const Operation& op, env::Env& e, const Request& req,
                              const ConfigPolicy& policy) {
  try {
    if (!op.run)
      fail(ErrorType::kUnknownOp, "operation '" + req.op + "' is not a session operation");
    return ok_reply(req.id, op.run(e, req, policy));
  } catch (const RequestError& err) {
    return error_reply(req.id, err.error);
  } catch (const std::exception& ex) {
    return error_reply(req.id, {ErrorType::kInternal, std::string("internal error: ") + ex.what()});
  }
}

}  // namespace perfdojo::bridge
