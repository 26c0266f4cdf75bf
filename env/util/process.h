// The one process helper: start a program with an argv (no shell), capture what it prints, bound
// its time, report how it ended. Used to run compilers (backends), evaluate_agent (the CLI's
// `optimize --agent`) and the PyTorch baseline (benchmarks).
#pragma once

#include <string>
#include <vector>

namespace perfdojo::util {

/// How run_process runs a program.
struct ProcessOptions {
  /// Kill the program, and every process it started, after this many seconds (0: no limit).
  double timeout_s = 0;
};

/// How a program ended.
struct ProcessResult {
  bool started = false;    ///< the program could be started at all
  bool timed_out = false;  ///< killed at the deadline
  /// The exit status; 128 + N when killed by signal N; -1 when it could not start.
  int exit_code = -1;
  /// stdout and stderr together, in the order written. When the program could not start, why
  /// ("cannot run NAME: ..."); when it timed out, ends with "(killed after T s)".
  std::string output;
  /// Started, finished in time and exited with 0.
  bool ok() const { return started && !timed_out && exit_code == 0; }
};

/// Runs argv[0] (looked up in PATH when it has no '/') with argv, stdin from /dev/null, in a
/// process group of its own (so a timeout also kills what it started: cc1, as, ld, ...), and
/// waits for it. The deadline holds for its exit too, not only for its output.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

/// The path of `name` as execvp would find it (names with a '/' are taken as paths); "" if none.
std::string find_executable(const std::string& name);

}  // namespace perfdojo::util
