// The on-disk result cache: a measurement is stored under a key naming everything it depends on
// (program, backend, compiler and flags, CPU, input seed, measuring options, printer version).
// One small text file per entry; a missing, unreadable or corrupt entry is a miss, never an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "backends/backend.h"

namespace perfdojo::backends {

/// Everything a stored time depends on.
struct CacheKey {
  uint64_t program_hash = 0;  ///< ir::structural_hash
  std::string backend;        ///< registry name
  std::string flags;          ///< compiler, its version and flags
  std::string cpu;            ///< cpu_identity()
  uint64_t seed = 0;          ///< input data seed
  std::string variant;        ///< measuring options that change the result (verify, flush...)

  /// The key as one line of text (what the entry file stores and compares).
  std::string text() const;
};

/// A directory of stored measurements. An empty directory name disables it (every lookup misses).
class ResultCache {
 public:
  explicit ResultCache(std::string dir) : dir_(std::move(dir)) {}
  /// Whether a directory is configured.
  bool enabled() const { return !dir_.empty(); }
  /// The stored measurement for `key` (cached = true, compile_s = 0), or nullopt.
  std::optional<Measurement> lookup(const CacheKey& key) const;
  /// Stores `m` under `key` (atomically: a reader never sees half an entry). Errors are ignored:
  /// a cache that cannot write only costs speed.
  void store(const CacheKey& key, const Measurement& m) const;
  /// The entry file of `key`.
  std::string path_of(const CacheKey& key) const;

 private:
  std::string dir_;
};

/// The CPU as the cache keys on it: /proc/cpuinfo's model name and a hash of its flags line,
/// and the features $PERFDOJO_HIDE_CPU_FEATURES hides (a machine of its own).
std::string cpu_identity();

/// $XDG_CACHE_HOME/perfdojo, else ~/.cache/perfdojo (the CLI's default cache directory).
std::string default_cache_dir();

}  // namespace perfdojo::backends
