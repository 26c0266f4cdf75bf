#include "backends/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "backends/compiler.h"

namespace perfdojo::backends {
namespace {

namespace fs = std::filesystem;

std::string self_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "" : p.parent_path().string();
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string find_worker(const std::string& configured) {
  if (!configured.empty()) return find_executable(configured);
  if (const char* env = std::getenv("PERFDOJO_WORKER"); env && *env) return find_executable(env);
  std::string dir = self_dir();
  for (const std::string& cand : {dir + "/perfdojo-worker", dir + "/../bin/perfdojo-worker",
#ifdef PERFDOJO_WORKER_PATH
                                  std::string(PERFDOJO_WORKER_PATH)
#else
                                  std::string()
#endif
       }) {
    if (!cand.empty() && !find_executable(cand).empty()) return fs::weakly_canonical(cand).string();
  }
  return "";
}

Worker::Worker(std::string exe, uint64_t memory_limit_bytes)
    : exe_(std::move(exe)), memory_limit_(memory_limit_bytes) {}

Worker::~Worker() {
  stop();
  if (base_) munmap(base_, size_);
  if (memfd_ >= 0) close(memfd_);
}

uint8_t* Worker::reserve(size_t bytes, std::string* error) {
  if (bytes == 0) bytes = 1;
  if (memfd_ < 0) {
    memfd_ = memfd_create("perfdojo-buffers", MFD_CLOEXEC);
    if (memfd_ < 0) {
      *error = std::string("memfd_create: ") + std::strerror(errno);
      return nullptr;
    }
  }
  if (bytes <= size_) return base_;
  size_t want = (bytes + 4095) & ~size_t{4095};
  if (ftruncate(memfd_, static_cast<off_t>(want)) != 0) {
    *error = "cannot size the shared buffers to " + std::to_string(want) +
             " bytes: " + std::strerror(errno);
    return nullptr;
  }
  if (base_) munmap(base_, size_);
  void* p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
  if (p == MAP_FAILED) {
    base_ = nullptr;
    size_ = 0;
    *error = std::string("cannot map the shared buffers: ") + std::strerror(errno);
    return nullptr;
  }
  base_ = static_cast<uint8_t*>(p);
  size_ = want;
  return base_;
}

std::optional<std::string> Worker::spawn() {
  if (exe_.empty()) return "the measuring worker program (perfdojo-worker) was not found";
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return std::string("socketpair: ") + std::strerror(errno);
  rlim_t limit = static_cast<rlim_t>(memory_limit_ + size_);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return std::string("fork: ") + std::strerror(errno);
  }
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec.
    int s = fcntl(sv[1], F_DUPFD, 10);
    int m = fcntl(memfd_, F_DUPFD, 10);
    if (s < 0 || m < 0 || dup2(s, 3) < 0 || dup2(m, 4) < 0) _exit(126);
    close(s);
    close(m);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, 0);
    dup2(2, 1);  // a kernel printing must not garble the caller's stdout
    struct rlimit as = {limit, limit}, core = {0, 0};
    setrlimit(RLIMIT_AS, &as);
    setrlimit(RLIMIT_CORE, &core);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(125);
    char* args[] = {const_cast<char*>(exe_.c_str()), nullptr};
    execv(exe_.c_str(), args);
    _exit(127);
  }
  close(sv[1]);
  sock_ = sv[0];
  pid_ = pid;
  limit_region_ = size_;
  inbuf_.clear();
  ++spawns_;
  return std::nullopt;
}

std::string Worker::reap(bool killed, double timeout_s) {
  if (pid_ <= 0) return "the worker is not running";
  if (killed) kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (sock_ >= 0) close(sock_);
  sock_ = -1;
  char buf[64];
  if (killed) {
    std::snprintf(buf, sizeof buf, "%g", timeout_s);
    return std::string("timed out: the kernel ran longer than ") + buf + " s and was killed";
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "the kernel crashed: signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    if (code == 127) return "cannot start the measuring worker " + exe_;
    return "the measuring worker exited with status " + std::to_string(code);
  }
  return "the measuring worker stopped";
}

std::optional<std::string> Worker::request(const std::string& line, double timeout_s,
                                           std::string* reply) {
  std::string msg = line + "\n";
  size_t sent = 0;
  while (sent < msg.size()) {
    ssize_t n = send(sock_, msg.data() + sent, msg.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return reap(false, timeout_s);
    sent += static_cast<size_t>(n);
  }
  double deadline = now_s() + timeout_s;
  for (;;) {
    size_t nl = inbuf_.find('\n');
    if (nl != std::string::npos) {
      *reply = inbuf_.substr(0, nl);
      inbuf_.erase(0, nl + 1);
      return std::nullopt;
    }
    double left = deadline - now_s();
    if (left <= 0) return reap(true, timeout_s);
    struct pollfd pfd = {sock_, POLLIN, 0};
    int pr = poll(&pfd, 1, static_cast<int>(std::ceil(std::min(left, 3600.0) * 1000)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) continue;  // the deadline check above decides
    char buf[4096];
    ssize_t n = recv(sock_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return reap(false, timeout_s);
    inbuf_.append(buf, static_cast<size_t>(n));
  }
}

std::optional<std::string> Worker::load(const std::string& so, const std::vector<size_t>& offsets,
                                        double timeout_s, size_t end) {
  // The memory limit is set when the worker starts; a larger region needs a fresh worker.
  if (pid_ > 0 && size_ > limit_region_) stop();
  if (pid_ <= 0)
    if (auto err = spawn()) return err;
  std::string line = "load " + std::to_string(size_) + " " + std::to_string(offsets.size());
  for (size_t o : offsets) line += " " + std::to_string(o);
  line += " " + std::to_string(end > 0 ? std::min(end, size_) : size_) + " " + so;
  std::string reply;
  // Loading maps the kernel's static buffers; it gets the run timeout plus time to start.
  if (auto err = request(line, timeout_s + 10, &reply)) return err;
  if (reply == "ok") return std::nullopt;
  return reply.rfind("err ", 0) == 0 ? reply.substr(4) : "unexpected worker reply: " + reply;
}

Worker::Timing Worker::run(int batch, bool flush, double timeout_s) {
  Timing t;
  if (pid_ <= 0) {
    t.error = "no kernel loaded";
    return t;
  }
  std::string reply;
  if (auto err =
          request("run " + std::to_string(batch) + " " + (flush ? "1" : "0"), timeout_s, &reply)) {
    t.error = err;
    return t;
  }
  if (reply.rfind("ok ", 0) == 0) {
    t.seconds = std::strtod(reply.c_str() + 3, nullptr);
    return t;
  }
  t.error = reply.rfind("err ", 0) == 0 ? reply.substr(4) : "unexpected worker reply: " + reply;
  return t;
}

void Worker::stop() {
  if (pid_ <= 0) return;
  send(sock_, "quit\n", 5, MSG_NOSIGNAL);
  // A polite quit first; a worker stuck in a kernel is killed.
  struct pollfd pfd = {sock_, POLLIN, 0};
  poll(&pfd, 1, 200);
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 50 && done == 0; ++i) {
    done = waitpid(pid_, &status, WNOHANG);
    if (done == 0) usleep(2000);
  }
  if (done == 0) {
    kill(pid_, SIGKILL);
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
  close(sock_);
  sock_ = -1;
}

}  // namespace perfdojo::backends
