#include "bridge/dispatch.h"

#include <cmath>
#include <cstdio>
#include <thread>

namespace perfdojo::bridge {

namespace asio = boost::asio;

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

// fn(req)'s reply; exceptions become error replies.
template <class Fn>
std::string guarded(const Request& req, Fn&& fn) {
  try {
    return fn(req);
  } catch (const RequestError& e) {
    return error_reply(req.id, e.error);
  } catch (const std::exception& e) {
    return error_reply(req.id, {ErrorType::kInternal, std::string("internal error: ") + e.what()});
  }
}

}  // namespace

// ---------------------------------------------------------------- ServerContext

bool ServerContext::reserve_session() {
  int n = sessions_live.load();
  while (n < opts.limits.max_sessions)
    if (sessions_live.compare_exchange_weak(n, n + 1)) return true;
  return false;
}

std::shared_ptr<Session> ServerContext::new_session(std::unique_ptr<env::Env> e) {
  asio::thread_pool& pool = e->deterministic() ? *fast_pool : *measure_pool;
  return std::make_shared<Session>(next_session++, std::move(e),
                                   asio::make_strand(pool.get_executor()), sessions_live);
}

void ServerContext::log(int level, const std::string& line) const {
  if (level > opts.log_level) return;
  if (opts.log) {
    opts.log("perfdojo-bridge " + line);
  } else {
    std::string l = "perfdojo-bridge " + line + "\n";
    std::fwrite(l.data(), 1, l.size(), stderr);
  }
}

double ServerContext::backoff_left(const std::string& address) {
  auto it = failures_.find(address);
  if (it == failures_.end()) return 0;
  return std::max(0.0, std::chrono::duration<double>(it->second.until - Clock::now()).count());
}

double ServerContext::failed_handshake(const std::string& address) {
  ++auth_failures;
  if (failures_.size() >= kMaxFailureEntries && !failures_.count(address)) {
    auto oldest = failures_.begin();
    for (auto it = failures_.begin(); it != failures_.end(); ++it)
      if (it->second.last < oldest->second.last) oldest = it;
    failures_.erase(oldest);
  }
  Failures& f = failures_[address];
  ++f.count;
  f.last = Clock::now();
  const int over = f.count - opts.limits.auth_failures_before_backoff;
  if (over < 0) return 0;
  const double wait = std::min(60.0, 0.1 * std::pow(2.0, std::min(over, 20)));
  f.until =
      f.last + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait));
  return wait;
}

// ---------------------------------------------------------------- Dispatcher

void Dispatcher::reply_error(const std::string& id, const Error& e, bool close_after) {
  owner_.reply(error_reply(id, e), close_after);
}

void Dispatcher::close() {
  std::map<uint64_t, std::shared_ptr<Session>> sessions;
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    closed_ = true;
    sessions.swap(sessions_);
  }
  for (auto& entry : sessions) {
    std::shared_ptr<Session> s = entry.second;
    server_.log(1, "event=session_end " + owner_.who() + " session=" + std::to_string(s->id) +
                       " by=disconnect");
    s->closed = true;
    // Destroy the env on its own strand, after whatever request is running there.
    s->post([s] { s->env.reset(); });
  }
}

template <class Fn>
void Dispatcher::run_on(asio::thread_pool& pool, std::shared_ptr<Request> req, Fn fn) {
  asio::post(pool, [this, keep = owner_.hold(), req, fn] { owner_.post_reply(guarded(*req, fn)); });
}

void Dispatcher::frame(const std::string& body) {
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
        owner_.reply(ok_reply(req->id, "{}"), false);
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

void Dispatcher::hello(const Request& req) {
  const Operation* op = find_operation(req.op);
  if (!op || op->route != Route::kHello) {
    reply_error(
        req.id,
        {ErrorType::kHandshakeRequired, "the first request must be {\"op\":\"hello\",\"version\":" +
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
    if (const double wait = server_.backoff_left(owner_.address()); wait > 0) {
      ++server_.auth_failures;
      server_.log(1, "event=auth_throttled " + owner_.who() + " wait_s=" + std::to_string(wait));
      char msg[160];
      std::snprintf(msg, sizeof msg, "too many failed handshakes from %s; retry in %.1f s; closing",
                    owner_.address().c_str(), wait);
      reply_error(req.id, {ErrorType::kAuthFailed, msg}, true);
      return;
    }
    const json::Value* t = member(req.doc, "token");
    std::string_view given =
        t && t->IsString() ? std::string_view(t->GetString(), t->GetStringLength()) : "";
    if (!same_token(given, *server_.opts.token)) {
      const double wait = server_.failed_handshake(owner_.address());
      server_.log(1, "event=auth_failed " + owner_.who() +
                         " reason=" + (t ? "wrong_token" : "no_token") +
                         (wait > 0 ? " backoff_s=" + std::to_string(wait) : ""));
      reply_error(req.id,
                  {ErrorType::kAuthFailed,
                   t ? "wrong token; closing" : "this server requires a token; closing"},
                  true);
      return;
    }
    server_.handshake_succeeded(owner_.address());
  }
  authed_ = true;
  owner_.handshake_done();
  owner_.reply(ok_reply(req.id, hello_result(limits())), false);
}

void Dispatcher::make(std::shared_ptr<Request> req) {
  auto keep = owner_.hold();
  asio::post(*server_.fast_pool, [this, keep, req] {
    if (closed_) return;
    if (!server_.reserve_session()) {
      owner_.post_reply(error_reply(
          req->id, {ErrorType::kSessionLimit, "the server already holds " +
                                                  std::to_string(server_.opts.limits.max_sessions) +
                                                  " sessions (--max-sessions); close some first"}));
      return;
    }
    std::unique_ptr<env::Env> e;
    std::string reply = guarded(*req, [&](const Request& r) {
      e = make_env(r, server_.opts.policy);
      return std::string();
    });
    if (!e) {
      --server_.sessions_live;
      owner_.post_reply(std::move(reply));
      return;
    }
    add_session(server_.new_session(std::move(e)), req->id);
  });
}

// Registers `s` and replies with its id and spaces (runs on a worker thread).
void Dispatcher::add_session(std::shared_ptr<Session> s, const std::string& request_id) {
  std::string reply = ok_reply(request_id, session_result(s->id, *s->env));
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    if (closed_) return;  // the client left meanwhile: the session dies with `s`
    sessions_[s->id] = s;
  }
  server_.log(1, "event=session_start " + owner_.who() + " session=" + std::to_string(s->id) +
                     " backend=" + s->env->config().backend);
  owner_.post_reply(std::move(reply));
}

std::shared_ptr<Session> Dispatcher::find_session(uint64_t id) {
  std::lock_guard<std::mutex> lock(sessions_mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

void Dispatcher::session_op(std::shared_ptr<Request> req, const Operation& op) {
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
      reply_error(req->id,
                  {ErrorType::kUnknownSession, "session " + std::to_string(s->id) + " was closed"});
    } else {
      owner_.reply(handle_session_op(op, *s->env, *req, server_.opts.policy), false);
    }
    return;
  }
  auto keep = owner_.hold();
  s->post([this, keep, s, req, op = &op] {
    if (s->closed || !s->env) {
      owner_.post_reply(error_reply(req->id, {ErrorType::kUnknownSession,
                                              "session " + std::to_string(s->id) + " was closed"}));
      return;
    }
    if (closed_) return;  // nobody to answer; skip the work
    switch (op->route) {
      case Route::kClose:
        owner_.post_reply(guarded(*req, [&](const Request& r) {
          check_fields(r.doc, {"id", "op", "session"}, "close");
          s->closed = true;
          {
            std::lock_guard<std::mutex> lock(sessions_mu_);
            sessions_.erase(s->id);
          }
          s->env.reset();
          s->release_slot();
          server_.log(1, "event=session_end " + owner_.who() + " session=" + std::to_string(s->id) +
                             " by=client");
          return ok_reply(r.id, "{\"closed\":" + std::to_string(s->id) + "}");
        }));
        break;
      case Route::kFork:
        fork(*s, *req);
        break;
      case Route::kEnv:
      case Route::kHello:  // not session operations: handle_session_op refuses them
      case Route::kPing:
      case Route::kListBenchmarks:
      case Route::kMake:
        owner_.post_reply(handle_session_op(*op, *s->env, *req, server_.opts.policy));
        break;
    }
  });
}

// A binary step/reset frame (docs/bridge.md, "Binary frames"): every entry runs on its
// session's strand, in parallel across sessions; one reply holds the records in entry order.
void Dispatcher::binary(const std::string& body) {
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
  auto keep = owner_.hold();
  auto done = [this, keep, batch] {
    if (--batch->left == 0) owner_.post_reply(binary_reply(batch->id, batch->records));
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
    s->post([this, keep, s, batch, i, entry, done] {
      if (s->closed || !s->env) {
        batch->records[i] = binary_error_record(
            {ErrorType::kUnknownSession, "session " + std::to_string(s->id) + " was closed"});
      } else if (!closed_) {
        batch->records[i] = run_binary_entry(*s->env, entry);
      }
      done();
    });
  }
}

/// Whether the I/O thread may run a cheap request of `s` itself: a deterministic (fast)
/// session with nothing queued, while the server inlines (ServerOptions::inline_fast).
bool Dispatcher::inline_ok(const Session& s) const {
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
bool Dispatcher::share_binary(const BinaryRequest& br) {
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
  owner_.reply(binary_reply(br.id, sh->records), false);
  return true;
}

// Runs on the parent session's strand.
void Dispatcher::fork(Session& parent, const Request& req) {
  try {
    check_fields(req.doc, {"id", "op", "session"}, "fork");
  } catch (const RequestError& e) {
    owner_.post_reply(error_reply(req.id, e.error));
    return;
  }
  if (!server_.reserve_session()) {
    owner_.post_reply(error_reply(
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
    owner_.post_reply(
        error_reply(req.id, {ErrorType::kInternal, std::string("fork failed: ") + e.what()}));
    return;
  }
  add_session(server_.new_session(std::move(forked)), req.id);
}

}  // namespace perfdojo::bridge
