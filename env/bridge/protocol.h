// perfdojo-bridge wire protocol (docs/bridge.md): length-prefixed frames carrying JSON, and the
// codecs between JSON and the env's types. Nothing here touches a socket, so every rule about
// bad input is testable on strings alone.
//
// Frame: a 4-byte big-endian length N, then N bytes of UTF-8 JSON. Requests are objects with
// "id" and "op"; replies are {"id", "ok": true, "result"} or {"id", "ok": false, "error":
// {"type", "message"}}.
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

/// Protocol version spoken by this server; the handshake must ask for it.
inline constexpr int kProtocolVersion = 1;
/// Bytes of the big-endian length that precedes each frame body.
inline constexpr size_t kFrameHeaderBytes = 4;

/// Deepest nesting of objects and arrays a request may have (real requests need 3).
inline constexpr int kMaxRequestDepth = 64;

/// Server limits; each has a command-line flag (docs/bridge.md, "Limits").
struct Limits {
  uint32_t max_frame_bytes = 8u << 20;  ///< largest request body accepted
  int max_sessions = 256;               ///< live env sessions, all connections together
  int max_connections = 256;            ///< open connections
  int max_pending = 32;                 ///< requests per connection awaiting their reply
  double idle_timeout_s = 3600;         ///< close a connection silent this long (0: never)
  double frame_timeout_s = 30;          ///< a started frame, or the handshake, must finish by then
};

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

// ---------------------------------------------------------------- frames

/// The 4-byte header followed by `body`.
std::string encode_frame(std::string_view body);
/// The length a 4-byte header announces.
uint32_t decode_frame_length(const unsigned char* header);

/// Splits a byte stream into frame bodies. Refuses a frame as soon as its header announces more
/// than the limit, before any of its body is buffered.
class FrameDecoder {
 public:
  /// What next() found.
  enum class Status { kNeedMore, kFrame, kTooLarge };

  explicit FrameDecoder(uint32_t max_frame_bytes) : max_(max_frame_bytes) {}
  /// Appends received bytes.
  void feed(const char* data, size_t n);
  /// The next complete frame's body, if one is buffered.
  Status next(std::string* body);
  /// Whether part of a frame (header or body) is buffered: the frame timeout is running.
  bool mid_frame() const { return pos_ < buf_.size(); }
  /// Length announced by the refused header (after kTooLarge).
  uint32_t refused_length() const { return refused_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
  uint32_t max_;
  uint32_t refused_ = 0;
};

// ---------------------------------------------------------------- JSON

// The one JSON module (util/json.h) under the names the bridge's code and tests use.
namespace json = util::json;
using util::append_json_string;
using util::JsonWriter;

// ---------------------------------------------------------------- requests and replies

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

/// {"id":..,"ok":true,"result":<result_json>}
std::string ok_reply(std::string_view id, std::string_view result_json);
/// {"id":..,"ok":false,"error":{"type":..,"message":..}}
std::string error_reply(std::string_view id, const Error& e);

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

// ---------------------------------------------------------------- env codecs

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

/// {"features":[..],"tokens":[..],"ir_text":"..","graph":{..}}, only the spaces in `spaces`.
void write_observation(JsonWriter& w, const env::Observation& o,
                       const std::vector<std::string>& spaces);
/// The Info fields (docs/bridge.md); the action mask as mask_base64.
void write_info(JsonWriter& w, const env::Info& info);
/// {"observation","reward","terminated","truncated","info"}
void write_step(JsonWriter& w, const env::StepResult& r, const std::vector<std::string>& spaces);
/// {"observation","info"}
void write_reset(JsonWriter& w, const env::Observation& o, const env::Info& info,
                 const std::vector<std::string>& spaces);
/// {"action_space":{..},"observation_spaces":[..],"deterministic",..}
void write_spaces(JsonWriter& w, const env::Env& e);
/// The EpisodeState as a JSON object (field names as in state.h).
void write_state(JsonWriter& w, const env::EpisodeState& s);
/// An EpisodeState from write_state's object. Throws RequestError(kInvalidState).
env::EpisodeState state_from_json(const json::Value& v);
/// The validate() verdict.
void write_validation(JsonWriter& w, const env::Validation& v);

/// Standard base64 with padding.
std::string base64_encode(std::string_view bytes);
/// A 0/1 mask packed 8 actions to a byte, first action in the high bit (numpy.packbits order),
/// then base64: a 1657-action mask is 280 characters and decodes in microseconds.
std::string mask_base64(const std::vector<uint8_t>& mask);
/// Strict decoding: nullopt on any character outside the alphabet or a bad length.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace perfdojo::bridge
