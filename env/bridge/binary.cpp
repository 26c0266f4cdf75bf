#include "bridge/binary.h"

#include <bit>
#include <cstring>
#include <exception>

#include "bridge/base64.h"

namespace perfdojo::bridge {

namespace {

// Every host the project builds for (x86-64, AArch64, RISC-V) is little-endian, so records are
// the host's own bytes.
static_assert(std::endian::native == std::endian::little,
              "binary frames assume a little-endian host");

template <class T>
T read_le(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void put_le(std::string& out, T v) {
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  out.append(b, sizeof v);
}

// Appends an array of 4-byte values.
template <class T>
void put_array(std::string& out, const std::vector<T>& v) {
  static_assert(sizeof(T) == 4);
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

void put_bytes(std::string& out, std::string_view bytes) {
  put_le(out, static_cast<uint32_t>(bytes.size()));
  out.append(bytes);
}

std::string record(const env::Observation& o, const env::Info& info, double reward, bool terminated,
                   bool truncated, const env::EnvConfig& config) {
  std::string out;
  size_t obs_bytes = 0;
  for (const auto& s : config.observation_spaces)
    obs_bytes += s == "features" ? o.features.size() * 4 : o.tokens.size() * 4;
  out.reserve(48 + obs_bytes + info.action_mask.size() / 8 + 16);
  out.push_back(0);  // ok
  out.push_back(static_cast<char>(terminated));
  out.push_back(static_cast<char>(truncated));
  out.push_back(static_cast<char>((info.illegal_action ? 1 : 0) |
                                  (info.action_had_no_effect ? 2 : 0) | (info.error ? 4 : 0)));
  put_le(out, static_cast<uint32_t>(info.step));
  put_le(out, reward);
  put_le(out, info.time_s);
  put_le(out, info.initial_time_s);
  put_le(out, info.best_time_s);
  put_le(out, static_cast<uint32_t>(obs_bytes));
  for (const auto& s : config.observation_spaces) {
    if (s == "features") put_array(out, o.features);
    if (s == "tokens") put_array(out, o.tokens);
  }
  put_bytes(out, pack_mask(info.action_mask));
  put_bytes(out, info.error            ? std::string_view(*info.error)
                 : info.illegal_action ? std::string_view(info.legality_message)
                                       : std::string_view());
  return out;
}

}  // namespace

std::optional<Error> parse_binary_request(std::string_view body, int max_entries,
                                          BinaryRequest* out) {
  auto bad = [](std::string m) {
    return Error{ErrorType::kBadRequest, "binary frame: " + std::move(m)};
  };
  if (body.size() < kBinaryHeaderBytes)
    return bad("a header is 8 bytes, the frame has " + std::to_string(body.size()));
  if (static_cast<unsigned char>(body[0]) != kBinaryMagic)
    return bad("byte 0 is not the magic 0xB5");
  if (static_cast<unsigned char>(body[1]) != kBinaryVersion)
    return bad("byte 1: version " + std::to_string(static_cast<unsigned char>(body[1])) +
               " is not supported; this server speaks binary version 1");
  const uint16_t count = read_le<uint16_t>(body.data() + 2);
  out->id = read_le<uint32_t>(body.data() + 4);
  if (count == 0) return bad("bytes 2-3: the entry count is 0");
  if (count > max_entries)
    return bad("bytes 2-3: " + std::to_string(count) + " entries exceed the limit of " +
               std::to_string(max_entries) + " (--max-sessions)");
  const size_t want = kBinaryHeaderBytes + size_t{count} * kBinaryEntryBytes;
  if (body.size() != want)
    return bad(std::to_string(count) + " entries make " + std::to_string(want) +
               " bytes, the frame has " + std::to_string(body.size()));
  out->entries.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const char* p = body.data() + kBinaryHeaderBytes + i * kBinaryEntryBytes;
    BinaryEntry& e = out->entries[i];
    e.session = read_le<uint64_t>(p);
    e.value = read_le<uint64_t>(p + 8);
    const uint32_t kind = read_le<uint32_t>(p + 16);
    if (kind < 1 || kind > 3)
      return bad("entry " + std::to_string(i) + " (byte " +
                 std::to_string(kBinaryHeaderBytes + i * kBinaryEntryBytes + 16) + "): kind " +
                 std::to_string(kind) + " is not 1 (step), 2 (reset with seed) or 3 (reset)");
    e.kind = static_cast<BinaryEntry::Kind>(kind);
  }
  return std::nullopt;
}

std::optional<std::string> binary_unsupported(const env::EnvConfig& config) {
  for (const auto& s : config.observation_spaces)
    if (s != "features" && s != "tokens")
      return "binary frames carry the features and tokens observations only; this session "
             "observes '" +
             s + "' (use the JSON step)";
  return std::nullopt;
}

std::string binary_error_record(const Error& e) {
  std::string out(4, '\0');
  out[0] = 1;
  put_le(out, uint32_t{0});
  for (int i = 0; i < 4; ++i) put_le(out, 0.0);
  put_le(out, uint32_t{0});
  put_le(out, uint32_t{0});
  put_bytes(out, std::string(error_type_name(e.type)) + ": " + e.message);
  return out;
}

std::string run_binary_entry(env::Env& e, const BinaryEntry& entry) {
  try {
    if (auto why = binary_unsupported(e.config()))
      return binary_error_record({ErrorType::kBadRequest, *why});
    if (entry.kind == BinaryEntry::Kind::kStep) {
      const int n = e.action_spec().n;
      if (entry.value >= static_cast<uint64_t>(n))
        return binary_error_record(
            {ErrorType::kInvalidAction, "action " + std::to_string(entry.value) +
                                            " is out of range [0, " + std::to_string(n) +
                                            "); the session is unchanged"});
      env::StepResult r = e.step(static_cast<int>(entry.value));
      return record(r.observation, r.info, r.reward, r.terminated, r.truncated, e.config());
    }
    std::optional<uint64_t> seed;
    if (entry.kind == BinaryEntry::Kind::kResetSeed) seed = entry.value;
    auto [obs, info] = e.reset(seed);
    return record(obs, info, 0.0, false, false, e.config());
  } catch (const std::exception& ex) {
    return binary_error_record({ErrorType::kInternal, std::string("internal error: ") + ex.what()});
  }
}

std::string binary_reply(uint32_t id, const std::vector<std::string>& records) {
  size_t total = kBinaryHeaderBytes;
  for (const auto& r : records) total += r.size();
  std::string out;
  out.reserve(total);
  out.push_back(static_cast<char>(kBinaryMagic));
  out.push_back(static_cast<char>(kBinaryVersion));
  put_le(out, static_cast<uint16_t>(records.size()));
  put_le(out, id);
  for (const auto& r : records) out += r;
  return out;
}

}  // namespace perfdojo::bridge
