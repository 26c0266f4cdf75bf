// perfdojo-worker: runs compiled kernels for the x86 backends in a process of its own (see
// backends/worker.h for the protocol). It is started by the backend, never by hand.
#include <dlfcn.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int kControlFd = 3;
constexpr int kBuffersFd = 4;
constexpr size_t kMaxOpen = 4;  // kernels kept loaded (a reference build and its kernel, ...)

using Entry = void (*)(void* const*);

struct Loaded {
  std::string path;
  void* handle;
  Entry entry;
};

std::deque<Loaded> g_loaded;
Entry g_entry = nullptr;
std::vector<void*> g_bufs;
unsigned char* g_base = nullptr;
size_t g_size = 0;
size_t g_flush_from = 0, g_flush_to = 0;  // the loaded kernel's parameters in the region

void reply(const std::string& s) {
  std::string line = s + "\n";
  size_t sent = 0;
  while (sent < line.size()) {
    ssize_t n = write(kControlFd, line.data() + sent, line.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // the caller is gone
    sent += static_cast<size_t>(n);
  }
}

bool read_line(std::string& buf, std::string* line) {
  for (;;) {
    size_t nl = buf.find('\n');
    if (nl != std::string::npos) {
      *line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      return true;
    }
    char tmp[4096];
    ssize_t n = read(kControlFd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf.append(tmp, static_cast<size_t>(n));
  }
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// OpenMP runtimes must outlive the kernels that pull them in: unloading one while its thread
// pool idles crashes. Loading them here first, never to be unloaded, keeps them resident.
void pin_openmp_runtimes() {
  for (const char* lib : {"libgomp.so.1", "libomp.so.5", "libomp.so"})
    dlopen(lib, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
}

std::string do_load(std::istringstream& in) {
  size_t size = 0, n = 0;
  if (!(in >> size >> n)) return "err malformed load request";
  std::vector<size_t> offs(n);
  for (auto& o : offs)
    if (!(in >> o)) return "err malformed load request";
  size_t end = 0;
  if (!(in >> end) || end > size) return "err malformed load request";
  std::string path;
  std::getline(in >> std::ws, path);
  if (size != g_size) {
    if (g_base) munmap(g_base, g_size);
    g_base = nullptr;
    g_size = 0;
    if (size > 0) {
      void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, kBuffersFd, 0);
      if (p == MAP_FAILED)
        return std::string("err cannot map the shared buffers: ") + std::strerror(errno);
      g_base = static_cast<unsigned char*>(p);
      g_size = size;
    }
  }
  for (size_t o : offs)
    if (o > g_size) return "err buffer offset outside the shared region";
  g_bufs.assign(n, nullptr);
  for (size_t i = 0; i < n; ++i) g_bufs[i] = g_base + offs[i];
  g_flush_from = n > 0 ? *std::min_element(offs.begin(), offs.end()) : 0;
  g_flush_to = std::max(g_flush_from, end);
  g_entry = nullptr;
  for (auto it = g_loaded.begin(); it != g_loaded.end(); ++it) {
    if (it->path == path) {
      Loaded l = *it;
      g_loaded.erase(it);
      g_loaded.push_front(l);
      g_entry = l.entry;
      return "ok";
    }
  }
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    return std::string("err cannot load the kernel: ") + (e ? e : "dlopen failed");
  }
  auto entry = reinterpret_cast<Entry>(dlsym(h, "perfdojo_entry"));
  if (!entry) {
    dlclose(h);
    return "err the kernel has no perfdojo_entry";
  }
  g_loaded.push_front({path, h, entry});
  while (g_loaded.size() > kMaxOpen) {
    dlclose(g_loaded.back().handle);
    g_loaded.pop_back();
  }
  g_entry = entry;
  return "ok";
}

// Evicts the kernel's parameters from every cache level, line by line (what TVM's CPU cache
// flush does): the next call reads its inputs from memory and its outputs' lines are fetched
// again, as when other work ran between two calls. The kernel's code and the worker's own data
// stay cached. Independent of the size of the last-level cache, which a virtual machine may
// misreport.
void flush_caches() {
  unsigned char* from = g_base + (g_flush_from & ~size_t{63});
  unsigned char* to = g_base + g_flush_to;
#if defined(__x86_64__) || defined(__i386__)
  for (unsigned char* p = from; p < to; p += 64) _mm_clflush(p);
  _mm_mfence();
#else
  static std::vector<unsigned char> scrub(size_t{256} << 20);  // no line flush: write over them
  static unsigned round = 0;
  std::memset(scrub.data(), static_cast<int>(++round & 0xff), scrub.size());
  asm volatile("" : : "r"(scrub.data()) : "memory");
  (void)from;
  (void)to;
#endif
}

std::string do_run(std::istringstream& in) {
  long batch = 0;
  int flush = 0;
  if (!(in >> batch >> flush) || batch < 1) return "err malformed run request";
  if (!g_entry) return "err no kernel loaded";
  if (flush) flush_caches();
  void* const* bufs = g_bufs.data();
  double t0 = now_s();
  for (long i = 0; i < batch; ++i) {
    g_entry(bufs);
    asm volatile("" : : : "memory");
  }
  double t1 = now_s();
  char out[64];
  std::snprintf(out, sizeof out, "ok %.9e", t1 - t0);
  return out;
}

}  // namespace

int main() {
  pin_openmp_runtimes();
  std::string buf, line;
  while (read_line(buf, &line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "load")
      reply(do_load(in));
    else if (cmd == "run")
      reply(do_run(in));
    else if (cmd == "quit")
      return 0;
    else
      reply("err unknown command '" + cmd + "'");
  }
  return 0;
}
