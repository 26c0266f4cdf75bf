// `perfdojo serve | episode`: the Gym socket bridge and its reference episode printer.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <csignal>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "bridge/handlers.h"
#include "bridge/protocol.h"
#include "bridge/server.h"
#include "cli/cli.h"

namespace perfdojo::cli {
namespace {

bool seconds_option(const Args& a, const std::string& name, double* out, int* rc) {
  if (!a.values.count(name)) return true;
  const std::string v = a.get(name);
  try {
    size_t used = 0;
    double x = std::stod(v, &used);
    if (used == v.size() && x >= 0 && x <= 1e7) {
      *out = x;
      return true;
    }
  } catch (const std::exception&) {
  }
  *rc = usage_error("--" + name + " must be a number of seconds (0 disables), got '" + v + "'",
                    a.json);
  return false;
}

// The server the stdin watcher stops; cleared before the server goes away.
std::mutex g_server_mu;
bridge::Server* g_server = nullptr;

int cmd_serve(const Args& a) {
  bridge::ServerOptions o;
  o.host = a.get("host", "127.0.0.1");
  int rc = kExitOk;
  int64_t port = 0, sessions = o.limits.max_sessions, frame = o.limits.max_frame_bytes,
          conns = o.limits.max_connections, pending = o.limits.max_pending, workers = 0,
          mworkers = 0, poll_us = -1;
  if (!int_option(a, "port", 0, 65535, &port, &rc) ||
      !int_option(a, "poll-us", -1, 1000000, &poll_us, &rc) ||
      !int_option(a, "max-sessions", 1, 1 << 20, &sessions, &rc) ||
      !int_option(a, "max-frame-bytes", 64, int64_t{1} << 31, &frame, &rc) ||
      !int_option(a, "max-connections", 1, 1 << 20, &conns, &rc) ||
      !int_option(a, "max-pending", 1, 1 << 16, &pending, &rc) ||
      !int_option(a, "workers", 0, 1024, &workers, &rc) ||
      !int_option(a, "measure-workers", 0, 1024, &mworkers, &rc) ||
      !seconds_option(a, "idle-timeout", &o.limits.idle_timeout_s, &rc) ||
      !seconds_option(a, "frame-timeout", &o.limits.frame_timeout_s, &rc))
    return rc;
  o.port = static_cast<uint16_t>(port);
  o.limits.max_sessions = static_cast<int>(sessions);
  o.limits.max_frame_bytes = static_cast<uint32_t>(frame);
  o.limits.max_connections = static_cast<int>(conns);
  o.limits.max_pending = static_cast<int>(pending);
  o.workers = static_cast<int>(workers);
  o.measure_workers = static_cast<int>(mworkers);
  o.policy.allow_files = a.has("allow-files");
  o.inline_fast = !a.has("no-inline");
  o.poll_us = static_cast<int>(poll_us);
  o.policy.backend_config.compiler = a.get("compiler", o.policy.backend_config.compiler);
  o.policy.backend_config.cache_dir = a.get("cache-dir", "");
  o.policy.backend_config.machine_profile = a.get("machine-profile", "");
  if (a.values.count("token-file")) {
    std::ifstream in(a.get("token-file"));
    if (!in) return usage_error("cannot read --token-file '" + a.get("token-file") + "'", a.json);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string token = ss.str();
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back())))
      token.pop_back();
    if (token.empty())
      return usage_error("--token-file '" + a.get("token-file") + "' is empty", a.json);
    o.token = token;
  }
  if (o.host.empty())
    return usage_error("--host is empty; give an address to bind (127.0.0.1: this machine only)",
                       a.json);
  if (a.values.count("log-level")) {
    int64_t level = 1;
    if (!int_option(a, "log-level", 0, 2, &level, &rc)) return rc;
    o.log_level = static_cast<int>(level);
  }
  if (!bridge::is_loopback(o.host)) {
    std::cerr
        << "perfdojo serve: warning: --host " << o.host
        << " is reachable from other machines; every client that connects can run kernels here"
        << (o.token ? "" : ", and no --token-file is set") << "\n";
  }
  std::signal(SIGPIPE, SIG_IGN);  // a vanished reader of stdout must not kill the server

  auto started = bridge::Server::start(o);
  if (!started.ok()) return report_errors(started.errors(), a.json, "serve");
  std::unique_ptr<bridge::Server> server = std::move(started).value();
  if (a.json) {
    util::JsonWriter w;
    w.begin_object()
        .field("ok", true)
        .field("listening", true)
        .field("host", server->host())
        .field("port", static_cast<int>(server->port()))
        .field("pid", static_cast<int>(::getpid()))
        .field("version", bridge::kProtocolVersion)
        .end_object();
    std::cout << w.str() << std::endl;
  } else {
    std::cout << "listening on " << bridge::endpoint_text(server->host(), server->port())
              << std::endl;
  }
  {
    std::lock_guard<std::mutex> lock(g_server_mu);
    g_server = server.get();
  }
  if (a.has("stdin-watch")) {
    // The Python client keeps our stdin open; when it dies, EOF stops us: no orphaned servers.
    std::thread([] {
      char buf[256];
      while (::read(0, buf, sizeof buf) > 0) {
      }
      std::lock_guard<std::mutex> lock(g_server_mu);
      if (g_server) g_server->stop();
    }).detach();
  }
  server->wait(/*handle_signals=*/true);
  {
    std::lock_guard<std::mutex> lock(g_server_mu);
    g_server = nullptr;
  }
  auto st = server->stats();
  std::cerr << "perfdojo serve: stopped after " << st.connections_accepted << " connections, "
            << st.requests << " requests (" << st.error_replies << " answered with an error)\n";
  return kExitOk;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// Times `reps` repetitions of the episode in-process: the C++ floor a bridge step adds to.
// Each step's time includes encoding its reply as the bridge would.
int time_episode(env::Env& e, int64_t seed, const std::vector<int>& actions, int reps) {
  using Clock = std::chrono::steady_clock;
  const auto& spaces = e.config().observation_spaces;
  std::vector<double> reset_us, step_us;
  size_t bytes = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    if (seed >= 0) {
      e.reset(static_cast<uint64_t>(seed));
    } else {
      e.reset();
    }
    reset_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    for (int act : actions) {
      auto t = Clock::now();
      util::JsonWriter w;
      w.reserve(16 << 10);
      bridge::write_step(w, e.step(act), spaces);
      bytes += w.str().size();
      step_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    }
  }
  util::JsonWriter w;
  w.begin_object()
      .field("ok", true)
      .field("repeats", reps)
      .field("steps", static_cast<int64_t>(step_us.size()))
      .field("reset_us_median", percentile(reset_us, 0.5))
      .field("step_us_median", percentile(step_us, 0.5))
      .field("step_us_p10", percentile(step_us, 0.1))
      .field("step_us_p90", percentile(step_us, 0.9))
      .field("reply_bytes_mean",
             step_us.empty() ? 0.0 : static_cast<double>(bytes) / step_us.size())
      .end_object();
  std::cout << w.str() << "\n";
  return kExitOk;
}

// Prints what the bridge would send for the same episode, straight from the C++ env: the
// reference the bridge tests compare against.
int cmd_episode(const Args& a) {
  bridge::ConfigPolicy policy;
  policy.allow_files = true;  // the local user's own files
  util::json::Document doc;
  const std::string config_text = a.get("config", "{}");
  if (auto e = util::parse_json(config_text, &doc))
    return usage_error("--config is not valid JSON: " + e->message(), a.json);
  env::EnvConfig config;
  try {
    config = bridge::config_from_json(doc, policy);
  } catch (const bridge::RequestError& e) {
    return usage_error("--config: " + e.error.message, a.json);
  }
  if (a.values.count("benchmark")) config.benchmark = a.get("benchmark");
  int rc = kExitOk;
  int64_t seed = -1;
  if (!int_option(a, "seed", 0, INT64_MAX, &seed, &rc)) return rc;
  std::vector<int> actions;
  std::stringstream list(a.get("actions", ""));
  for (std::string item; std::getline(list, item, ',');) {
    if (item.empty()) continue;
    try {
      actions.push_back(std::stoi(item));
    } catch (const std::exception&) {
      return usage_error("--actions takes comma-separated integers, got '" + item + "'", a.json);
    }
  }
  auto made = env::Env::make(config);
  if (!made.ok()) return report_errors(made.errors(), a.json, "config");
  env::Env& e = *made.value();
  const auto& spaces = e.config().observation_spaces;
  if (a.values.count("time")) {
    int64_t reps = 1;
    if (!int_option(a, "time", 1, 1000000, &reps, &rc)) return rc;
    return time_episode(e, seed, actions, static_cast<int>(reps));
  }
  util::JsonWriter w;
  w.begin_object().field("ok", true).key("spaces");
  bridge::write_spaces(w, e);
  auto [obs, info] = seed >= 0 ? e.reset(static_cast<uint64_t>(seed)) : e.reset();
  w.key("reset");
  bridge::write_reset(w, obs, info, spaces);
  w.key("steps").begin_array();
  for (int act : actions) bridge::write_step(w, e.step(act), spaces);
  w.end_array().key("state");
  bridge::write_state(w, e.state());
  w.end_object();
  std::cout << w.str() << "\n";
  return kExitOk;
}

}  // namespace

std::vector<Command> bridge_commands() {
  return {
      {"serve",
       "serve [--host 127.0.0.1] [--port N] [--token-file F] [--max-sessions K] [--max-frame-bytes "
       "B] "
       "[--idle-timeout S] [--frame-timeout S] [--max-connections C] [--max-pending P] [--workers "
       "W] "
       "[--measure-workers M] [--allow-files] [--compiler CC] [--cache-dir D] [--machine-profile "
       "F] "
       "[--stdin-watch] [--no-inline] [--poll-us U] [--log-level 0|1|2]",
       "serve env sessions to Gymnasium clients over TCP (docs/bridge.md); prints 'listening on "
       "HOST:PORT'",
       {"host", "port", "token-file", "max-sessions", "max-frame-bytes", "idle-timeout",
        "frame-timeout", "max-connections", "max-pending", "workers", "measure-workers", "compiler",
        "cache-dir", "machine-profile", "log-level", "poll-us"},
       {"allow-files", "stdin-watch", "no-inline"},
       cmd_serve},
      {"episode",
       "episode [--config JSON] [--benchmark URI] [--seed S] [--actions 1,2,3] [--time R]",
       "run one episode on the C++ env and print reset and step results as the bridge encodes "
       "them; --time R instead times R repetitions (per-step microseconds, encoding included)",
       {"config", "benchmark", "seed", "actions", "time"},
       {},
       cmd_episode},
  };
}

}  // namespace perfdojo::cli
