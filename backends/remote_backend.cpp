#include "backends/remote_backend.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "ir/print.h"

namespace perfdojo::backends {
namespace {

using util::json::Value;
using Clock = std::chrono::steady_clock;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// A line of the farm's, cut for an error message.
std::string excerpt(const std::string& line) {
  std::string s = line.size() > 120 ? line.substr(0, 120) + "..." : line;
  return "'" + s + "'";
}

std::optional<std::string> get_number(const Value& v, const char* key, double* out) {
  const Value* m = util::json_member(v, key);
  if (!m) return std::nullopt;
  if (!m->IsNumber()) return std::string("'") + key + "' is not a number";
  *out = m->GetDouble();
  return std::nullopt;
}

std::optional<std::string> get_bool(const Value& v, const char* key, bool* out) {
  const Value* m = util::json_member(v, key);
  if (!m) return std::nullopt;
  if (!m->IsBool()) return std::string("'") + key + "' is not true or false";
  *out = m->GetBool();
  return std::nullopt;
}

std::optional<std::string> get_int(const Value& v, const char* key, int* out) {
  double d = *out;
  if (auto e = get_number(v, key, &d)) return e;
  if (d != static_cast<int>(d)) return std::string("'") + key + "' is not an integer";
  *out = static_cast<int>(d);
  return std::nullopt;
}

}  // namespace

std::string measurement_json(const Measurement& m) {
  util::JsonObject o;
  if (m.error) o.add("error", *m.error);
  o.add("median_s", m.median_s).add("min_s", m.min_s).add("spread", m.spread).add("reps", m.reps);
  o.add("verified", m.verified).add("max_rel_error", m.max_rel_error).add("compile_s", m.compile_s);
  o.add("cached", m.cached)
      .add("noisy", m.noisy)
      .add("no_device", m.no_device)
      .add("flags", m.flags);
  o.add("verification", m.verification).add("wrong_result", m.wrong_result);
  return o.str();
}

std::optional<std::string> parse_measurement(const Value& v, Measurement* out) {
  if (!v.IsObject()) return "a measurement is not a JSON object";
  Measurement m;
  if (const Value* e = util::json_member(v, "error")) {
    if (!e->IsString()) return "'error' is not a string";
    m.error = std::string(util::json_string(*e));
  }
  for (auto [key, field] : {std::pair{"median_s", &m.median_s},
                            {"min_s", &m.min_s},
                            {"spread", &m.spread},
                            {"max_rel_error", &m.max_rel_error},
                            {"compile_s", &m.compile_s}})
    if (auto e = get_number(v, key, field)) return e;
  if (auto e = get_int(v, "reps", &m.reps)) return e;
  for (auto [key, field] : {std::pair{"verified", &m.verified},
                            {"wrong_result", &m.wrong_result},
                            {"cached", &m.cached},
                            {"noisy", &m.noisy},
                            {"no_device", &m.no_device}})
    if (auto e = get_bool(v, key, field)) return e;
  if (const Value* f = util::json_member(v, "flags")) {
    if (!f->IsString()) return "'flags' is not a string";
    m.flags = std::string(util::json_string(*f));
  }
  if (const Value* f = util::json_member(v, "verification")) {
    if (!f->IsString()) return "'verification' is not a string";
    m.verification = std::string(util::json_string(*f));
  }
  if (!m.error && !(m.median_s > 0))
    return "a measurement without an error has no positive median_s";
  *out = std::move(m);
  return std::nullopt;
}

std::string options_json(const MeasureOptions& o) {
  return util::JsonObject()
      .add("seed", o.seed)
      .add("verify", o.verify)
      .add("time_budget_s", o.time_budget_s)
      .add("min_reps", o.min_reps)
      .add("max_reps", o.max_reps)
      .add("target_spread", o.target_spread)
      .add("flush_cache", o.flush_cache)
      .add("timeout_s", o.timeout_s)
      .str();
}

std::optional<std::string> parse_options(const Value& v, MeasureOptions* out) {
  if (!v.IsObject()) return "'options' is not a JSON object";
  MeasureOptions o;
  if (const Value* s = util::json_member(v, "seed")) {
    if (!s->IsUint64()) return "'seed' is not a non-negative integer";
    o.seed = s->GetUint64();
  }
  for (auto [key, field] : {std::pair{"time_budget_s", &o.time_budget_s},
                            {"target_spread", &o.target_spread},
                            {"timeout_s", &o.timeout_s}})
    if (auto e = get_number(v, key, field)) return e;
  if (auto e = get_int(v, "min_reps", &o.min_reps)) return e;
  if (auto e = get_int(v, "max_reps", &o.max_reps)) return e;
  if (auto e = get_bool(v, "verify", &o.verify)) return e;
  if (auto e = get_bool(v, "flush_cache", &o.flush_cache)) return e;
  if (!(o.time_budget_s > 0) || !(o.timeout_s > 0) || o.min_reps < 1 || o.max_reps < o.min_reps)
    return "the options are out of range (budget and timeout positive, 1 <= min_reps <= max_reps)";
  *out = o;
  return std::nullopt;
}

// ---------------------------------------------------------------- Farm

std::variant<std::shared_ptr<Farm>, std::string> Farm::start(const std::vector<std::string>& argv,
                                                             double start_timeout_s) {
  if (argv.empty()) return std::string("no farm command");
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    return std::string("pipe: ") + std::strerror(errno);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    setpgid(0, 0);  // stopping the farm stops whatever it started
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  signal(SIGPIPE, SIG_IGN);  // a dead farm is an error on write, not the end of us
  std::shared_ptr<Farm> f(new Farm());
  f->pid_ = pid;
  f->in_ = to_child[1];
  f->out_ = from_child[0];
  std::string line;
  if (auto e = f->read_line(now_s() + start_timeout_s, &line)) {
    f->fail(*e);
    return "the measurement farm (" + argv[0] + ") did not start: " + *e;
  }
  util::json::Document doc;
  const Value* ready = nullptr;
  if (!util::parse_json(line, &doc) && doc.IsObject()) ready = util::json_member(doc, "ready");
  if (!ready || !ready->IsBool() || !ready->GetBool()) {
    f->fail("no ready line");
    return "the measurement farm (" + argv[0] + ") sent " + excerpt(line) +
           " where its ready line ({\"ready\": true, ...}) was expected";
  }
  int workers = 1;
  if (auto e = get_int(doc, "workers", &workers); e || workers < 1) {
    f->fail("bad ready line");
    return "the measurement farm's ready line has no positive 'workers': " + excerpt(line);
  }
  f->workers_ = workers;
  f->ready_ = line;
  return f;
}

Farm::~Farm() { fail("closed", /*graceful=*/true); }

std::string Farm::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void Farm::fail(const std::string& why, bool graceful) {
  if (error_.empty()) error_ = why;
  if (in_ >= 0) close(in_);  // EOF on its stdin: a farm stops its workers and exits
  in_ = -1;
  if (pid_ > 0) {
    int status = 0;
    if (!graceful) kill(-pid_, SIGTERM);   // a broken farm: its Ray driver still ends its actors
    const double deadline = now_s() + 10;  // Ray's shutdown takes a few seconds
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (now_s() > deadline) {
        kill(-pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      usleep(20000);
    }
    pid_ = -1;
  }
  if (out_ >= 0) close(out_);
  out_ = -1;
}

std::optional<std::string> Farm::read_line(double deadline_s, std::string* line) {
  for (;;) {
    if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
      *line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return std::nullopt;
    }
    if (out_ < 0) return "the farm is stopped";
    const double left = deadline_s - now_s();
    if (left <= 0) return "no answer within the time limit";
    pollfd p{out_, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
    if (r < 0 && errno != EINTR) return std::string("poll: ") + std::strerror(errno);
    if (r <= 0) continue;
    char buf[65536];
    const ssize_t n = read(out_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "it exited (end of its output)";
    buffer_.append(buf, static_cast<size_t>(n));
    if (buffer_.size() > (64u << 20)) return "a line longer than 64 MiB";
  }
}

std::vector<std::optional<std::vector<Measurement>>> Farm::call(
    const std::vector<Request>& requests, double timeout_s) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::optional<std::vector<Measurement>>> out(requests.size());
  if (!error_.empty()) return out;
  std::map<int64_t, size_t> pending;  // id -> request
  std::string text;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& q = requests[i];
    util::JsonArray hashes, programs;
    for (const ir::Program* p : q.programs) {
      char h[24];
      std::snprintf(h, sizeof h, "%016llx",
                    static_cast<unsigned long long>(ir::structural_hash(*p)));
      hashes.add(std::string(h));
      programs.add(ir::print_program(*p));
    }
    const int64_t id = next_id_++;
    pending[id] = i;
    text += util::JsonObject()
                .add("id", id)
                .add("op", q.op)
                .add("backend", q.backend)
                .raw("hashes", hashes.str())
                .raw("programs", programs.str())
                .raw("options", options_json(q.options))
                .str() +
            "\n";
  }
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(in_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fail(std::string("cannot write to the farm: ") + std::strerror(errno));
      return out;
    }
    done += static_cast<size_t>(n);
  }
  const double deadline = now_s() + timeout_s;
  while (!pending.empty()) {
    std::string line;
    if (auto e = read_line(deadline, &line)) {
      fail("the measurement farm failed: " + *e);
      for (auto& o : out) o.reset();
      return out;
    }
    util::json::Document doc;
    auto bad = [&](const std::string& why) {
      fail("the measurement farm sent a line that is not a reply (" + why + "): " + excerpt(line));
      for (auto& o : out) o.reset();
      return out;
    };
    if (auto e = util::parse_json(line, &doc)) return bad(e->message());
    if (!doc.IsObject()) return bad("not a JSON object");
    const Value* id = util::json_member(doc, "id");
    if (!id || !id->IsInt64() || !pending.count(id->GetInt64()))
      return bad("its 'id' names no request in flight");
    const size_t i = pending[id->GetInt64()];
    pending.erase(id->GetInt64());
    const Value* ok = util::json_member(doc, "ok");
    if (!ok || !ok->IsBool()) return bad("no 'ok'");
    std::vector<Measurement> ms(requests[i].programs.size());
    if (!ok->GetBool()) {
      const Value* e = util::json_member(doc, "error");
      const std::string why =
          e && e->IsString() ? std::string(util::json_string(*e)) : "no reason given";
      for (auto& m : ms) m.error = "the measurement farm: " + why;
    } else {
      const Value* rs = util::json_member(doc, "results");
      if (!rs || !rs->IsArray() || rs->Size() != ms.size())
        return bad("'results' is not an array of one measurement per program");
      for (size_t k = 0; k < ms.size(); ++k)
        if (auto e = parse_measurement((*rs)[static_cast<unsigned>(k)], &ms[k])) return bad(*e);
    }
    out[i] = std::move(ms);
  }
  return out;
}

std::variant<std::vector<std::string>, std::string> farm_command(const std::string& spec,
                                                                 const std::string& self_exe) {
  if (spec == "local") return std::vector<std::string>{self_exe, "measure-worker"};
  std::string address;
  if (spec.rfind("ray://", 0) == 0 && spec.size() > 6)
    address = spec;
  else if (spec.rfind("ray:", 0) == 0 && spec.size() > 4)
    address = spec.substr(4);
  else
    return "--workers takes ray://HOST:PORT (Ray Client), ray:HOST:PORT or ray:auto (a driver on "
           "a cluster node), or local; not '" +
           spec + "'";
  const char* py = std::getenv("PERFDOJO_FARM_PYTHON");
  return std::vector<std::string>{py && *py ? py : "python3", "-m", "perfdojo_ray.farm",
                                  "--address", address};
}

// ---------------------------------------------------------------- RemoteBackend

RemoteBackend::RemoteBackend(std::unique_ptr<Backend> local, std::shared_ptr<Farm> farm)
    : local_(std::move(local)), farm_(std::move(farm)) {}

bool RemoteBackend::remote() const { return farm_ && farm_->error().empty(); }

int RemoteBackend::concurrency() const { return remote() ? farm_->workers() : 1; }

std::unique_ptr<Backend> RemoteBackend::clone() const {
  return std::make_unique<RemoteBackend>(local_->clone(), farm_);
}

std::optional<std::vector<std::vector<Measurement>>> RemoteBackend::send(
    std::vector<Farm::Request> requests) {
  if (!remote()) return std::nullopt;
  // Each request may compile (a compile timeout) and time several programs; a farm that takes
  // far longer than that is not coming back.
  double limit = 60;
  for (const auto& q : requests)
    limit += q.programs.size() * (2 * q.options.timeout_s * q.options.max_reps / 10 + 120);
  auto got = farm_->call(requests, limit);
  std::vector<std::vector<Measurement>> out;
  for (auto& g : got) {
    if (!g) {
      static std::once_flag warned;
      std::call_once(warned, [&] {
        std::fprintf(stderr, "\nwarning: %s; measuring on this machine from now on\n",
                     farm_->error().c_str());
      });
      return std::nullopt;
    }
    out.push_back(std::move(*g));
  }
  return out;
}

Measurement RemoteBackend::measure(const ir::Program& p, const MeasureOptions& options) {
  return measure_each({&p}, options).front();
}

std::vector<Measurement> RemoteBackend::measure_each(
    const std::vector<const ir::Program*>& programs, const MeasureOptions& options) {
  std::vector<Farm::Request> rs;
  for (const ir::Program* p : programs) rs.push_back({"measure", name(), {p}, options});
  if (auto got = send(std::move(rs))) {
    std::vector<Measurement> out;
    for (auto& g : *got) out.push_back(std::move(g.front()));
    return out;
  }
  return local_->measure_each(programs, options);
}

std::vector<Measurement> RemoteBackend::compare(const std::vector<const ir::Program*>& programs,
                                                const MeasureOptions& options) {
  if (auto got = send({{"compare", name(), programs, options}})) return std::move(got->front());
  return local_->compare(programs, options);
}

}  // namespace perfdojo::backends
