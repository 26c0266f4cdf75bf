#include "bridge/server.h"

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "backends/backend.h"
#include "bridge/dispatch.h"
#include "bridge/reader.h"
#include "bridge/writer.h"

namespace perfdojo::bridge {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class Connection;

// The server: the shared state of ServerContext, the listener and the I/O loop.
struct Server::Impl : ServerContext {
  explicit Impl(ServerOptions o) : ServerContext(std::move(o)) {}

  // Plain state first (ServerContext's too): it must outlive the handlers that io and the
  // pools destroy last.
  double tick_s = 1;
  std::atomic<int> connections_open{0};
  std::atomic<uint64_t> connections_accepted{0}, requests{0}, error_replies{0};
  std::atomic<uint64_t> evicted{0};
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
  std::unique_ptr<asio::thread_pool> fast_pool_owned, measure_pool_owned;  // ServerContext's pools
  std::thread io_thread;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;

  void do_accept();
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

// One client connection: the wiring of its Reader (frames in), Dispatcher (what they ask) and
// Writer (replies out), with the timer of its timeouts. Socket, timer and all three run on the
// connection's strand; workers hand replies back through post_reply.
class Connection : public std::enable_shared_from_this<Connection>,
                   private ReaderOwner,
                   private WriterOwner,
                   private DispatchOwner {
 public:
  Connection(Server::Impl& server, tcp::socket socket, uint64_t id)
      : server_(server),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        connected_(Clock::now()),
        // Before the handshake a client gets a few KiB: a thousand of them cost megabytes.
        reader_(socket_, *this, server.opts.limits,
                std::min(server.opts.limits.max_preauth_frame_bytes,
                         server.opts.limits.max_frame_bytes),
                connected_),
        writer_(socket_, *this),
        dispatcher_(server, *this),
        id_(id) {
    boost::system::error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    address_ = ec ? "?" : ep.address().to_string();
    peer_ = ec ? "?" : endpoint_text(address_, ep.port());
  }

  bool authenticated() const override { return dispatcher_.authenticated(); }
  Clock::time_point connected_at() const { return connected_; }
  /// "conn=N peer=ADDR:PORT", for log lines.
  std::string who() const override { return "conn=" + std::to_string(id_) + " peer=" + peer_; }

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
    reader_.read();
  }

  /// Sends a reply to a request from any thread.
  void post_reply(std::string body) override {
    asio::post(socket_.get_executor(), [self = shared_from_this(), b = std::move(body)]() mutable {
      self->queue(std::move(b), true, false);
    });
  }

  /// Closes the socket at once and releases the sessions (after their running requests).
  void close() override {
    if (closed_) return;
    closed_ = true;
    server_.log(2, "event=closed " + who());
    boost::system::error_code ec;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    dispatcher_.close();
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
  const Limits& limits() const { return server_.opts.limits; }

  // ------------------------------------------------------------ what the parts share

  std::shared_ptr<void> hold() override { return shared_from_this(); }
  bool closed() const override { return closed_; }
  int pending() const override { return pending_; }
  const std::string& address() const override { return address_; }

  // ------------------------------------------------------------ from the reader

  bool read_stopped() const override { return closed_ || writer_.closing(); }
  bool owes_replies() const override { return pending_ > 0 || writer_.busy(); }
  void read_ended() override { close(); }

  void frame(const std::string& body) override {
    bump_pending(+1);
    ++server_.requests;
    dispatcher_.frame(body);
  }

  void frame_too_large() override {
    bump_pending(+1);
    const bool authed = authenticated();
    server_.log(
        1, "event=frame_too_large " + who() + " bytes=" + std::to_string(reader_.refused_length()) +
               " limit=" + std::to_string(reader_.limit()) + (authed ? "" : " before_handshake=1"));
    Error e{ErrorType::kFrameTooLarge,
            "frame of " + std::to_string(reader_.refused_length()) +
                " bytes exceeds the limit of " + std::to_string(reader_.limit()) +
                (authed ? " (--max-frame-bytes)" : " before the handshake") +
                "; closing the connection"};
    queue(error_reply("null", e), true, true);
  }

  // ------------------------------------------------------------ from the dispatcher

  void reply(std::string body, bool close_after) override {
    queue(std::move(body), true, close_after);
  }
  void handshake_done() override { reader_.authenticated(limits().max_frame_bytes); }

  // ------------------------------------------------------------ from the writer

  void replied() override { bump_pending(-1); }

  void written() override {
    if (reader_.peer_done() && pending_ == 0 && !writer_.busy()) {
      close();  // every reply the half-closed client was owed has gone out
      return;
    }
    reader_.process();  // frames held back by the pending limit
    reader_.read();
  }

  // ------------------------------------------------------------ writing

  void queue(std::string body, bool answers_request, bool close_after) {
    if (!closed_ && !writer_.closing() &&
        std::string_view(body).substr(0, 320).find(",\"ok\":false,") != std::string_view::npos)
      ++server_.error_replies;
    writer_.queue(std::move(body), answers_request, close_after);
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
    if (writer_.stuck(limits())) {
      close();  // the linger is over, or the client stopped reading its replies
      return;
    }
    if (!writer_.closing()) {
      const std::string why = reader_.overdue(std::max(reader_.last_frame(), writer_.last_write()));
      if (!why.empty()) timeout(why);
    }
    arm_timer();
  }

  void timeout(const std::string& why) {
    server_.log(1, "event=timeout " + who() + " authenticated=" + (authenticated() ? "1" : "0") +
                       " reason=\"" + why + "\"");
    queue(error_reply("null", {ErrorType::kIdleTimeout, why + "; closing"}), false, true);
  }

  // Keeps Server::Impl::busy_connections (connections with a request in flight) in step.
  void bump_pending(int d) {
    const bool was = pending_ > 0;
    pending_ += d;
    const bool is = pending_ > 0;
    if (is && !was) ++server_.busy_connections;
    if (was && !is) --server_.busy_connections;
  }

  Server::Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  Clock::time_point connected_;
  Reader reader_;
  Writer writer_;
  Dispatcher dispatcher_;
  uint64_t id_;
  std::string address_, peer_;
  bool closed_ = false;
  int pending_ = 0;  // requests received whose replies are not yet written (bump_pending)
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
  impl->fast_pool_owned = std::make_unique<asio::thread_pool>(fast);
  impl->fast_pool = impl->fast_pool_owned.get();
  impl->fast_workers = fast;
  if (impl->opts.poll_us < 0) impl->opts.poll_us = cpus >= 2 ? 200 : 0;
  impl->measure_pool_owned = std::make_unique<asio::thread_pool>(measure);
  impl->measure_pool = impl->measure_pool_owned.get();
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
