// Cross targets: `aarch64_neon`, `aarch64_sve` and `riscv64_rvv`. The C printer's code (GCC
// vector extensions at the target's register width) is cross-compiled with Debian's
// cross-compilers into a static program, run under user-mode emulation (qemu-user) in a process
// of its own, and its outputs are verified against the reference interpreter.
//
// Times under emulation say nothing about the hardware, so measure() never reports one: the
// time is the cost model's estimate for the target's built-in profile (machine_profile.h:
// neoverse-n1, neoverse-v1, snitch; docs/cross.md gives their sources), and the flags say so.
// The results are deterministic.
//
// measure(p): check p; estimate its time on the profile; when MeasureOptions::verify, print C,
// cross-compile it (a compile error is an error), and when the program is small enough to
// interpret (BackendConfig::verify_interpreter_max_flops, default 1e7) run it under the emulator on
// ir::make_inputs(p, seed) and compare with the interpreter (the x86 backends' tolerance). A
// crash, a timeout (MeasureOptions::timeout_s) or a wrong result is the measurement's error and
// never touches the caller. Larger programs are compiled, not run (verified = false): verify
// them on a scaled-down instance, as the optimiser does.
//
// BackendConfig fields read: verify_interpreter_max_flops; keep_build_dir (keeps the sources and
// programs); inject (the x86 backend's test hook: "segv", "hang", "wrong").
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "backends/codegen_c.h"

namespace perfdojo::backends {

/// One cross target: how its code is printed, compiled, run and modelled.
struct CrossTarget {
  std::string name;      ///< registry name, e.g. "aarch64_neon"
  std::string profile;   ///< built-in profile of the modelled core, e.g. "neoverse-n1" ("": x86's)
  std::string compiler;  ///< cross C compiler (looked up in PATH)
  std::vector<std::string> flags;  ///< before -o OUT SOURCE; the program is linked statically
  std::string emulator;            ///< qemu-user binary
  std::vector<std::string> emulator_args;  ///< before the program, e.g. {"-cpu", "max,sve256=on"}
  int vector_bytes =
      16;  ///< register width the printer writes `:vec` scopes in (the profile's lanes)
  std::string packages;      ///< the Debian packages that bring compiler and emulator
  bool locals_only = false;  ///< every temporary a local (none static, so none starts zeroed)
  bool cuda = false;         ///< CUDA C++ (CodegenOptions::cuda) run natively; emulator empty
};

/// The cross targets, in registry order.
const std::vector<CrossTarget>& cross_targets();

/// `x86_memcheck`: this machine's C compiler (AVX2 code, every temporary a local so that nothing
/// starts defined) run under valgrind's memcheck. A read of memory the kernel never wrote that
/// reaches an output or decides a branch fails the run with valgrind's report, which the
/// interpreter's comparison alone cannot see when the value happens to match. Timed by the x86
/// cost model (the built-in profile); a checking tool, not a speed.
const CrossTarget& memcheck_target();
/// Adds a target that another backend builds on this one (cuda_backend.cpp registers `cuda`), so
/// that cross_target finds it by name without this file knowing it. Returns true.
bool register_cross_target(const CrossTarget* target);

/// A cross target (or memcheck_target, or a registered one such as cuda) by name, or nullptr.
const CrossTarget* cross_target(std::string_view name);

/// A new backend for `target`. Its cost model reads `config.machine_profile` when set, else
/// the target's built-in profile.
std::unique_ptr<Backend> make_cross_backend(const CrossTarget& target, const BackendConfig& config);

/// The C (or, for cuda, CUDA wrapped in `cuda_namespace` when given) compiled for `p` on
/// `target`: the kernel; the test driver is appended when compiling.
GeneratedC cross_generate_c(const CrossTarget& target, const ir::Program& p,
                            const BackendConfig& config = {},
                            const std::string& cuda_namespace = "");

}  // namespace perfdojo::backends
