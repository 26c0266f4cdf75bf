// The bridge's binary hot path (docs/bridge.md, "Binary frames"): step and reset of many sessions
// in one frame, observations as raw little-endian arrays and the mask as a bitset. JSON stays
// for everything else and for errors about a frame as a whole. Nothing here touches a socket.
//
// Request body:  u8 magic 0xB5, u8 version 1, u16 count, u32 id, then `count` entries of
//                u64 session, u64 value, u32 kind (1 step: value = action index; 2 reset with
//                seed = value; 3 reset without a seed).
// Reply body:    u8 magic, u8 version, u16 count, u32 id, then one record per entry, in order:
//                u8 status (0 ok, 1 error), u8 terminated, u8 truncated, u8 flags (bit 0 illegal
//                action, bit 1 no effect, bit 2 info.error set), u32 step, f64 reward, f64 time_s,
//                f64 initial_time_s, f64 best_time_s, u32 observation bytes + bytes (the numeric
//                spaces in config order: features f32, tokens i32), u32 mask bytes + bits
//                (numpy.packbits order), u32 message bytes + UTF-8 ("type: message" for an
//                error, else info.error, else the legality message of an illegal action).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bridge/request.h"
#include "gym/env.h"

namespace perfdojo::bridge {

inline constexpr unsigned char kBinaryMagic = 0xB5;
inline constexpr unsigned char kBinaryVersion = 1;
inline constexpr size_t kBinaryHeaderBytes = 8;
inline constexpr size_t kBinaryEntryBytes = 20;

/// One entry of a binary request.
struct BinaryEntry {
  enum class Kind : uint32_t { kStep = 1, kResetSeed = 2, kReset = 3 };
  uint64_t session = 0;
  uint64_t value = 0;
  Kind kind = Kind::kStep;
};

struct BinaryRequest {
  uint32_t id = 0;
  std::vector<BinaryEntry> entries;
};

/// Whether a frame body is a binary request (its first byte; JSON requests start with '{').
inline bool is_binary_frame(std::string_view body) {
  return !body.empty() && static_cast<unsigned char>(body[0]) == kBinaryMagic;
}

/// Reads a binary request, or says precisely what is wrong (byte offsets). At most
/// `max_entries` entries.
std::optional<Error> parse_binary_request(std::string_view body, int max_entries,
                                          BinaryRequest* out);

/// Whether a session's observation spaces fit a binary record (features and tokens only); the
/// message says why not.
std::optional<std::string> binary_unsupported(const env::EnvConfig& config);

/// Runs one entry on its env and encodes its record. Never throws: failures become an error
/// record (the env is unchanged when the entry was refused before acting).
std::string run_binary_entry(env::Env& e, const BinaryEntry& entry);
/// The record of an entry that could not run (e.g. unknown session).
std::string binary_error_record(const Error& e);
/// Header plus the records, in entry order.
std::string binary_reply(uint32_t id, const std::vector<std::string>& records);

}  // namespace perfdojo::bridge
