// perfdojo-bridge server: env sessions served over TCP to Gymnasium clients in other processes
// (docs/bridge.md). Asynchronous Boost.Asio I/O on one thread; env work runs on worker pools,
// one strand per session, so a slow measurement holds up only its own session. Cost-model
// sessions and measuring sessions use separate pools: a long measurement never delays a
// cost-model client.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "bridge/protocol.h"
#include "ir/diagnostic.h"

namespace perfdojo::bridge {

/// How to run a server.
struct ServerOptions {
  std::string host = "127.0.0.1";    ///< address to bind; loopback unless asked otherwise
  uint16_t port = 0;                 ///< 0: the kernel picks a free port
  std::optional<std::string> token;  ///< shared secret the handshake must present
  Limits limits;
  ConfigPolicy policy;
  int workers = 0;          ///< threads for deterministic (cost-model) sessions; 0: CPU count
  int measure_workers = 0;  ///< threads for measuring sessions; 0: max(1, CPUs / 2)
  /// Cheap requests (step, reset, mask, spaces, program, binary frames) of an idle
  /// deterministic session run on the I/O thread instead of a worker: the hand-offs cost more
  /// than a cost-model step. Other connections wait for them meanwhile (docs/bridge.md).
  bool inline_fast = true;
  /// Microseconds the I/O thread keeps polling after its last handler before it sleeps (0:
  /// never polls; -1: 200 when the process may use two cores or more, else 0). Polling keeps
  /// one core busy while clients are active and saves a thread wake-up per request.
  int poll_us = -1;
  /// 0: no log; 1: one line per notable event (auth failure or throttling, timeouts, oversized
  /// frames, connections evicted or refused, sessions made and closed); 2: also every
  /// connection opened and closed. Lines are logfmt: `perfdojo-bridge event=... conn=N
  /// peer=ADDR:PORT ...` (docs/bridge.md, "Log").
  int log_level = 1;
  /// Where log lines go (one call per line, without the newline); empty: stderr.
  std::function<void(const std::string&)> log;
};

/// Counters, for tests and the shutdown summary.
struct ServerStats {
  uint64_t connections_accepted = 0;
  int connections_open = 0;
  int sessions_live = 0;
  uint64_t requests = 0;
  uint64_t error_replies = 0;
  uint64_t evicted_unauthenticated = 0;  ///< closed to make room for a new connection
  uint64_t auth_failures = 0;            ///< wrong or missing tokens, throttled ones included
};

/// A running server. Threads start in start() and stop in stop() (or the destructor).
class Server {
 public:
  /// Binds, listens and starts serving; errors (bad host, port in use) as diagnostics.
  static ir::Result<std::unique_ptr<Server>> start(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The bound address and port (the real port when 0 was asked for).
  std::string host() const;
  uint16_t port() const;
  /// Blocks until stop() is called or SIGINT/SIGTERM arrives (when handle_signals), then
  /// closes every connection and joins the threads.
  void wait(bool handle_signals);
  /// Asks the server to stop; returns at once (safe from any thread). wait() or the destructor
  /// does the shutdown.
  void stop();
  /// Current counters.
  ServerStats stats() const;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Whether `host` is a loopback address (127.0.0.0/8, ::1, "localhost").
bool is_loopback(const std::string& host);

/// "HOST:PORT", with an IPv6 address in brackets ("[::1]:8080").
std::string endpoint_text(const std::string& host, uint16_t port);

}  // namespace perfdojo::bridge
