// Reading bridge requests: a frame body into a Request, typed field readers, and the decoders of
// the env's types a request carries (a make config, a saved state). Every refusal is a typed
// Error naming the field; nothing here touches a socket.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gym/env.h"
#include "gym/state.h"
#include "util/json.h"

namespace perfdojo::bridge {

// The one JSON module (util/json.h) under the names the bridge's code and tests use.
namespace json = util::json;
using util::append_json_string;
using util::JsonWriter;

/// Deepest nesting of objects and arrays a request may have (real requests need 3).
inline constexpr int kMaxRequestDepth = 64;

/// What a reply's error.type says. Names are stable: clients switch on them.
enum class ErrorType {
  kFrameTooLarge,      ///< the length exceeds max_frame_bytes; the connection is closed
  kInvalidJson,        ///< the body is not one JSON object in valid UTF-8
  kBadRequest,         ///< a field is missing or has the wrong type
  kUnknownOp,          ///< "op" names no operation
  kHandshakeRequired,  ///< the first message was not "hello"; the connection is closed
  kAuthFailed,         ///< wrong or missing token; the connection is closed
  kVersionMismatch,    ///< unsupported protocol version; the connection is closed
  kUnknownSession,     ///< no such session on this connection
  kSessionLimit,       ///< max_sessions reached
  kConfigError,        ///< make: the EnvConfig is invalid
  kInvalidAction,      ///< an action index outside [0, n) or unparsable action text
  kInvalidState,       ///< restore/validate: the saved state is corrupt or does not replay
  kForbidden,          ///< a file benchmark on a server started without --allow-files
  kIdleTimeout,        ///< closed for silence or a frame that never finished
  kServerBusy,         ///< max_connections reached; the connection is closed
  kInternal,           ///< the server's bug; the session is unchanged where possible
};

/// The wire name of an error type ("frame_too_large", ...).
const char* error_type_name(ErrorType t);

/// A failed request, as carried in an error reply.
struct Error {
  ErrorType type = ErrorType::kInternal;
  std::string message;
};

/// Thrown by the request readers below; caught once where a request is dispatched and turned
/// into an error reply, so each handler reads its fields in a straight line.
struct RequestError {
  Error error;
};

// ---------------------------------------------------------------- requests

/// One parsed request. `id` is the request's id as JSON text ("null" when absent), echoed back.
struct Request {
  std::string id = "null";
  std::string op;
  json::Document doc;  ///< the whole message (an object)
};

/// Parses a frame body into `*out`. On failure returns the error, with `out->id` set to whatever
/// id could be read (or "null") so the error reply can still name the request. A body that does
/// not start with '{' is refused before it is parsed; invalid JSON is reported with its byte
/// offset, line and column; nesting deeper than kMaxRequestDepth is refused.
std::optional<Error> parse_request(std::string_view body, Request* out);

// Field readers: each throws RequestError naming the field when it is absent (where required)
// or of the wrong type.

/// The member `name` of `obj`, or nullptr when absent or null.
const json::Value* member(const json::Value& obj, const char* name);
/// A required string field.
std::string get_string(const json::Value& obj, const char* name);
/// An optional string field.
std::optional<std::string> opt_string(const json::Value& obj, const char* name);
/// An optional non-negative integer field up to 2^64-1.
std::optional<uint64_t> opt_uint64(const json::Value& obj, const char* name);
/// A required session id.
uint64_t get_session(const json::Value& obj);
/// Refuses members of `obj` outside `allowed` (typos should not pass silently).
void check_fields(const json::Value& obj, const std::vector<std::string_view>& allowed,
                  std::string_view what);

// ---------------------------------------------------------------- env decoders

/// What a client may put in a config. Backend settings that run programs or write files
/// (compiler, cache directory, machine profile) belong to the server, never to the client.
struct ConfigPolicy {
  backends::BackendConfig backend_config;  ///< used for every session
  bool allow_files = false;                ///< benchmarks given as paths (.pdj, file://)
};

/// Throws RequestError(kForbidden) when `uri` names a file and the policy forbids files.
void check_benchmark_allowed(const std::string& uri, const ConfigPolicy& policy);
/// An EnvConfig from the JSON object of a "make" request (every field optional; defaults are
/// EnvConfig's). Throws RequestError(kConfigError) naming the offending field.
env::EnvConfig config_from_json(const json::Value& obj, const ConfigPolicy& policy);

/// An EpisodeState from write_state's object. Throws RequestError(kInvalidState).
env::EpisodeState state_from_json(const json::Value& v);

}  // namespace perfdojo::bridge
