// The measuring worker: a separate process (build/bin/perfdojo-worker) that dlopens compiled
// kernels and runs them on buffers shared with the caller through a memory file. A kernel that
// crashes, hangs or allocates without bound takes the worker down, never the caller; the next
// load starts a fresh worker.
//
// Protocol (one text line each way over a socket at fd 3; the buffers are the memory file at fd 4):
//   load SIZE N OFF_1 .. OFF_N END PATH -> "ok" | "err MESSAGE"   map SIZE bytes, dlopen PATH,
//                                        point perfdojo_entry's N parameters at the offsets; the
//                                        parameters end at byte END of the region
//   run BATCH FLUSH                  -> "ok SECONDS" | "err MESSAGE"  BATCH calls back to back,
//                                        after evicting the parameters' bytes (from the lowest
//                                        offset to END) from every cache level when FLUSH is 1
//   quit                             -> the worker exits
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace perfdojo::backends {

/// The worker program: `configured` when set, else $PERFDOJO_WORKER, else perfdojo-worker next to
/// the running program or in ../bin, else the build tree's bin/perfdojo-worker. "" when none
/// exists.
std::string find_worker(const std::string& configured = "");

/// One worker process and the shared buffer region, owned by one backend instance.
class Worker {
 public:
  /// `exe`: the worker program. `memory_limit_bytes`: the worker's RLIMIT_AS on top of the
  /// shared region (a runaway allocation in a kernel fails there).
  Worker(std::string exe, uint64_t memory_limit_bytes);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// The shared region, grown to at least `bytes`; nullptr with `error` set when it cannot be.
  uint8_t* reserve(size_t bytes, std::string* error);
  /// Loads the kernel in `so` with its parameters at `offsets` in the shared region; starts a
  /// worker when none runs. An error (dlopen failed, the worker died or timed out) is returned.
  /// `end`: where the parameters end in the region (what a flushing `run` evicts; 0: the
  /// region's end).
  std::optional<std::string> load(const std::string& so, const std::vector<size_t>& offsets,
                                  double timeout_s, size_t end = 0);

  /// Time of one `run` request.
  struct Timing {
    std::optional<std::string> error;  ///< crash ("signal 11 ..."), timeout, or worker error
    double seconds = 0;                ///< wall time of the whole batch
  };
  /// Calls the loaded kernel `batch` times back to back; a batch longer than `timeout_s` kills
  /// the worker and is reported as a timeout. `flush`: first evict the kernel's parameters from
  /// every cache level (they come from memory, as when other work ran between two calls).
  Timing run(int batch, bool flush, double timeout_s);

  /// Whether a worker process is running.
  bool alive() const { return pid_ > 0; }
  /// Stops the worker process; the next load starts a fresh one.
  void stop();
  /// How many worker processes this instance has started (a crash or timeout costs one).
  int spawns() const { return spawns_; }

 private:
  std::optional<std::string> spawn();
  std::optional<std::string> request(const std::string& line, double timeout_s, std::string* reply);
  std::string reap(bool killed, double timeout_s);

  std::string exe_;
  uint64_t memory_limit_;
  int memfd_ = -1;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  pid_t pid_ = -1;
  int sock_ = -1;
  size_t limit_region_ = 0;  ///< region size the running worker's memory limit was set for
  std::string inbuf_;
  int spawns_ = 0;
};

}  // namespace perfdojo::backends
