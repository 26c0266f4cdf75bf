#include "agents/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace perfdojo::agents {
namespace {

constexpr char kMagic[8] = {'P', 'D', 'J', 'A', 'G', 'E', 'N', 'T'};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_blob(std::string& out, const std::string& blob) {
  put<uint64_t>(out, blob.size());
  out += blob;
}

// Header values are single lines: escape what would break them.
std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '%')
      o += "%25";
    else if (c == '\n')
      o += "%0A";
    else if (c == '\t')
      o += "%09";
    else if (c == '\r')
      o += "%0D";
    else
      o += c;
  }
  return o;
}

std::string unescape(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      std::string h = s.substr(i + 1, 2);
      o += static_cast<char>(std::stoi(h, nullptr, 16));
      i += 2;
    } else {
      o += s[i];
    }
  }
  return o;
}

std::string num(double v) {
  std::ostringstream o;
  o.precision(17);
  o << v;
  return o.str();
}

std::string header_text(const Checkpoint& c) {
  std::string h;
  auto kv = [&](const std::string& k, const std::string& v) { h += k + "=" + escape(v) + "\n"; };
  kv("feature_size", std::to_string(c.feature_size));
  kv("action_count", std::to_string(c.action_count));
  kv("token_vocab", std::to_string(c.token_vocab));
  kv("global_step", std::to_string(c.global_step));
  kv("updates", std::to_string(c.updates));
  kv("episodes", std::to_string(c.episodes));
  // Wall-clock time only where the budget is wall-clock: a run with a step budget writes the
  // same bytes every time it is repeated.
  if (c.config.total_steps <= 0) kv("elapsed_s", num(c.elapsed_s));
  kv("progress", num(c.progress));
  kv("curriculum_stage", std::to_string(c.curriculum_stage));
  kv("stage_started", num(c.stage_started));
  kv("rng_state", c.rng_state);
  kv("replay_size", std::to_string(c.replay_size));
  kv("replay_capacity", std::to_string(c.replay_capacity));
  kv("replay_prioritized", c.replay_prioritized ? "1" : "0");
  for (const auto& [uri, b] : c.best) {
    std::string trace;
    for (const auto& a : b.trace) trace += (trace.empty() ? "" : "\t") + escape(a);
    kv("best", uri + "\n" + num(b.speedup) + "\n" + num(b.initial_time_s) + "\n" +
                   num(b.best_time_s) + "\n" + trace);
  }
  std::istringstream cfg(to_text(c.config));
  std::string line;
  while (std::getline(cfg, line)) {
    auto eq = line.find('=');
    // Where the run wrote is not part of what it learned (a resumed run writes beside its
    // checkpoint unless told otherwise); leaving it out keeps identical runs byte-identical.
    if (line.substr(0, eq) == "out_dir") continue;
    kv("config." + line.substr(0, eq), line.substr(eq + 1));
  }
  return h;
}

std::string parse_header(Checkpoint& c, const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::string cfg;
  try {
    while (std::getline(in, line)) {
      auto eq = line.find('=');
      if (eq == std::string::npos) return "header line without '=': " + line.substr(0, 60);
      std::string k = line.substr(0, eq), v = unescape(line.substr(eq + 1));
      if (k.rfind("config.", 0) == 0)
        cfg += k.substr(7) + "=" + v + "\n";
      else if (k == "feature_size")
        c.feature_size = std::stoi(v);
      else if (k == "action_count")
        c.action_count = std::stoi(v);
      else if (k == "token_vocab")
        c.token_vocab = std::stoi(v);
      else if (k == "global_step")
        c.global_step = std::stoll(v);
      else if (k == "updates")
        c.updates = std::stoll(v);
      else if (k == "episodes")
        c.episodes = std::stoll(v);
      else if (k == "elapsed_s")
        c.elapsed_s = std::stod(v);
      else if (k == "progress")
        c.progress = std::stod(v);
      else if (k == "curriculum_stage")
        c.curriculum_stage = std::stoi(v);
      else if (k == "stage_started")
        c.stage_started = std::stod(v);
      else if (k == "rng_state")
        c.rng_state = v;
      else if (k == "replay_size")
        c.replay_size = std::stoi(v);
      else if (k == "replay_capacity")
        c.replay_capacity = std::stoi(v);
      else if (k == "replay_prioritized")
        c.replay_prioritized = v == "1";
      else if (k == "best") {
        std::istringstream b(v);
        std::string uri, sp, t0, tb, trace;
        std::getline(b, uri);
        std::getline(b, sp);
        std::getline(b, t0);
        std::getline(b, tb);
        std::getline(b, trace);
        KernelBest kb{std::stod(sp), std::stod(t0), std::stod(tb), {}};
        std::istringstream ts(trace);
        std::string a;
        while (std::getline(ts, a, '\t'))
          if (!a.empty()) kb.trace.push_back(unescape(a));
        c.best[uri] = kb;
      }
      // Unknown keys are ignored: later minor versions may add some.
    }
  } catch (const std::exception&) {
    return "malformed header value in line '" + line.substr(0, 60) + "'";
  }
  c.config = AgentConfig{};
  // Checkpoints written before the head was a choice had the flat one and say nothing of it.
  c.config.head = "flat";
  if (auto e = parse_text(c.config, cfg, "checkpoint config"); !e.empty()) return e;
  return "";
}

}  // namespace

std::string save_checkpoint(const Checkpoint& c, const std::string& path) {
  std::string out(kMagic, sizeof kMagic);
  put<uint32_t>(out, kCheckpointVersion);
  put_blob(out, header_text(c));
  put_blob(out, c.model);
  put_blob(out, c.optimizer);
  put<uint64_t>(out, fnv1a(out));
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  // Write beside the target, flush it to the disk, rename, then flush the folder: a crash or a
  // power cut at any point leaves the old checkpoint or the new one, never half of one.
  std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot write " + tmp + ": " + std::strerror(errno);
  for (size_t done = 0; done < out.size();) {
    const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      fs::remove(tmp, ec);
      return "write failed: " + tmp + ": " + why;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    fs::remove(tmp, ec);
    return "cannot flush " + tmp + " to the disk: " + why;
  }
  ::close(fd);
  fs::rename(tmp, path, ec);
  if (ec) return "cannot rename " + tmp + " to " + path + ": " + ec.message();
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);  // the rename itself reaches the disk
    ::close(dfd);
  }
  return "";
}

uint64_t checkpoint_checksum(std::string_view bytes) { return fnv1a(std::string(bytes)); }

ir::Result<Checkpoint> load_checkpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::vector<ir::Diagnostic>{{{path, 0, 0}, "cannot open the checkpoint"}};
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return load_checkpoint_bytes(data, path);
}

ir::Result<Checkpoint> load_checkpoint_bytes(std::string_view bytes, const std::string& name) {
  auto fail = [&](const std::string& m) -> ir::Result<Checkpoint> {
    return std::vector<ir::Diagnostic>{{{name, 0, 0}, m}};
  };
  const std::string data(bytes);
  if (data.size() < sizeof kMagic + 4 || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0)
    return fail("not a PerfDojo agent checkpoint (bad magic)");
  uint32_t version;
  std::memcpy(&version, data.data() + sizeof kMagic, 4);
  if (version != kCheckpointVersion)
    return fail("checkpoint format version " + std::to_string(version) +
                ", this build reads version " + std::to_string(kCheckpointVersion));
  if (data.size() < sizeof kMagic + 4 + 8) return fail("corrupt checkpoint: truncated");
  uint64_t stored;
  std::memcpy(&stored, data.data() + data.size() - 8, 8);
  std::string body = data.substr(0, data.size() - 8);
  if (fnv1a(body) != stored)
    return fail("corrupt checkpoint: checksum mismatch (truncated or modified file)");
  size_t pos = sizeof kMagic + 4;
  auto blob = [&](std::string& out) {
    uint64_t n;
    if (pos + 8 > body.size()) return false;
    std::memcpy(&n, body.data() + pos, 8);
    pos += 8;
    if (n > body.size() - pos) return false;
    out = body.substr(pos, n);
    pos += n;
    return true;
  };
  Checkpoint c;
  std::string header;
  if (!blob(header) || !blob(c.model) || !blob(c.optimizer) || pos != body.size())
    return fail("corrupt checkpoint: section lengths do not add up");
  if (auto e = parse_header(c, header); !e.empty()) return fail("corrupt checkpoint header: " + e);
  return c;
}

std::string check_compatible(const Checkpoint& c, const AgentConfig& config, int feature_size,
                             int action_count, int token_vocab) {
  if (c.feature_size != feature_size)
    return "the checkpoint's network reads " + std::to_string(c.feature_size) +
           " features, this build's env gives " + std::to_string(feature_size);
  if (c.action_count != action_count)
    return "the checkpoint's network has " + std::to_string(c.action_count) +
           " actions, this env's action space has " + std::to_string(action_count) +
           " (another backend or action-space config?)";
  if (c.config.encoder == "tokens" && c.token_vocab != token_vocab)
    return "the checkpoint's token vocabulary has " + std::to_string(c.token_vocab) +
           " entries, this env's has " + std::to_string(token_vocab);
  for (const auto& f : config_fields()) {
    if (f.role != FieldRole::kArchitecture) continue;
    std::string a = get_field(c.config, f.name), b = get_field(config, f.name);
    if (a != b)
      return std::string("the checkpoint was trained with ") + f.name + "=" + a +
             ", this run asks for " + f.name + "=" + b;
  }
  return "";
}

}  // namespace perfdojo::agents
