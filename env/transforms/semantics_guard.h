// The semantics guard: random trajectories of legal actions, each result run by the strict
// interpreter against the original. The promise every move makes (any sequence of legal actions
// computes what the original computed) checked on one program; the suite's guard test and
// `perfdojo guard` both run it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "transforms/action.h"
#include "transforms/transform.h"

namespace perfdojo::transforms {

struct GuardOptions {
  int trajectories = 200;      ///< random trajectories to run
  int max_steps = 30;          ///< each runs 1..max_steps legal actions (uniform)
  uint64_t seed = 0;           ///< trajectory t draws from seed ^ (0x9e3779b97f4a7c15 * (t + 1))
  uint64_t input_seed = 1234;  ///< ir::make_inputs seed of the inputs both programs run on
  Target target;
  /// Called after each trajectory with (trajectories done, steps so far).
  std::function<void(int, int)> progress;
};

/// The first trajectory that broke the promise: what broke, and how to reproduce it.
struct GuardFailure {
  int trajectory = 0;
  uint64_t seed = 0;
  std::vector<Action> trace;
  std::string what;    ///< e.g. "output 'y' differs (max relative error 0.5)"
  std::string result;  ///< the program the trace led to, printed
};

struct GuardReport {
  std::string error;     ///< the original itself does not run (then nothing else is set)
  int trajectories = 0;  ///< run to the end (the failing one included)
  int steps = 0;
  std::array<int, kNumKinds> kind_counts{};  ///< actions taken, by kind
  std::optional<GuardFailure> failure;       ///< set at the first violation; the run stops there
};

/// Runs the guard on `original`. Each trajectory takes random legal actions
/// (sample_legal_action), then requires: every action applies; the result checks; the strict
/// interpreter (no read of an element nothing wrote) runs it; every output equals the
/// original's exactly (the interpreter keeps each element's order of operations); the printed
/// trace replays to the same program; the printed program parses back to it.
GuardReport run_semantics_guard(const ir::Program& original, const GuardOptions& options);

/// An instance of `p` the guard can interpret `trajectories` times: `p` itself when interpreting
/// it takes at most `max_work` statement executions, else the largest size halved (to a multiple
/// of 4 from 8 up; sizes within 8 of it, like a halo's N + 2, move with it) until it does, so the
/// sizes keep divisors for the moves to use; small_instance where that gets stuck. nullopt when
/// nothing fits.
std::optional<ir::Program> guard_instance(const ir::Program& p, double max_work, const Target& t);

/// "kernel K, trajectory seed S, trace: ... result: ..." for a failure message.
std::string describe(const GuardFailure& f, const std::string& kernel);

}  // namespace perfdojo::transforms
