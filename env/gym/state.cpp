#include "gym/state.h"

#include <cereal/archives/binary.hpp>
#include <cereal/archives/json.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace perfdojo::env {

namespace {
constexpr uint32_t kMagic = 0x50444a53;  // "PDJS"
constexpr uint32_t kVersion = 1;

// Walks cereal's binary layout of an EpisodeState, checking every length prefix against the
// bytes that remain, so a corrupt file can never make cereal allocate gigabytes.
class LayoutCheck {
 public:
  LayoutCheck(const std::string& bytes) : b_(bytes) {}
  bool skip(uint64_t n) {
    if (n > b_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  bool size(uint64_t& n) {
    if (b_.size() - pos_ < 8) return false;
    std::memcpy(&n, b_.data() + pos_, 8);
    pos_ += 8;
    return n <= b_.size() - pos_;
  }
  bool str() {
    uint64_t n;
    return size(n) && skip(n);
  }
  bool state() {
    uint64_t n;
    if (!skip(8) || !str() || !str() || !str() || !skip(8))
      return false;  // magic+version, 3 strings, seed
    if (!size(n)) return false;
    for (uint64_t i = 0; i < n; ++i)
      if (!str()) return false;
    if (!size(n) || n > (b_.size() - pos_) / 8 || !skip(n * 8)) return false;
    return skip(16) && pos_ == b_.size();
  }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};
}  // namespace

std::string save_state(const EpisodeState& s, const std::string& path, const std::string& format) {
  if (format != "binary" && format != "json")
    return "unknown state format '" + format + "' (binary or json)";
  // Write to a temporary then rename, so a crash never leaves half a file under the real name.
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return "cannot write '" + path + "'";
    try {
      if (format == "binary") {
        cereal::BinaryOutputArchive ar(out);
        ar(kMagic, kVersion, s);
      } else {
        cereal::JSONOutputArchive ar(out);
        ar(cereal::make_nvp("format", std::string("perfdojo-episode")),
           cereal::make_nvp("version", kVersion), cereal::make_nvp("state", s));
      }
    } catch (const std::exception& e) {
      return std::string("cannot serialise the state: ") + e.what();
    }
    if (!out) return "error while writing '" + path + "'";
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return "cannot move '" + tmp + "' to '" + path + "': " + ec.message();
  return "";
}

ir::Result<EpisodeState> load_state(const std::string& path, const std::string& format) {
  auto fail = [&](const std::string& m) { return std::vector<ir::Diagnostic>{{{path, 0, 0}, m}}; };
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail("cannot read file");
  EpisodeState s;
  try {
    if (format == "binary") {
      std::stringstream buf;
      buf << in.rdbuf();
      std::string bytes = buf.str();
      uint32_t magic = 0, version = 0;
      if (bytes.size() >= 8) {
        std::memcpy(&magic, bytes.data(), 4);
        std::memcpy(&version, bytes.data() + 4, 4);
      }
      if (magic != kMagic) return fail("not a PerfDojo episode state (bad magic number)");
      if (version != kVersion) return fail("unsupported state version " + std::to_string(version));
      if (!LayoutCheck(bytes).state()) return fail("corrupt or truncated state");
      std::istringstream is(bytes);
      cereal::BinaryInputArchive ar(is);
      ar(magic, version, s);
    } else if (format == "json") {
      cereal::JSONInputArchive ar(in);
      std::string fmt;
      uint32_t version = 0;
      ar(cereal::make_nvp("format", fmt), cereal::make_nvp("version", version));
      if (fmt != "perfdojo-episode") return fail("not a PerfDojo episode state");
      if (version != kVersion) return fail("unsupported state version " + std::to_string(version));
      ar(cereal::make_nvp("state", s));
    } else {
      return fail("unknown state format '" + format + "' (binary or json)");
    }
  } catch (const std::exception& e) {
    return fail(std::string("corrupt or truncated state: ") + e.what());
  }
  return s;
}

}  // namespace perfdojo::env
