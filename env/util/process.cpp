#include "util/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace perfdojo::util {
namespace {

using Clock = std::chrono::steady_clock;

// Starts argv with stdout and stderr on `out_fd`, stdin on /dev/null, in its own process group.
// Returns the pid, or -1 with `*error` set.
pid_t spawn(const std::vector<std::string>& argv, int out_fd, std::string* error) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
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
  if (rc != 0) {
    *error = "cannot run " + argv[0] + ": " + std::strerror(rc);
    return -1;
  }
  return pid;
}

// Reads `fd` to its end into `*out`; false when the deadline passed first.
bool read_all(int fd, bool bounded, Clock::time_point deadline, std::string* out) {
  char buf[4096];
  for (;;) {
    if (bounded) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd pfd{fd, POLLIN, 0};
      int pr = left.count() > 0 ? poll(&pfd, 1, static_cast<int>(left.count())) : 0;
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) return false;  // deadline passed with the pipe still open
    }
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0)
      out->append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR)
      return true;
  }
}

// Waits for `pid`, killing its group at the deadline; false when it had to be killed.
bool wait_until(pid_t pid, bool bounded, Clock::time_point deadline, int* status) {
  // A program may close its output and still run: the deadline holds for its exit too.
  while (bounded) {
    pid_t w = waitpid(pid, status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) return true;
    if (Clock::now() >= deadline) return false;
    usleep(1000);
  }
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
  return true;
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  ProcessResult r;
  if (argv.empty()) {
    r.output = "cannot run an empty command";
    return r;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    r.output = "cannot run " + argv[0] + ": pipe: " + std::strerror(errno);
    return r;
  }
  const pid_t pid = spawn(argv, fds[1], &r.output);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return r;
  }
  r.started = true;
  const bool bounded = options.timeout_s > 0;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(bounded ? options.timeout_s : 0.0));
  int status = 0;
  bool in_time = read_all(fds[0], bounded, deadline, &r.output);
  close(fds[0]);
  if (in_time) in_time = wait_until(pid, bounded, deadline, &status);
  if (!in_time) {
    kill(-pid, SIGKILL);
    wait_until(pid, false, deadline, &status);
    r.timed_out = true;
    r.output += "\n(killed after " + std::to_string(options.timeout_s) + " s)";
  }
  if (WIFEXITED(status))
    r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.exit_code = 128 + WTERMSIG(status);
  return r;
}

std::string find_executable(const std::string& name) {
  if (name.empty()) return "";
  auto runnable = [](const std::string& p) {
    struct stat st;
    return access(p.c_str(), X_OK) == 0 && stat(p.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
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

}  // namespace perfdojo::util
