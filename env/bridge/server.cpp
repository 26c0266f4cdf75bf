#include "bridge/server.h"

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "backends/backend.h"
#include "bridge/handlers.h"

namespace perfdojo::bridge {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using PoolStrand = asio::strand<asio::thread_pool::executor_type>;

namespace {

// Constant-time comparison: the time taken does not reveal how much of a token matched.
bool same_token(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

class Connection;

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
    asio::post(strand, [this, fn = std::move(fn)]() mutable {
      fn();
      --queued;
    });
  }
  /// Whether nothing is queued or running on the strand. Only the connection's I/O thread posts
  /// to a session, so when it sees an idle session nothing else can touch the env until it posts
  /// again: it may run a cheap request itself (Connection::inline_ok).
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

struct Server::Impl {
  explicit Impl(ServerOptions o) : opts(std::move(o)) {}

  // Plain state first: it must outlive the handlers that io and the pools destroy last.
  ServerOptions opts;
  double tick_s = 1;
  std::atomic<int> sessions_live{0};
  std::atomic<uint64_t> next_session{1};
  std::atomic<int> connections_open{0};
  std::atomic<int> busy_connections{0};  // with a request received and not yet answered
  std::atomic<uint64_t> connections_accepted{0}, requests{0}, error_replies{0};
  std::atomic<uint64_t> evicted{0}, auth_failures{0};
  // Failed handshakes per client address (touched on the loop thread only): how many, and
  // until when the address must wait. Bounded: the oldest entries go first.
  struct Failures {
    int count = 0;
    Clock::time_point until{}, last{};
  };
  std::map<std::string, Failures> failures;
  static constexpr size_t kMaxFailureEntries = 4096;
  std::mutex conns_mu;
  std::map<Connection*, std::weak_ptr<Connection>> conns;
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stop_requested = false;
  bool stopped = false;

  // Then the loop: sockets and timers in handlers the pools still hold need it alive.
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_pause{io};
  std::unique_ptr<asio::thread_pool> fast_pool, measure_pool;
  int fast_workers = 1;  // threads of fast_pool
  std::thread io_thread;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;

  /// Claims one of max_sessions; false when none is left.
  bool reserve_session() {
    int n = sessions_live.load();
    while (n < opts.limits.max_sessions)
      if (sessions_live.compare_exchange_weak(n, n + 1)) return true;
    return false;
  }
  /// A session over `e`, on the pool its backend calls for. Takes a reserve_session() claim.
  std::shared_ptr<Session> new_session(std::unique_ptr<env::Env> e) {
    asio::thread_pool& pool = e->deterministic() ? *fast_pool : *measure_pool;
    return std::make_shared<Session>(next_session++, std::move(e),
                                     asio::make_strand(pool.get_executor()), sessions_live);
  }
  void do_accept();
  /// One logfmt line when `level` is at most opts.log_level.
  void log(int level, const std::string& line) {
    if (level > opts.log_level) return;
    if (opts.log) {
      opts.log("perfdojo-bridge " + line);
    } else {
      std::string l = "perfdojo-bridge " + line + "\n";
      std::fwrite(l.data(), 1, l.size(), stderr);
    }
  }
  /// Seconds `address` must still wait before its next handshake is looked at (0: none).
  double backoff_left(const std::string& address) {
    auto it = failures.find(address);
    if (it == failures.end()) return 0;
    return std::max(0.0, std::chrono::duration<double>(it->second.until - Clock::now()).count());
  }
  /// Counts a failed handshake from `address`; returns the wait it now has.
  double failed_handshake(const std::string& address) {
    ++auth_failures;
    if (failures.size() >= kMaxFailureEntries && !failures.count(address)) {
      auto oldest = failures.begin();
      for (auto it = failures.begin(); it != failures.end(); ++it)
        if (it->second.last < oldest->second.last) oldest = it;
      failures.erase(oldest);
    }
    Failures& f = failures[address];
    ++f.count;
    f.last = Clock::now();
    const int over = f.count - opts.limits.auth_failures_before_backoff;
    if (over < 0) return 0;
    const double wait = std::min(60.0, 0.1 * std::pow(2.0, std::min(over, 20)));
    f.until =
        f.last + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait));
    return wait;
  }
  void handshake_succeeded(const std::string& address) { failures.erase(address); }
  /// Closes the longest-waiting connection that has not finished its handshake; false when
  /// every open connection has (loop thread only).
  bool evict_unauthenticated();
  void request_stop() {
    std::lock_guard<std::mutex> lock(stop_mu);
    stop_requested = true;
    stop_cv.notify_all();
  }
  void shutdown();

  /// The I/O loop. With opts.poll_us > 0 it keeps polling for that long after the last handler
  /// ran before it blocks: a client's next request, usually a step's worth of microseconds
  /// away, then finds the thread awake. Sleeping and waking a thread costs tens of microseconds
  /// on virtual machines, more than a cost-model step.
  void run_loop() {
    if (opts.poll_us <= 0) {
      io.run();
      return;
    }
    const auto window = std::chrono::microseconds(opts.poll_us);
    auto last = Clock::now();
    while (!io.stopped()) {
      if (io.poll() > 0) {
        last = Clock::now();
      } else if (Clock::now() - last > window || busy_connections.load() > 1) {
        // Several clients at once: the workers need the cores more than this thread.
        io.run_one();  // blocks until something happens
        last = Clock::now();
      }
    }
  }
};

// One client connection. Socket, timer and all members below run on the connection's strand;
// workers hand replies back through post_reply.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server::Impl& server, tcp::socket socket, uint64_t id)
      : server_(server),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        // Before the handshake a client gets a few KiB: a thousand of them cost megabytes.
        decoder_(std::min(server.opts.limits.max_preauth_frame_bytes,
                          server.opts.limits.max_frame_bytes)),
        read_buf_(kPreauthReadBytes),
        connected_(Clock::now()),
        last_activity_(connected_),
        id_(id) {
    boost::system::error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    address_ = ec ? "?" : ep.address().to_string();
    peer_ = ec ? "?" : endpoint_text(address_, ep.port());
  }

  bool authenticated() const { return authed_; }
  Clock::time_point connected_at() const { return connected_; }
  /// "conn=N peer=ADDR:PORT", for log lines.
  std::string who() const { return "conn=" + std::to_string(id_) + " peer=" + peer_; }

  /// Closed to make room for a new connection (loop thread).
  void evict() {
    server_.log(1, "event=evicted_unauthenticated " + who() +
                       " age_s=" + std::to_string(static_cast<int>(seconds_since(connected_))));
    close();
  }

  /// Starts reading, or (`busy`) answers server_busy and closes.
  void start(bool busy) {
    arm_timer();
    server_.log(2, "event=connected " + who());
    if (busy) {
      server_.log(1, "event=server_busy " + who());
      Error e{ErrorType::kServerBusy, "the server has " +
                                          std::to_string(server_.opts.limits.max_connections) +
                                          " connections open (--max-connections); try again later"};
      queue(error_reply("null", e), false, true);
      return;
    }
    do_read();
  }

  /// Sends a reply to a request from any thread; `close_after` closes once it is written.
  void post_reply(std::string body, bool close_after = false) {
    asio::post(socket_.get_executor(),
               [self = shared_from_this(), b = std::move(body), close_after]() mutable {
                 self->queue(std::move(b), true, close_after);
               });
  }

  /// Closes the socket at once and releases the sessions (after their running requests).
  void close() {
    if (closed_) return;
    closed_ = true;
    server_.log(2, "event=closed " + who());
    boost::system::error_code ec;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    std::map<uint64_t, std::shared_ptr<Session>> sessions;
    {
      std::lock_guard<std::mutex> lock(sessions_mu_);
      closed_flag_ = true;
      sessions.swap(sessions_);
    }
    for (auto& entry : sessions) {
      std::shared_ptr<Session> s = entry.second;
      server_.log(
          1, "event=session_end " + who() + " session=" + std::to_string(s->id) + " by=disconnect");
      s->closed = true;
      // Destroy the env on its own strand, after whatever request is running there.
      s->post([s] { s->env.reset(); });
    }
    --server_.connections_open;
    if (pending_ > 0) --server_.busy_connections;
    pending_ = 0;
    std::lock_guard<std::mutex> lock(server_.conns_mu);
    server_.conns.erase(this);
  }

  /// Closes from the loop thread outside the connection's strand (only at shutdown, when the
  /// loop runs on one thread).
  void close_now() { close(); }

 private:
  struct Outgoing {
    std::array<unsigned char, kFrameHeaderBytes> header;
    std::string body;
    bool answers_request;
    bool close_after;
  };

  const Limits& limits() const { return server_.opts.limits; }

  // ------------------------------------------------------------ reading

  void do_read() {
    if (closed_ || reading_ || lingering_ || closing_ || peer_done_) return;
    if (pending_ >= limits().max_pending) {
      paused_ = true;  // back-pressure: read on once replies have gone out
      return;
    }
    if (paused_ && frame_clock_) frame_started_ = Clock::now();  // the pause was ours, not theirs
    paused_ = false;
    reading_ = true;
    socket_.async_read_some(
        asio::buffer(read_buf_),
        [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
          self->reading_ = false;
          self->on_read(ec, n);
        });
  }

  void on_read(const boost::system::error_code& ec, size_t n) {
    if (closed_) return;
    if (ec == asio::error::eof && authed_ && (pending_ > 0 || writing_ || !out_.empty())) {
      // The client finished sending but still reads: its requests in flight get their
      // replies, then the connection closes (a truncated frame has nobody to answer).
      peer_done_ = true;
      return;
    }
    if (ec) {
      // EOF with nothing owed, or a reset: the client is gone.
      close();
      return;
    }
    decoder_.feed(read_buf_.data(), n);
    process_frames();
    do_read();
  }

  void process_frames() {
    std::string body;
    while (!closed_ && !closing_ && pending_ < limits().max_pending) {
      FrameDecoder::Status st = decoder_.next(&body);
      if (st == FrameDecoder::Status::kNeedMore) break;
      if (st == FrameDecoder::Status::kTooLarge) {
        bump_pending(+1);
        server_.log(1, "event=frame_too_large " + who() +
                           " bytes=" + std::to_string(decoder_.refused_length()) +
                           " limit=" + std::to_string(decoder_.limit()) +
                           (authed_ ? "" : " before_handshake=1"));
        Error e{ErrorType::kFrameTooLarge,
                "frame of " + std::to_string(decoder_.refused_length()) +
                    " bytes exceeds the limit of " + std::to_string(decoder_.limit()) +
                    (authed_ ? " (--max-frame-bytes)" : " before the handshake") +
                    "; closing the connection"};
        queue(error_reply("null", e), true, true);
        return;
      }
      frame_clock_ = false;
      last_activity_ = Clock::now();
      bump_pending(+1);
      ++server_.requests;
      on_frame(body);
    }
    if (decoder_.mid_frame() && !frame_clock_) {
      frame_clock_ = true;
      frame_started_ = Clock::now();
    } else if (!decoder_.mid_frame()) {
      frame_clock_ = false;
    }
  }

  void reply_error(const std::string& id, const Error& e, bool close_after = false) {
    queue(error_reply(id, e), true, close_after);
  }

  void on_frame(const std::string& body) {
    if (authed_ && is_binary_frame(body)) {
      binary(body);
      return;
    }
    auto req = std::make_shared<Request>();
    if (auto err = parse_request(body, req.get())) {
      reply_error(req->id, *err, !authed_);
      return;
    }
    if (!authed_) {
      hello(*req);
      return;
    }
    try {
      const Operation* op = find_operation(req->op);
      if (!op) {
        reply_error(req->id, unknown_op_error(req->op));
        return;
      }
      switch (op->route) {
        case Route::kHello:
          reply_error(req->id, {ErrorType::kBadRequest, "the handshake is already done"});
          break;
        case Route::kPing:
          check_fields(req->doc, {"id", "op"}, "ping");
          queue(ok_reply(req->id, "{}"), true, false);
          break;
        case Route::kListBenchmarks:
          run_on(*server_.fast_pool, req,
                 [](const Request& r) { return ok_reply(r.id, list_benchmarks_result(r)); });
          break;
        case Route::kMake:
          make(req);
          break;
        case Route::kEnv:
        case Route::kFork:
        case Route::kClose:
          session_op(req, *op);
          break;
      }
    } catch (const RequestError& e) {
      reply_error(req->id, e.error);
    }
  }

  void hello(const Request& req) {
    const Operation* op = find_operation(req.op);
    if (!op || op->route != Route::kHello) {
      reply_error(req.id,
                  {ErrorType::kHandshakeRequired,
                   "the first request must be {\"op\":\"hello\",\"version\":" +
                       std::to_string(kProtocolVersion) + "}; closing"},
                  true);
      return;
    }
    try {
      check_fields(req.doc, {"id", "op", "version", "token", "client"}, "hello");
    } catch (const RequestError& e) {
      reply_error(req.id, e.error, true);
      return;
    }
    const json::Value* v = member(req.doc, "version");
    if (!v || !v->IsInt64() || v->GetInt64() != kProtocolVersion) {
      reply_error(req.id,
                  {ErrorType::kVersionMismatch, "this server speaks protocol version " +
                                                    std::to_string(kProtocolVersion) + "; closing"},
                  true);
      return;
    }
    if (server_.opts.token) {
      // An address that failed too often waits; until then its token is not even compared.
      if (const double wait = server_.backoff_left(address_); wait > 0) {
        ++server_.auth_failures;
        server_.log(1, "event=auth_throttled " + who() + " wait_s=" + std::to_string(wait));
        char msg[160];
        std::snprintf(msg, sizeof msg,
                      "too many failed handshakes from %s; retry in %.1f s; closing",
                      address_.c_str(), wait);
        reply_error(req.id, {ErrorType::kAuthFailed, msg}, true);
        return;
      }
      const json::Value* t = member(req.doc, "token");
      std::string_view given =
          t && t->IsString() ? std::string_view(t->GetString(), t->GetStringLength()) : "";
      if (!same_token(given, *server_.opts.token)) {
        const double wait = server_.failed_handshake(address_);
        server_.log(1, "event=auth_failed " + who() +
                           " reason=" + (t ? "wrong_token" : "no_token") +
                           (wait > 0 ? " backoff_s=" + std::to_string(wait) : ""));
        reply_error(req.id,
                    {ErrorType::kAuthFailed,
                     t ? "wrong token; closing" : "this server requires a token; closing"},
                    true);
        return;
      }
      server_.handshake_succeeded(address_);
    }
    authed_ = true;
    decoder_.set_limit(limits().max_frame_bytes);
    read_buf_.resize(kReadBytes);
    queue(ok_reply(req.id, hello_result(limits())), true, false);
  }

  // Runs `fn` on a pool and sends its reply; exceptions become internal errors.
  template <class Fn>
  void run_on(asio::thread_pool& pool, std::shared_ptr<Request> req, Fn fn) {
    asio::post(pool, [self = shared_from_this(), req, fn] { self->post_reply(guarded(*req, fn)); });
  }

  template <class Fn>
  static std::string guarded(const Request& req, Fn&& fn) {
    try {
      return fn(req);
    } catch (const RequestError& e) {
      return error_reply(req.id, e.error);
    } catch (const std::exception& e) {
      return error_reply(req.id,
                         {ErrorType::kInternal, std::string("internal error: ") + e.what()});
    }
  }

  void make(std::shared_ptr<Request> req) {
    auto self = shared_from_this();
    asio::post(*server_.fast_pool, [self, req] {
      if (self->closed_flag_) return;
      if (!self->server_.reserve_session()) {
        self->post_reply(error_reply(
            req->id,
            {ErrorType::kSessionLimit, "the server already holds " +
                                           std::to_string(self->server_.opts.limits.max_sessions) +
                                           " sessions (--max-sessions); close some first"}));
        return;
      }
      std::unique_ptr<env::Env> e;
      std::string reply = guarded(*req, [&](const Request& r) {
        e = make_env(r, self->server_.opts.policy);
        return std::string();
      });
      if (!e) {
        --self->server_.sessions_live;
        self->post_reply(std::move(reply));
        return;
      }
      self->add_session(self->server_.new_session(std::move(e)), req->id);
    });
  }

  // Registers `s` and replies with its id and spaces (runs on a worker thread).
  void add_session(std::shared_ptr<Session> s, const std::string& request_id) {
    std::string reply = ok_reply(request_id, session_result(s->id, *s->env));
    {
      std::lock_guard<std::mutex> lock(sessions_mu_);
      if (closed_flag_) return;  // the client left meanwhile: the session dies with `s`
      sessions_[s->id] = s;
    }
    server_.log(1, "event=session_start " + who() + " session=" + std::to_string(s->id) +
                       " backend=" + s->env->config().backend);
    post_reply(std::move(reply));
  }

  std::shared_ptr<Session> find_session(uint64_t id) {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    auto it = sessions_.find(id);
    return it == sessions_.end() ? nullptr : it->second;
  }

  void session_op(std::shared_ptr<Request> req, const Operation& op) {
    const uint64_t id = get_session(req->doc);
    std::shared_ptr<Session> s = find_session(id);
    if (!s) {
      reply_error(req->id,
                  {ErrorType::kUnknownSession, "no session " + std::to_string(id) +
                                                   " on this connection (sessions belong to the "
                                                   "connection that made them)"});
      return;
    }
    if (op.cheap && inline_ok(*s)) {
      // A cheap request on an idle deterministic session runs here, on the I/O thread: two
      // thread hand-offs (to a worker and back) cost more than the step itself.
      if (s->closed || !s->env) {
        reply_error(req->id, {ErrorType::kUnknownSession,
                              "session " + std::to_string(s->id) + " was closed"});
      } else {
        queue(handle_session_op(op, *s->env, *req, server_.opts.policy), true, false);
      }
      return;
    }
    auto self = shared_from_this();
    s->post([self, s, req, op = &op] {
      if (s->closed || !s->env) {
        self->post_reply(error_reply(
            req->id,
            {ErrorType::kUnknownSession, "session " + std::to_string(s->id) + " was closed"}));
        return;
      }
      if (self->closed_flag_) return;  // nobody to answer; skip the work
      switch (op->route) {
        case Route::kClose:
          self->post_reply(guarded(*req, [&](const Request& r) {
            check_fields(r.doc, {"id", "op", "session"}, "close");
            s->closed = true;
            {
              std::lock_guard<std::mutex> lock(self->sessions_mu_);
              self->sessions_.erase(s->id);
            }
            s->env.reset();
            s->release_slot();
            self->server_.log(1, "event=session_end " + self->who() +
                                     " session=" + std::to_string(s->id) + " by=client");
            return ok_reply(r.id, "{\"closed\":" + std::to_string(s->id) + "}");
          }));
          break;
        case Route::kFork:
          self->fork(*s, *req);
          break;
        case Route::kEnv:
        case Route::kHello:  // not session operations: handle_session_op refuses them
        case Route::kPing:
        case Route::kListBenchmarks:
        case Route::kMake:
          self->post_reply(handle_session_op(*op, *s->env, *req, self->server_.opts.policy));
          break;
      }
    });
  }

  // A binary step/reset frame (docs/bridge.md, "Binary frames"): every entry runs on its
  // session's strand, in parallel across sessions; one reply holds the records in entry order.
  void binary(const std::string& body) {
    BinaryRequest br;
    if (auto err = parse_binary_request(body, limits().max_sessions, &br)) {
      reply_error(body.size() >= kBinaryHeaderBytes ? std::to_string(br.id) : "null", *err);
      return;
    }
    struct Batch {
      uint32_t id;
      std::vector<std::string> records;
      std::atomic<int> left;
    };
    auto batch = std::make_shared<Batch>();
    batch->id = br.id;
    batch->records.resize(br.entries.size());
    batch->left = static_cast<int>(br.entries.size());
    if (share_binary(br)) return;
    auto self = shared_from_this();
    auto done = [self, batch] {
      if (--batch->left == 0) self->post_reply(binary_reply(batch->id, batch->records));
    };
    for (size_t i = 0; i < br.entries.size(); ++i) {
      const BinaryEntry entry = br.entries[i];
      std::shared_ptr<Session> s = find_session(entry.session);
      if (!s) {
        batch->records[i] = binary_error_record(
            {ErrorType::kUnknownSession, "no session " + std::to_string(entry.session) +
                                             " on this connection (sessions belong to the "
                                             "connection that made them)"});
        done();
        continue;
      }
      s->post([self, s, batch, i, entry, done] {
        if (s->closed || !s->env) {
          batch->records[i] = binary_error_record(
              {ErrorType::kUnknownSession, "session " + std::to_string(s->id) + " was closed"});
        } else if (!self->closed_flag_) {
          batch->records[i] = run_binary_entry(*s->env, entry);
        }
        done();
      });
    }
  }

  /// Whether the I/O thread may run a cheap request of `s` itself: a deterministic (fast)
  /// session with nothing queued, while the server inlines (ServerOptions::inline_fast).
  bool inline_ok(const Session& s) const {
    // Only while this is the one connection with requests in flight: with more, the workers run
    // them in parallel, as the I/O thread alone could not.
    return server_.opts.inline_fast && s.deterministic && s.idle() &&
           server_.busy_connections.load() <= 1;
  }

  /// A binary frame whose sessions are all distinct, idle and deterministic runs here: this
  /// thread and up to --workers helpers on the fast pool take entries in turn, and this thread
  /// replies once every entry is done. No hand-off delays the first entry, and the helpers add
  /// cores as soon as they wake. Returns false (and does nothing) when the frame does not
  /// qualify; its entries then go to their sessions' strands.
  bool share_binary(const BinaryRequest& br) {
    struct Shared {
      std::vector<BinaryEntry> entries;
      std::vector<std::shared_ptr<Session>> sessions;
      std::vector<std::string> records;
      std::atomic<size_t> next{0}, done{0};
      void run() {
        for (size_t i; (i = next++) < entries.size(); ++done)
          records[i] = sessions[i]->closed || !sessions[i]->env
                           ? binary_error_record(
                                 {ErrorType::kUnknownSession,
                                  "session " + std::to_string(sessions[i]->id) + " was closed"})
                           : run_binary_entry(*sessions[i]->env, entries[i]);
      }
    };
    auto sh = std::make_shared<Shared>();
    sh->entries = br.entries;
    for (const auto& e : br.entries) {
      std::shared_ptr<Session> s = find_session(e.session);
      if (!s || !inline_ok(*s)) return false;
      for (const auto& other : sh->sessions)
        if (other == s) return false;  // one session twice: its entries must run in order
      sh->sessions.push_back(std::move(s));
    }
    sh->records.resize(sh->entries.size());
    const size_t helpers =
        std::min(sh->entries.size() - 1, static_cast<size_t>(server_.fast_workers));
    for (size_t h = 0; h < helpers; ++h) asio::post(*server_.fast_pool, [sh] { sh->run(); });
    sh->run();
    // Entries a helper took may still be running; they are short (the helpers took them after
    // this thread started), so wait without sleeping.
    for (int spins = 0; sh->done.load() < sh->entries.size(); ++spins)
      if (spins > 64) std::this_thread::yield();
    queue(binary_reply(br.id, sh->records), true, false);
    return true;
  }

  // Runs on the parent session's strand.
  void fork(Session& parent, const Request& req) {
    try {
      check_fields(req.doc, {"id", "op", "session"}, "fork");
    } catch (const RequestError& e) {
      post_reply(error_reply(req.id, e.error));
      return;
    }
    if (!server_.reserve_session()) {
      post_reply(error_reply(
          req.id, {ErrorType::kSessionLimit, "the server already holds " +
                                                 std::to_string(limits().max_sessions) +
                                                 " sessions (--max-sessions); close some first"}));
      return;
    }
    std::unique_ptr<env::Env> forked;
    try {
      forked = parent.env->fork();
    } catch (const std::exception& e) {
      --server_.sessions_live;
      post_reply(
          error_reply(req.id, {ErrorType::kInternal, std::string("fork failed: ") + e.what()}));
      return;
    }
    add_session(server_.new_session(std::move(forked)), req.id);
  }

  // ------------------------------------------------------------ writing

  void queue(std::string body, bool answers_request, bool close_after) {
    if (closed_ || closing_) {
      if (answers_request) bump_pending(-1);
      return;
    }
    if (std::string_view(body).substr(0, 320).find(",\"ok\":false,") != std::string_view::npos)
      ++server_.error_replies;
    Outgoing o;
    const auto n = static_cast<uint32_t>(body.size());
    o.header = {static_cast<unsigned char>(n >> 24), static_cast<unsigned char>(n >> 16),
                static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n)};
    o.body = std::move(body);
    o.answers_request = answers_request;
    o.close_after = close_after;
    out_.push_back(std::move(o));
    if (close_after) closing_ = true;  // read nothing more; finish writing, then close
    do_write();
  }

  void do_write() {
    if (writing_ || out_.empty() || closed_) return;
    writing_ = true;
    write_started_ = Clock::now();
    // Everything queued goes out in one gather write.
    in_flight_ = out_.size();
    buffers_.clear();
    for (size_t i = 0; i < in_flight_; ++i) {
      buffers_.emplace_back(out_[i].header.data(), out_[i].header.size());
      buffers_.emplace_back(out_[i].body.data(), out_[i].body.size());
      if (out_[i].close_after) {
        in_flight_ = i + 1;
        break;
      }
    }
    asio::async_write(socket_, buffers_,
                      [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                        self->on_written(ec);
                      });
  }

  void on_written(const boost::system::error_code& ec) {
    writing_ = false;
    if (closed_) return;
    if (ec) {
      close();
      return;
    }
    bool close_now = false;
    for (size_t i = 0; i < in_flight_; ++i) {
      if (out_.front().answers_request) bump_pending(-1);
      close_now = close_now || out_.front().close_after;
      out_.pop_front();
    }
    last_activity_ = Clock::now();
    if (close_now) {
      linger();
      return;
    }
    do_write();
    if (peer_done_ && pending_ == 0 && out_.empty() && !writing_) {
      close();  // every reply the half-closed client was owed has gone out
      return;
    }
    process_frames();  // frames held back by the pending limit
    do_read();
  }

  // After a closing reply: send FIN, then discard input briefly so the client reads the reply
  // instead of a reset caused by the bytes we never read.
  void linger() {
    lingering_ = true;
    linger_started_ = Clock::now();
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    drain();
  }

  void drain() {
    if (closed_) return;
    socket_.async_read_some(
        asio::buffer(read_buf_),
        [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
          self->drained_ += n;
          if (ec || self->drained_ > (64u << 20)) {
            self->close();
          } else {
            self->drain();
          }
        });
  }

  // ------------------------------------------------------------ timeouts

  void arm_timer() {
    timer_.expires_after(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(server_.tick_s)));
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->on_tick();
    });
  }

  void on_tick() {
    if (closed_) return;
    const Limits& l = limits();
    if (lingering_) {
      if (seconds_since(linger_started_) > 2.0) {
        close();
        return;
      }
    } else if (writing_ && l.frame_timeout_s > 0 &&
               seconds_since(write_started_) > std::max(l.frame_timeout_s, 5.0)) {
      close();  // the client stopped reading its replies
      return;
    } else if (!closing_) {
      if (!authed_ && l.frame_timeout_s > 0 && seconds_since(connected_) > l.frame_timeout_s) {
        timeout("no handshake within " + std::to_string(l.frame_timeout_s) +
                " s (--frame-timeout)");
      } else if (frame_clock_ && reading_ && l.frame_timeout_s > 0 &&
                 seconds_since(frame_started_) > l.frame_timeout_s) {
        timeout("a frame started " + std::to_string(l.frame_timeout_s) +
                " s ago never finished (--frame-timeout)");
      } else if (l.idle_timeout_s > 0 && pending_ == 0 && !frame_clock_ &&
                 seconds_since(last_activity_) > l.idle_timeout_s) {
        timeout("no request for " + std::to_string(l.idle_timeout_s) + " s (--idle-timeout)");
      }
    }
    arm_timer();
  }

  void timeout(const std::string& why) {
    server_.log(1, "event=timeout " + who() + " authenticated=" + (authed_ ? "1" : "0") +
                       " reason=\"" + why + "\"");
    queue(error_reply("null", {ErrorType::kIdleTimeout, why + "; closing"}), false, true);
  }

  Server::Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  FrameDecoder decoder_;
  std::vector<char> read_buf_;
  Clock::time_point connected_, last_activity_, frame_started_, write_started_, linger_started_;
  bool reading_ = false, writing_ = false, closed_ = false, closing_ = false, lingering_ = false;
  bool authed_ = false, frame_clock_ = false, paused_ = false;
  bool peer_done_ = false;  // the client half-closed: answer what it sent, then close
  uint64_t id_;
  std::string address_, peer_;
  static constexpr size_t kPreauthReadBytes = 4096, kReadBytes = 64 << 10;
  int pending_ = 0;  // requests received whose replies are not yet written (bump_pending)

  // Keeps Server::Impl::busy_connections (connections with a request in flight) in step.
  void bump_pending(int d) {
    const bool was = pending_ > 0;
    pending_ += d;
    const bool is = pending_ > 0;
    if (is && !was) ++server_.busy_connections;
    if (was && !is) --server_.busy_connections;
  }
  uint64_t drained_ = 0;
  std::deque<Outgoing> out_;
  size_t in_flight_ = 0;
  std::vector<asio::const_buffer> buffers_;

  // Shared with worker threads.
  std::mutex sessions_mu_;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_;
  std::atomic<bool> closed_flag_{false};
};

void Server::Impl::do_accept() {
  acceptor.async_accept(asio::make_strand(io),
                        [this](const boost::system::error_code& ec, tcp::socket socket) {
                          if (!acceptor.is_open()) return;
                          if (ec) {
                            // Out of descriptors or similar: pause rather than spin.
                            accept_pause.expires_after(std::chrono::milliseconds(100));
                            accept_pause.async_wait([this](const boost::system::error_code& e) {
                              if (!e) do_accept();
                            });
                            return;
                          }
                          boost::system::error_code ignored;
                          socket.set_option(tcp::no_delay(true), ignored);
                          const uint64_t id = ++connections_accepted;
                          // Full: the longest-waiting connection without a handshake makes
                          // room; only when every one has shaken hands is the newcomer refused.
                          bool busy = connections_open.load() >= opts.limits.max_connections;
                          if (busy && evict_unauthenticated()) busy = false;
                          ++connections_open;
                          auto c = std::make_shared<Connection>(*this, std::move(socket), id);
                          {
                            std::lock_guard<std::mutex> lock(conns_mu);
                            conns[c.get()] = c;
                          }
                          c->start(busy);
                          do_accept();
                        });
}

bool Server::Impl::evict_unauthenticated() {
  std::shared_ptr<Connection> oldest;
  {
    std::lock_guard<std::mutex> lock(conns_mu);
    for (auto& [p, w] : conns) {
      auto c = w.lock();
      if (!c || c->authenticated()) continue;
      if (!oldest || c->connected_at() < oldest->connected_at()) oldest = c;
    }
  }
  if (!oldest) return false;
  ++evicted;
  oldest->evict();
  return true;
}

void Server::Impl::shutdown() {
  {
    std::lock_guard<std::mutex> lock(stop_mu);
    if (stopped) return;
    stopped = true;
    stop_requested = true;
    stop_cv.notify_all();
  }
  // Close the listener and every connection on the loop, then stop it; running requests
  // finish on the pools and their replies are dropped.
  asio::post(io, [this] {
    boost::system::error_code ec;
    acceptor.close(ec);
    accept_pause.cancel();
    std::vector<std::shared_ptr<Connection>> all;
    {
      std::lock_guard<std::mutex> lock(conns_mu);
      for (auto& [p, w] : conns)
        if (auto c = w.lock()) all.push_back(c);
    }
    for (auto& c : all) c->close_now();
    io.stop();
  });
  work.reset();
  if (io_thread.joinable()) io_thread.join();
  fast_pool->stop();
  measure_pool->stop();
  fast_pool->join();
  measure_pool->join();
}

// ---------------------------------------------------------------- Server

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { impl_->shutdown(); }

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  auto a = asio::ip::make_address(host, ec);
  if (ec) return false;
  if (a.is_v4()) return a.to_v4().is_loopback();
  auto v6 = a.to_v6();
  if (v6.is_v4_mapped()) return asio::ip::make_address_v4(asio::ip::v4_mapped, v6).is_loopback();
  return v6.is_loopback();
}

ir::Result<std::unique_ptr<Server>> Server::start(const ServerOptions& options) {
  auto fail = [](const std::string& m) {
    return std::vector<ir::Diagnostic>{{{"serve", 0, 0}, m}};
  };
  const Limits& l = options.limits;
  if (l.max_frame_bytes < 64) return fail("--max-frame-bytes must be at least 64");
  if (l.max_sessions < 1 || l.max_connections < 1 || l.max_pending < 1)
    return fail("--max-sessions, --max-connections and the pending limit must be positive");
  if (l.idle_timeout_s < 0 || l.frame_timeout_s < 0) return fail("timeouts must not be negative");
  if (options.host.empty())
    return fail("the host is empty; give an address to bind (127.0.0.1 for this machine only)");
  if (l.max_preauth_frame_bytes < 64) return fail("the handshake frame limit must be at least 64");

  auto impl = std::make_unique<Impl>(options);
  const int cpus = backends::usable_cores();
  const int fast = options.workers > 0 ? options.workers : cpus;
  const int measure = options.measure_workers > 0 ? options.measure_workers : std::max(1, cpus / 2);
  impl->fast_pool = std::make_unique<asio::thread_pool>(fast);
  impl->fast_workers = fast;
  if (impl->opts.poll_us < 0) impl->opts.poll_us = cpus >= 2 ? 200 : 0;
  impl->measure_pool = std::make_unique<asio::thread_pool>(measure);
  double shortest = 1.0;
  if (l.idle_timeout_s > 0) shortest = std::min(shortest, l.idle_timeout_s / 4);
  if (l.frame_timeout_s > 0) shortest = std::min(shortest, l.frame_timeout_s / 4);
  impl->tick_s = std::max(0.01, shortest);

  boost::system::error_code ec;
  tcp::endpoint endpoint;
  auto addr = asio::ip::make_address(options.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(addr, options.port);
  } else {
    tcp::resolver resolver(impl->io);
    auto found = resolver.resolve(options.host, std::to_string(options.port), ec);
    if (ec || found.empty())
      return fail("cannot resolve host '" + options.host + "': " + ec.message());
    endpoint = *found.begin();
  }
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return fail("cannot listen on " + options.host + ":" + std::to_string(options.port) + ": " +
                ec.message());
  }
  impl->work.emplace(impl->io.get_executor());
  impl->do_accept();
  Impl* raw = impl.get();
  impl->io_thread = std::thread([raw] {
    for (;;) {
      try {
        raw->run_loop();
        return;
      } catch (const std::exception&) {
        // A handler threw: that is our bug, but one connection's bug must not stop the others.
      }
    }
  });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

std::string endpoint_text(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string Server::host() const { return impl_->acceptor.local_endpoint().address().to_string(); }

uint16_t Server::port() const { return impl_->acceptor.local_endpoint().port(); }

void Server::wait(bool handle_signals) {
  std::optional<asio::signal_set> signals;
  if (handle_signals) {
    signals.emplace(impl_->io, SIGINT, SIGTERM);
    signals->async_wait([this](const boost::system::error_code& ec, int) {
      if (!ec) impl_->request_stop();
    });
  }
  {
    std::unique_lock<std::mutex> lock(impl_->stop_mu);
    impl_->stop_cv.wait(lock, [this] { return impl_->stop_requested; });
  }
  impl_->shutdown();
}

void Server::stop() { impl_->request_stop(); }

ServerStats Server::stats() const {
  ServerStats s;
  s.connections_accepted = impl_->connections_accepted;
  s.connections_open = impl_->connections_open;
  s.sessions_live = impl_->sessions_live;
  s.requests = impl_->requests;
  s.error_replies = impl_->error_replies;
  s.evicted_unauthenticated = impl_->evicted;
  s.auth_failures = impl_->auth_failures;
  return s;
}

}  // namespace perfdojo::bridge
