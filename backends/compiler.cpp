#include "backends/compiler.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

extern char** environ;

namespace perfdojo::backends {
namespace {

namespace fs = std::filesystem;

// The first lines of a compiler's complaint: enough to see the problem, short enough for a record.
std::string trim_diagnostics(const std::string& s) {
  std::string out;
  int lines = 0;
  size_t pos = 0;
  while (pos < s.size() && lines < 12) {
    size_t nl = s.find('\n', pos);
    if (nl == std::string::npos) nl = s.size();
    out += s.substr(pos, nl - pos) + "\n";
    pos = nl + 1;
    ++lines;
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

uint64_t stable_hash(const std::string& s, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

int run_capture(const std::vector<std::string>& argv, std::string* output, double timeout_s,
                bool* timed_out) {
  if (timed_out) *timed_out = false;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  // Its own process group, so a timeout also kills what it started (cc1, as, ld).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    if (output) *output = std::string("cannot run ") + argv[0] + ": " + std::strerror(rc);
    return -1;
  }
  using Clock = std::chrono::steady_clock;
  const bool bounded = timeout_s > 0;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(bounded ? timeout_s : 0.0));
  bool killed = false;
  std::string out;
  char buf[4096];
  for (;;) {
    if (bounded) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd pfd{fds[0], POLLIN, 0};
      int pr = left.count() > 0 ? poll(&pfd, 1, static_cast<int>(left.count())) : 0;
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) {  // deadline passed with the pipe still open
        kill(-pid, SIGKILL);
        killed = true;
        break;
      }
    }
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0)
      out.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  close(fds[0]);
  int status = 0;
  // A command may close its output and still run: the deadline holds for its exit too.
  while (bounded && !killed) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) break;
    if (Clock::now() >= deadline) {
      kill(-pid, SIGKILL);
      killed = true;
      break;
    }
    usleep(1000);
  }
  if (!bounded || killed) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (killed) {
    if (timed_out) *timed_out = true;
    out += "\n(killed after " + std::to_string(timeout_s) + " s)";
  }
  if (output) *output = std::move(out);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string find_executable(const std::string& name) {
  if (name.empty()) return "";
  auto runnable = [](const std::string& p) {
    return access(p.c_str(), X_OK) == 0 && !fs::is_directory(p);
  };
  if (name.find('/') != std::string::npos) return runnable(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t colon = dirs.find(':', pos);
    if (colon == std::string::npos) colon = dirs.size();
    std::string d = dirs.substr(pos, colon - pos);
    std::string cand = (d.empty() ? "." : d) + "/" + name;
    if (runnable(cand)) return cand;
    pos = colon + 1;
  }
  return "";
}

std::string compiler_version(const std::string& compiler) {
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(compiler);
  if (it != cache.end()) return it->second;
  std::string out;
  std::string v;
  // Bounded: a broken compiler must not stall every measurement that records its version.
  if (!find_executable(compiler).empty() && run_capture({compiler, "--version"}, &out, 5.0) == 0)
    v = out.substr(0, out.find('\n'));
  cache[compiler] = v;
  return v;
}

CompileResult compile_shared_object(const std::string& compiler,
                                    const std::vector<std::string>& flags,
                                    const std::string& source, const std::string& dir,
                                    const std::vector<std::string>& libs, double timeout_s) {
  CompileResult r;
  std::string key = compiler;
  for (const auto& f : flags) key += '\0' + f;
  for (const auto& l : libs) key += "\0lib " + l;
  key += '\0' + source;
  std::string stem = (fs::path(dir) / ("k" + hex64(stable_hash(key)))).string();
  r.so_path = stem + ".so";
  std::error_code ec;
  if (fs::exists(r.so_path, ec)) {
    r.reused = true;
    return r;
  }
  fs::create_directories(dir, ec);
  {
    std::ofstream out(stem + ".c", std::ios::binary);
    out << source;
    if (!out) {
      r.error = "cannot write " + stem + ".c";
      return r;
    }
  }
  std::string tmp = stem + ".so.tmp" + std::to_string(getpid());
  std::vector<std::string> argv = {compiler};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (const char* f : {"-shared", "-fPIC", "-o"}) argv.push_back(f);
  argv.push_back(tmp);
  argv.push_back(stem + ".c");
  argv.insert(argv.end(), libs.begin(), libs.end());  // after the source: --as-needed linkers
  std::string output;
  auto t0 = std::chrono::steady_clock::now();
  bool timed_out = false;
  int rc = run_capture(argv, &output, timeout_s, &timed_out);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rc != 0) {
    fs::remove(tmp, ec);
    if (timed_out) {
      r.error = "compile timed out after " + std::to_string(timeout_s) + " s (" + compiler +
                ", source " + stem + ".c)";
      return r;
    }
    r.error = "compile failed (" + compiler + " exit " + std::to_string(rc) + ", source " + stem +
              ".c):\n" + trim_diagnostics(output);
    return r;
  }
  fs::rename(tmp, r.so_path, ec);
  if (ec) r.error = "cannot rename " + tmp + ": " + ec.message();
  return r;
}

}  // namespace perfdojo::backends
