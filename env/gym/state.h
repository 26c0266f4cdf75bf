// An episode's state: what it takes to restore it elsewhere or to prove it correct.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/diagnostic.h"

namespace perfdojo::env {

/// Benchmark, seed, the action trace and the rewards it earned (CompilerGym's saved state).
struct EpisodeState {
  std::string benchmark;
  std::string backend;
  std::string reward_space;
  uint64_t seed = 0;
  std::vector<std::string> trace;  ///< actions as text, one per applied (legal) action
  std::vector<double> rewards;     ///< reward of every step, illegal ones included
  double initial_time_s = 0;
  double final_time_s = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(benchmark, backend, reward_space, seed, trace, rewards, initial_time_s, final_time_s);
  }
};

/// Writes a state as cereal binary ("binary") or JSON ("json"); returns "" or an error.
std::string save_state(const EpisodeState& s, const std::string& path, const std::string& format);
/// Reads a state written by save_state; a corrupt or truncated file is an error, never a crash.
ir::Result<EpisodeState> load_state(const std::string& path, const std::string& format);

/// What validate found.
struct Validation {
  bool ok = false;
  bool trace_legal = false;        ///< every action was legal when replayed
  bool reward_reproduced = false;  ///< deterministic backends: the final time matched
  bool semantics_checked = false;  ///< the interpreter ran (possibly on a scaled-down copy)
  bool semantics_equal = false;
  std::string scaled_note;  ///< sizes used for the semantic check when scaled down
  std::string message;      ///< the first problem, or "ok"
};

}  // namespace perfdojo::env
