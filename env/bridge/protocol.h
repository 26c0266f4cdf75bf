// perfdojo-bridge wire protocol (docs/bridge.md): length-prefixed frames carrying JSON, and the
// codecs between JSON and the env's types. Nothing here touches a socket, so every rule about
// bad input is testable on strings alone.
//
// The protocol is split by job: frame.h (framing), request.h (reading requests and the env types
// they carry), reply.h (writing replies), base64.h; this header brings them together with the
// version and the server's limits.
//
// Frame: a 4-byte big-endian length N, then N bytes of UTF-8 JSON. Requests are objects with
// "id" and "op"; replies are {"id", "ok": true, "result"} or {"id", "ok": false, "error":
// {"type", "message"}}.
#pragma once

#include <cstdint>

#include "bridge/base64.h"
#include "bridge/binary.h"
#include "bridge/frame.h"
#include "bridge/reply.h"
#include "bridge/request.h"

namespace perfdojo::bridge {

/// Protocol version spoken by this server; the handshake must ask for it.
inline constexpr int kProtocolVersion = 1;

/// Server limits; each has a command-line flag (docs/bridge.md, "Limits").
struct Limits {
  uint32_t max_frame_bytes = 8u << 20;  ///< largest request body accepted
  /// Largest frame before the handshake succeeded: a client that has not shown the token (or
  /// said hello) holds a few KiB of server memory, never max_frame_bytes.
  uint32_t max_preauth_frame_bytes = 4096;
  /// Handshakes that fail (wrong token) from one address before it must wait: 2^(n-limit) x
  /// 100 ms after the n-th failure, at most a minute, during which its handshakes are refused
  /// without a look at the token.
  int auth_failures_before_backoff = 3;
  int max_sessions = 256;        ///< live env sessions, all connections together
  int max_connections = 256;     ///< open connections
  int max_pending = 32;          ///< requests per connection awaiting their reply
  double idle_timeout_s = 3600;  ///< close a connection silent this long (0: never)
  double frame_timeout_s = 30;   ///< a started frame, or the handshake, must finish by then
};

}  // namespace perfdojo::bridge
