// Shared plumbing of the `perfdojo` subcommands: their option specs and output conventions.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/diagnostic.h"
#include "util/args.h"

namespace perfdojo::cli {

/// Exit codes: 0 success, 1 the input is invalid (or a check failed), 2 usage error; `optimize`
/// and `measure` add 3 not verifiable (no check could run), 4 wrong (checked: the code disagrees
/// with the interpreter), 5 failed (the code could not be compiled or run). docs/cli.md's table.
inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalid = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotVerifiable = 3;
inline constexpr int kExitWrong = 4;
inline constexpr int kExitFailed = 5;

/// The exit code of an optimiser outcome (optimizer::Report::outcome): verified and unchanged
/// are successes.
inline int outcome_exit_code(const std::string& outcome) {
  if (outcome == "verified" || outcome == "unchanged") return kExitOk;
  if (outcome == "wrong") return kExitWrong;
  if (outcome == "failed") return kExitFailed;
  return kExitNotVerifiable;
}

/// Parsed command line of one subcommand (the one parser of every program: util/args.h).
using Args = util::Args;

/// One subcommand: which options take a value, which are switches, and the handler.
struct Command {
  std::string name;
  std::string usage;    ///< e.g. "check FILE"
  std::string summary;  ///< one line
  std::set<std::string> value_options;
  std::set<std::string> switch_options;
  std::function<int(const Args&)> run;
};

/// Prints diagnostics to stderr, or as a JSON object on stdout when `json`.
int report_errors(const std::vector<ir::Diagnostic>& errors, bool json, const std::string& file);
/// JSON array of diagnostics: [{"file","line","col","message"}].
std::string diagnostics_json(const std::vector<ir::Diagnostic>& errors);
/// A usage error (exit 2): message to stderr, or {"ok":false,"error":...} with --json.
int usage_error(const std::string& message, bool json);

/// An integer option `--name` in [lo, hi] into `out` (left as it is when absent); false, with the
/// usage error's exit code in `rc`, when the value is not one.
bool int_option(const Args& a, const std::string& name, int64_t lo, int64_t hi, int64_t* out,
                int* rc);

/// Where the CLI keeps this machine's calibrated profile (and `optimize` its result cache):
/// ~/.cache/perfdojo, or "" without $HOME.
std::string profile_dir();

/// Subcommands of the IR module (check, fmt, kernels, run).
std::vector<Command> ir_commands();
/// Subcommands of the transforms module (actions, apply).
std::vector<Command> transform_commands();
/// Subcommands of the x86 backends (codegen, measure).
std::vector<Command> backend_commands();
/// Subcommands of the cost model (calibrate, estimate).
std::vector<Command> cost_commands();
/// Subcommands of the Gym socket bridge (serve, episode).
std::vector<Command> bridge_commands();

/// The optimiser (optimize).
std::vector<Command> optimize_commands();
/// Subcommands of the measurement farm (measure-worker).
std::vector<Command> farm_commands();
std::vector<Command> model_commands();

}  // namespace perfdojo::cli
