// Checkpoints: one file, written atomically (temporary file, fsync, rename, fsync of the folder),
// that a later run resumes from or evaluate_agent loads. Layout (little-endian):
//
//   "PDJAGENT" | u32 version | u64 n, header (key=value lines) | u64 n, model (torch archive)
//   | u64 n, optimiser (torch archive) | u64 FNV-1a-64 of every byte before it
//
// The header holds the full config, the network shape, the counters, the curriculum stage, the
// RNG state, the replay metadata and the best trace found per kernel. Replay contents are not
// saved (tens to hundreds of MB): a resumed run refills the buffer before learning again.
// Loading never throws: a missing, truncated, modified or foreign file is refused with a message.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "agents/config.h"
#include "ir/diagnostic.h"

namespace perfdojo::agents {

/// Format version this build writes and reads.
inline constexpr uint32_t kCheckpointVersion = 1;

/// The best program found for one kernel, as its speed-up and its action trace.
struct KernelBest {
  double speedup = 1.0;
  double initial_time_s = 0;
  double best_time_s = 0;
  std::vector<std::string> trace;
};

/// Everything a checkpoint holds.
struct Checkpoint {
  AgentConfig config;
  int feature_size = 0, action_count = 0, token_vocab = 0;
  int64_t global_step = 0, updates = 0, episodes = 0;
  double elapsed_s = 0, progress = 0;
  int curriculum_stage = 0;
  double stage_started = 0;
  std::string rng_state;  ///< the trainer's std::mt19937_64, as its stream text
  int replay_size = 0, replay_capacity = 0;
  bool replay_prioritized = false;
  std::map<std::string, KernelBest> best;  ///< by kernel URI
  std::string model, optimizer;            ///< torch archives
};

/// Writes `c` to `path` atomically; returns "" or the error.
std::string save_checkpoint(const Checkpoint& c, const std::string& path);
/// Reads a checkpoint, verifying magic, version and checksum.
ir::Result<Checkpoint> load_checkpoint(const std::string& path);
/// The same from the file's bytes (`name` says where they came from in messages). LibTorch-free,
/// like the rest of this file: the torch archives stay opaque bytes here (tests/fuzz fuzzes it).
ir::Result<Checkpoint> load_checkpoint_bytes(std::string_view bytes, const std::string& name);
/// The checksum a checkpoint ends with: FNV-1a-64 of every byte before it.
uint64_t checkpoint_checksum(std::string_view bytes);
/// Why a checkpoint cannot drive a network of this shape and config, or "" when it can:
/// feature size, action count, token vocabulary and every architecture setting must match.
std::string check_compatible(const Checkpoint& c, const AgentConfig& config, int feature_size,
                             int action_count, int token_vocab);

}  // namespace perfdojo::agents
