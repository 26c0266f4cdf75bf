// The server over real sockets on 127.0.0.1: handshake, token, limits and bad clients. Each test
// starts its own server on a free port.
#include "bridge/server.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "bridge/handlers.h"
#include "bridge/protocol.h"

using namespace perfdojo;
using namespace perfdojo::bridge;

namespace {

// A blocking test client. Every read waits at most `timeout_ms`.
class TestClient {
 public:
  explicit TestClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~TestClient() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send_raw(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;  // the server may have closed; the reply check will say so
      off += static_cast<size_t>(n);
    }
  }
  void send(const std::string& body) { send_raw(encode_frame(body)); }
  // Half-close: no more requests, replies still welcome.
  void shutdown_send() { ::shutdown(fd_, SHUT_WR); }
  // The next frame's body, or "" when the connection closed or nothing came in time.
  std::string recv(int timeout_ms = 5000) {
    std::string header = read_exact(4, timeout_ms);
    if (header.size() < 4) return "";
    uint32_t n = decode_frame_length(reinterpret_cast<const unsigned char*>(header.data()));
    return read_exact(n, timeout_ms);
  }
  std::string call(const std::string& body) {
    send(body);
    return recv();
  }
  // True when the server closed the connection (EOF) within the time.
  bool closed_by_server(int timeout_ms = 5000) {
    pollfd p{fd_, POLLIN, 0};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      if (::poll(&p, 1, 50) > 0) {
        char buf[4096];
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) return true;
      }
    }
    return false;
  }

 private:
  std::string read_exact(size_t n, int timeout_ms) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (out.size() < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[65536];
      ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) return out;
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }
  int fd_ = -1;
};

std::unique_ptr<Server> start(ServerOptions o = {}) {
  if (!o.log) o.log_level = 0;  // tests that read the log give a sink
  o.host = "127.0.0.1";
  o.port = 0;
  o.workers = 2;
  o.measure_workers = 1;
  auto s = Server::start(o);
  REQUIRE_MESSAGE(s.ok(), s.error_text());
  return std::move(s).value();
}

json::Document parse(const std::string& text) {
  json::Document d;
  d.Parse(text.c_str(), text.size());
  REQUIRE_MESSAGE(!d.HasParseError(), text);
  return d;
}

std::string error_type(const std::string& reply) {
  REQUIRE_MESSAGE(!reply.empty(), "no reply");
  json::Document d = parse(reply);
  if (d["ok"].GetBool()) return "";
  return d["error"]["type"].GetString();
}

const char* kHello = "{\"id\":0,\"op\":\"hello\",\"version\":1}";

uint64_t make_session(TestClient& c) {
  json::Document d = parse(c.call(
      "{\"id\":1,\"op\":\"make\",\"config\":{\"benchmark\":\"perfdojo://gen/softmax?seed=1\"}}"));
  REQUIRE(d["ok"].GetBool());
  return d["result"]["session"].GetUint64();
}

// Waits until `pred` holds (bounded).
template <class Pred>
bool eventually(Pred pred, int timeout_ms = 5000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace

TEST_CASE("port 0 picks a free port on loopback and a client can play an episode") {
  auto server = start();
  CHECK(server->port() != 0);
  CHECK(server->host() == "127.0.0.1");
  TestClient c(server->port());
  json::Document hello = parse(c.call(kHello));
  REQUIRE(hello["ok"].GetBool());
  // The optional request fields this version added are named, so a client can ask the server.
  const auto& ext = hello["result"]["extensions"];
  REQUIRE(ext.IsArray());
  REQUIRE(ext.Size() == 1);
  CHECK(std::string(ext[0].GetString()) == "observation_format");
  uint64_t s = make_session(c);
  CHECK(error_type(c.call("{\"id\":2,\"op\":\"reset\",\"session\":" + std::to_string(s) +
                          ",\"seed\":3}")) == "");
  json::Document step = parse(
      c.call("{\"id\":\"x\",\"op\":\"step\",\"session\":" + std::to_string(s) + ",\"action\":0}"));
  CHECK(std::string(step["id"].GetString()) == "x");
  CHECK(step["ok"].GetBool());
  CHECK(error_type(c.call("{\"id\":4,\"op\":\"close\",\"session\":" + std::to_string(s) + "}")) ==
        "");
  CHECK(error_type(c.call("{\"id\":5,\"op\":\"reset\",\"session\":" + std::to_string(s) + "}")) ==
        "unknown_session");
}

TEST_CASE("every operation of the table is routed; an unknown one is refused listing them") {
  auto server = start();
  TestClient c(server->port());
  json::Document hello = parse(c.call(kHello));
  REQUIRE(hello["ok"].GetBool());
  CHECK(hello["result"]["operations"].Size() == operations().size());
  const uint64_t s = make_session(c);
  // Every session operation reaches its handler: a bad field is that handler's bad_request,
  // never unknown_op.
  for (const Operation& o : operations()) {
    if (!o.session) continue;
    CAPTURE(o.name);
    const std::string reply =
        c.call("{\"id\":7,\"op\":\"" + std::string(o.name) + "\",\"session\":" + std::to_string(s) +
               ",\"no_such_field\":1}");
    CHECK(error_type(reply) == "bad_request");
    CHECK(reply.find(o.name) != std::string::npos);
  }
  CHECK(error_type(c.call("{\"id\":8,\"op\":\"ping\"}")) == "");
  CHECK(error_type(c.call(kHello)) == "bad_request");  // the handshake is done
  const std::string unknown = c.call("{\"id\":9,\"op\":\"frobnicate\"}");
  CHECK(error_type(unknown) == "unknown_op");
  CHECK(parse(unknown)["error"]["message"].GetString() == unknown_op_error("frobnicate").message);
}

TEST_CASE("the first message must be a hello of the right version") {
  auto server = start();
  {
    TestClient c(server->port());
    CHECK(error_type(c.call("{\"id\":1,\"op\":\"ping\"}")) == "handshake_required");
    CHECK(c.closed_by_server());
  }
  {
    TestClient c(server->port());
    CHECK(error_type(c.call("{\"id\":1,\"op\":\"hello\",\"version\":2}")) == "version_mismatch");
    CHECK(c.closed_by_server());
  }
  {
    TestClient c(server->port());
    CHECK(error_type(c.call("not json")) == "invalid_json");
    CHECK(c.closed_by_server());
  }
}

TEST_CASE("a server with a token refuses clients without it") {
  ServerOptions o;
  o.token = "s3cret";
  auto server = start(o);
  {
    TestClient c(server->port());
    CHECK(error_type(c.call(kHello)) == "auth_failed");
    CHECK(c.closed_by_server());
  }
  {
    TestClient c(server->port());
    CHECK(error_type(c.call("{\"id\":0,\"op\":\"hello\",\"version\":1,\"token\":\"s3cre\"}")) ==
          "auth_failed");
  }
  TestClient c(server->port());
  CHECK(error_type(c.call("{\"id\":0,\"op\":\"hello\",\"version\":1,\"token\":\"s3cret\"}")) == "");
}

TEST_CASE("an oversized frame is answered and closed while other clients carry on") {
  ServerOptions o;
  o.limits.max_frame_bytes = 1000;
  auto server = start(o);
  TestClient good(server->port());
  CHECK(error_type(good.call(kHello)) == "");
  uint64_t s = make_session(good);
  TestClient bad(server->port());
  CHECK(error_type(bad.call(kHello)) == "");
  bad.send(std::string(5000, ' '));
  CHECK(error_type(bad.recv()) == "frame_too_large");
  CHECK(bad.closed_by_server());
  CHECK(error_type(
            good.call("{\"id\":2,\"op\":\"reset\",\"session\":" + std::to_string(s) + "}")) == "");
}

TEST_CASE("sessions belong to their connection and vanish with it") {
  auto server = start();
  TestClient a(server->port()), b(server->port());
  CHECK(error_type(a.call(kHello)) == "");
  CHECK(error_type(b.call(kHello)) == "");
  uint64_t s = make_session(a);
  CHECK(error_type(b.call("{\"id\":2,\"op\":\"reset\",\"session\":" + std::to_string(s) + "}")) ==
        "unknown_session");
  CHECK(server->stats().sessions_live == 1);
  a.close();
  CHECK(eventually([&] { return server->stats().sessions_live == 0; }));
  CHECK(error_type(b.call("{\"id\":3,\"op\":\"ping\"}")) == "");
}

TEST_CASE("max_sessions bounds make and fork; closing frees a slot") {
  ServerOptions o;
  o.limits.max_sessions = 2;
  auto server = start(o);
  TestClient c(server->port());
  CHECK(error_type(c.call(kHello)) == "");
  uint64_t s1 = make_session(c);
  CHECK(error_type(c.call("{\"id\":2,\"op\":\"fork\",\"session\":" + std::to_string(s1) + "}")) ==
        "");
  CHECK(error_type(c.call("{\"id\":3,\"op\":\"make\"}")) == "session_limit");
  CHECK(error_type(c.call("{\"id\":4,\"op\":\"fork\",\"session\":" + std::to_string(s1) + "}")) ==
        "session_limit");
  CHECK(error_type(c.call("{\"id\":5,\"op\":\"close\",\"session\":" + std::to_string(s1) + "}")) ==
        "");
  CHECK(error_type(c.call("{\"id\":6,\"op\":\"make\"}")) == "");
}

TEST_CASE("a frame that never finishes is timed out") {
  ServerOptions o;
  o.limits.frame_timeout_s = 0.3;
  auto server = start(o);
  TestClient c(server->port());
  CHECK(error_type(c.call(kHello)) == "");
  c.send_raw(std::string("\0\0\0\x10{\"id\"", 9));  // 16 bytes promised, 5 sent
  CHECK(error_type(c.recv(3000)) == "idle_timeout");
  CHECK(c.closed_by_server());
}

TEST_CASE("a client vanishing mid-request harms nobody") {
  auto server = start();
  TestClient keep(server->port());
  CHECK(error_type(keep.call(kHello)) == "");
  uint64_t s = make_session(keep);
  for (int i = 0; i < 5; ++i) {
    TestClient gone(server->port());
    gone.send(kHello);
    gone.send("{\"id\":1,\"op\":\"make\"}");
    gone.send("{\"id\":2,\"op\":\"step\",\"session\":1,\"action\":0}");
    gone.close();
  }
  CHECK(error_type(
            keep.call("{\"id\":2,\"op\":\"reset\",\"session\":" + std::to_string(s) + "}")) == "");
  CHECK(eventually([&] { return server->stats().sessions_live == 1; }));
}

TEST_CASE("max_connections turns the extra client away with server_busy") {
  ServerOptions o;
  o.limits.max_connections = 1;
  auto server = start(o);
  TestClient first(server->port());
  CHECK(error_type(first.call(kHello)) == "");
  TestClient second(server->port());
  CHECK(error_type(second.recv()) == "server_busy");
  CHECK(second.closed_by_server());
  CHECK(error_type(first.call("{\"id\":1,\"op\":\"ping\"}")) == "");
}

TEST_CASE("before the handshake a frame of more than a few KiB is refused; after it, not") {
  auto server = start();
  {
    TestClient c(server->port());
    c.send(std::string(5000, ' '));  // nothing is buffered for it: refused on its header
    std::string reply = c.recv();
    CHECK(error_type(reply) == "frame_too_large");
    CHECK_MESSAGE(reply.find("before the handshake") != std::string::npos, reply);
    CHECK(c.closed_by_server());
  }
  TestClient c(server->port());
  CHECK(error_type(c.call(kHello)) == "");
  const std::string big = "{\"id\":1,\"op\":\"ping\",\"pad\":\"" + std::string(5000, 'x') + "\"}";
  CHECK(error_type(c.call(big)) == "bad_request");  // read and judged: an unknown field
  CHECK(error_type(c.call("{\"id\":2,\"op\":\"ping\"}")) == "");
}

TEST_CASE("a full server closes the longest-waiting connection without a handshake first") {
  ServerOptions o;
  o.limits.max_connections = 2;
  auto server = start(o);
  TestClient first(server->port());
  CHECK(error_type(first.call(kHello)) == "");
  TestClient idle(server->port());  // connects, says nothing
  CHECK(eventually([&] { return server->stats().connections_open == 2; }));
  TestClient third(server->port());
  CHECK(idle.closed_by_server());
  CHECK(error_type(third.call(kHello)) == "");
  CHECK(server->stats().evicted_unauthenticated == 1);
  // Everyone left has shaken hands: now a newcomer is turned away.
  TestClient fourth(server->port());
  CHECK(error_type(fourth.recv()) == "server_busy");
  CHECK(error_type(first.call("{\"id\":1,\"op\":\"ping\"}")) == "");
}

TEST_CASE("failed handshakes from one address make it wait, without a look at the token") {
  ServerOptions o;
  o.token = "s3cret";
  o.limits.auth_failures_before_backoff = 2;
  auto server = start(o);
  const std::string wrong = "{\"id\":0,\"op\":\"hello\",\"version\":1,\"token\":\"guess\"}";
  const std::string right = "{\"id\":0,\"op\":\"hello\",\"version\":1,\"token\":\"s3cret\"}";
  for (int i = 0; i < 2; ++i) {
    TestClient c(server->port());
    CHECK(error_type(c.call(wrong)) == "auth_failed");
  }
  {  // the second failure started a 0.1 s wait: even the right token is refused meanwhile
    TestClient c(server->port());
    std::string reply = c.call(right);
    CHECK(error_type(reply) == "auth_failed");
    CHECK_MESSAGE(reply.find("too many failed handshakes") != std::string::npos, reply);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  TestClient c(server->port());
  CHECK(error_type(c.call(right)) == "");
  CHECK(server->stats().auth_failures == 3);
}

TEST_CASE("a client that half-closes after pipelining still gets every reply") {
  auto server = start();
  for (int trial = 0; trial < 5; ++trial) {
    TestClient c(server->port());
    CHECK(error_type(c.call(kHello)) == "");
    const uint64_t s = make_session(c);
    for (int i = 0; i < 6; ++i)
      c.send("{\"id\":" + std::to_string(10 + i) +
             ",\"op\":\"step\",\"session\":" + std::to_string(s) + ",\"action\":0}");
    c.shutdown_send();
    int replies = 0;
    for (int i = 0; i < 6; ++i)
      if (!c.recv().empty()) ++replies;
    CHECK(replies == 6);
    CHECK(c.closed_by_server());
  }
}

TEST_CASE("notable events are logged one logfmt line each, with the connection and peer") {
  std::mutex mu;
  std::vector<std::string> lines;
  ServerOptions o;
  o.token = "s3cret";
  o.log_level = 1;
  o.log = [&](const std::string& l) {
    std::lock_guard<std::mutex> hold(mu);
    lines.push_back(l);
  };
  auto server = start(o);
  {
    TestClient c(server->port());
    CHECK(error_type(c.call(kHello)) == "auth_failed");
  }
  TestClient c(server->port());
  CHECK(error_type(c.call("{\"id\":0,\"op\":\"hello\",\"version\":1,\"token\":\"s3cret\"}")) == "");
  const uint64_t s = make_session(c);
  CHECK(error_type(c.call("{\"id\":5,\"op\":\"close\",\"session\":" + std::to_string(s) + "}")) ==
        "");
  auto has = [&](const std::string& what) {
    std::lock_guard<std::mutex> hold(mu);
    for (const auto& l : lines)
      if (l.find(what) != std::string::npos) return true;
    return false;
  };
  CHECK(eventually([&] { return has("event=session_end") && has("by=client"); }));
  CHECK(has("perfdojo-bridge event=auth_failed conn=1 peer=127.0.0.1:"));
  CHECK(has("reason=no_token"));
  CHECK(has("event=session_start conn=2"));
  CHECK_FALSE(has("event=connected"));  // level 2 only
}

TEST_CASE("endpoints print IPv6 addresses in brackets; an empty host is refused") {
  CHECK(endpoint_text("127.0.0.1", 80) == "127.0.0.1:80");
  CHECK(endpoint_text("::1", 8080) == "[::1]:8080");
  ServerOptions o;
  o.host = "";
  auto s = Server::start(o);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error_text().find("host is empty") != std::string::npos);
}
