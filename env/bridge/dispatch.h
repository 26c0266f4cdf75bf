// What a bridge connection does with a frame (docs/bridge.md, "Operations", "Concurrency"):
// the handshake, then each request routed by the operations table (handlers.h) to the I/O
// thread, a worker pool or its session's strand, and the connection's env sessions. Nothing
// here reads or writes a socket: replies go to the connection that owns the dispatcher.
#pragma once

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "bridge/handlers.h"
#include "bridge/server.h"

namespace perfdojo::bridge {

using PoolStrand = boost::asio::strand<boost::asio::thread_pool::executor_type>;

/// One env session: its env and the strand that runs its requests one at a time, in order.
struct Session {
  Session(uint64_t i, std::unique_ptr<env::Env> e, PoolStrand s, std::atomic<int>& live)
      : id(i),
        deterministic(e->deterministic()),
        env(std::move(e)),
        strand(std::move(s)),
        live_(live) {}
  ~Session() { release_slot(); }
  /// Gives back its max_sessions claim, once: at `close` (before the reply, so a client that
  /// closes and then makes finds the slot free), else when the last holder lets it go.
  void release_slot() {
    if (!released_.exchange(true)) --live_;
  }
  /// Runs `fn` on the strand; `queued` counts it until it has run.
  template <class Fn>
  void post(Fn fn) {
    ++queued;
    boost::asio::post(strand, [this, fn = std::move(fn)]() mutable {
      fn();
      --queued;
    });
  }
  /// Whether nothing is queued or running on the strand. Only the connection's I/O thread posts
  /// to a session, so when it sees an idle session nothing else can touch the env until it posts
  /// again: it may run a cheap request itself (Dispatcher::inline_ok).
  bool idle() const { return queued.load() == 0; }

  uint64_t id;
  const bool deterministic;
  std::unique_ptr<env::Env> env;  // touched on `strand`, or on the I/O thread while idle()
  PoolStrand strand;
  std::atomic<bool> closed{false};
  std::atomic<int> queued{0};

 private:
  std::atomic<int>& live_;
  std::atomic<bool> released_{false};
};

/// What every connection's dispatcher shares: the options, the session count, the worker
/// pools, the handshake failures per address and the log. Server::Impl is one.
struct ServerContext {
  using Clock = std::chrono::steady_clock;
  explicit ServerContext(ServerOptions o) : opts(std::move(o)) {}

  ServerOptions opts;
  std::atomic<int> sessions_live{0};
  std::atomic<uint64_t> next_session{1};
  std::atomic<int> busy_connections{0};  // with a request received and not yet answered
  std::atomic<uint64_t> auth_failures{0};
  /// The pools (owned by the server, which outlives every handler they hold).
  boost::asio::thread_pool* fast_pool = nullptr;     // deterministic (cost-model) sessions
  boost::asio::thread_pool* measure_pool = nullptr;  // measuring sessions
  int fast_workers = 1;                              // threads of fast_pool

  /// Claims one of max_sessions; false when none is left.
  bool reserve_session();
  /// A session over `e`, on the pool its backend calls for. Takes a reserve_session() claim.
  std::shared_ptr<Session> new_session(std::unique_ptr<env::Env> e);
  /// One logfmt line when `level` is at most opts.log_level.
  void log(int level, const std::string& line) const;
  /// Seconds `address` must still wait before its next handshake is looked at (0: none).
  double backoff_left(const std::string& address);
  /// Counts a failed handshake from `address`; returns the wait it now has.
  double failed_handshake(const std::string& address);
  void handshake_succeeded(const std::string& address) { failures_.erase(address); }

 private:
  // Failed handshakes per client address (touched on the loop thread only): how many, and
  // until when the address must wait. Bounded: the oldest entries go first.
  struct Failures {
    int count = 0;
    Clock::time_point until{}, last{};
  };
  std::map<std::string, Failures> failures_;
  static constexpr size_t kMaxFailureEntries = 4096;
};

/// What a Dispatcher needs from the connection that owns it.
class DispatchOwner {
 public:
  virtual ~DispatchOwner() = default;
  /// Keeps the owner (and so the dispatcher) alive in handlers on other threads.
  virtual std::shared_ptr<void> hold() = 0;
  /// Sends the reply to a request, on the I/O thread; `close_after` closes once it is written.
  virtual void reply(std::string body, bool close_after) = 0;
  /// Sends the reply to a request from any thread.
  virtual void post_reply(std::string body) = 0;
  /// The handshake succeeded: larger frames are welcome.
  virtual void handshake_done() = 0;
  /// "conn=N peer=ADDR:PORT", for log lines.
  virtual std::string who() const = 0;
  /// The client's address, for the handshake's backoff.
  virtual const std::string& address() const = 0;
};

/// Handles one connection's frames and owns its sessions. Runs on the connection's strand
/// but for the work it hands to pools and session strands.
class Dispatcher {
 public:
  Dispatcher(ServerContext& server, DispatchOwner& owner) : server_(server), owner_(owner) {}

  /// Whether the handshake succeeded.
  bool authenticated() const { return authed_; }
  /// One frame's body: the handshake first, then requests and binary frames.
  void frame(const std::string& body);
  /// The connection closed: every session goes (after its running request), replies are
  /// dropped. Sessions a worker is making meanwhile die at once.
  void close();

 private:
  const Limits& limits() const { return server_.opts.limits; }
  void reply_error(const std::string& id, const Error& e, bool close_after = false);
  void hello(const Request& req);
  template <class Fn>
  void run_on(boost::asio::thread_pool& pool, std::shared_ptr<Request> req, Fn fn);
  void make(std::shared_ptr<Request> req);
  void add_session(std::shared_ptr<Session> s, const std::string& request_id);
  std::shared_ptr<Session> find_session(uint64_t id);
  void session_op(std::shared_ptr<Request> req, const Operation& op);
  void fork(Session& parent, const Request& req);
  void binary(const std::string& body);
  bool inline_ok(const Session& s) const;
  bool share_binary(const BinaryRequest& br);

  ServerContext& server_;
  DispatchOwner& owner_;
  bool authed_ = false;

  // Shared with worker threads.
  std::mutex sessions_mu_;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_;
  std::atomic<bool> closed_{false};
};

}  // namespace perfdojo::bridge
