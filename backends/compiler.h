// Running the machine's C compiler: generated source in, shared object out. Failures are data.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "util/process.h"

namespace perfdojo::backends {

/// The outcome of one compilation.
struct CompileResult {
  std::optional<std::string> error;  ///< the compiler's diagnostics (trimmed) when it failed
  std::string so_path;               ///< the shared object, when it succeeded
  double seconds = 0;                ///< wall time of the compiler run (0 when reused)
  bool reused = false;               ///< an identical earlier build was found in `dir`
};

/// Compiles `source` with `compiler flags... -shared -fPIC -o OUT SOURCE libs...` into `dir`,
/// naming the files by a hash of (compiler, flags, libs, source) so an identical build is reused.
/// A compiler still running after `timeout_s` seconds (0: no limit) is killed with everything it
/// started, and the result says so.
CompileResult compile_shared_object(const std::string& compiler,
                                    const std::vector<std::string>& flags,
                                    const std::string& source, const std::string& dir,
                                    const std::vector<std::string>& libs = {},
                                    double timeout_s = 0);

/// Whether the compiler fused a multiply with an add or subtract the source keeps apart, read off
/// the x86 shared object's instructions: "" when it did not, else what it found. The flags ask
/// for no contraction (-ffp-contract=off), but GCC 12's vectoriser still builds a fused
/// add/subtract (vfmaddsub, its SLP add/sub pattern) from alternating a*b - c, a*b + c lanes
/// (rope's rotation). `source_fuses`: the source calls fma itself (then only the alternating
/// forms, which it never asks for, count). nullopt when objdump cannot read it: unknown.
std::optional<std::string> unasked_contraction(const std::string& so_path, bool source_fuses);

/// The path of `name` as execvp would find it (util/process.h).
using util::find_executable;

/// The first line of `compiler --version` (cached per process); "" when it cannot run.
std::string compiler_version(const std::string& compiler);

/// 64-bit FNV-1a, stable across runs and platforms (file names and cache keys).
uint64_t stable_hash(const std::string& s, uint64_t seed = 0xcbf29ce484222325ULL);

/// `v` as 16 lower-case hex digits.
std::string hex64(uint64_t v);

}  // namespace perfdojo::backends
