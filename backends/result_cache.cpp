#include "backends/result_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "backends/compiler.h"

namespace perfdojo::backends {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMagic = "perfdojo-result v1";

// Values are written one per line; a newline inside one would split it.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end && *end == '\0';
}

}  // namespace

std::string CacheKey::text() const {
  return "program=" + hex64(program_hash) + " backend=" + backend +
         " seed=" + std::to_string(seed) + " variant=" + variant + " cpu=" + cpu +
         " flags=" + one_line(flags);
}

std::string ResultCache::path_of(const CacheKey& key) const {
  return (fs::path(dir_) / key.backend / (hex64(stable_hash(key.text())) + ".txt")).string();
}

std::optional<Measurement> ResultCache::lookup(const CacheKey& key) const {
  if (!enabled()) return std::nullopt;
  std::ifstream in(path_of(key));
  if (!in) return std::nullopt;
  std::string magic, stored_key;
  if (!std::getline(in, magic) || magic != kMagic) return std::nullopt;
  if (!std::getline(in, stored_key) || stored_key != "key " + one_line(key.text()))
    return std::nullopt;
  std::map<std::string, std::string> f;
  std::string line;
  while (std::getline(in, line)) {
    auto sp = line.find(' ');
    if (sp == std::string::npos) return std::nullopt;
    f[line.substr(0, sp)] = line.substr(sp + 1);
  }
  if (f["end"] != "ok") return std::nullopt;  // a truncated entry
  Measurement m;
  double reps = 0, verified = 0;
  if (!parse_double(f["median_s"], &m.median_s) || !parse_double(f["min_s"], &m.min_s) ||
      !parse_double(f["spread"], &m.spread) || !parse_double(f["reps"], &reps) ||
      !parse_double(f["verified"], &verified) ||
      !parse_double(f["max_rel_error"], &m.max_rel_error))
    return std::nullopt;
  if (!(m.median_s > 0) || !(m.min_s > 0)) return std::nullopt;
  m.reps = static_cast<int>(reps);
  m.verified = verified != 0;
  m.flags = f["flags"];
  m.verification = f["verification"];
  m.cached = true;
  m.compile_s = 0;
  return m;
}

void ResultCache::store(const CacheKey& key, const Measurement& m) const {
  if (!enabled() || !m.ok()) return;
  std::string path = path_of(key);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  static std::atomic<int> counter{0};
  std::string tmp = path + ".tmp" + std::to_string(getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kMagic << "\n"
        << "key " << one_line(key.text()) << "\n"
        << "median_s " << num(m.median_s) << "\n"
        << "min_s " << num(m.min_s) << "\n"
        << "spread " << num(m.spread) << "\n"
        << "reps " << m.reps << "\n"
        << "verified " << (m.verified ? 1 : 0) << "\n"
        << "max_rel_error " << num(m.max_rel_error) << "\n"
        << "flags " << one_line(m.flags) << "\n"
        << "verification " << one_line(m.verification) << "\n"
        << "end ok\n";
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

std::string cpu_identity() {
  static const std::string kId = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model = "unknown-cpu", flags;
    while (std::getline(in, line)) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string k = line.substr(0, colon);
      while (!k.empty() && (k.back() == ' ' || k.back() == '\t')) k.pop_back();
      std::string v = line.substr(colon + 1);
      if (!v.empty() && v[0] == ' ') v.erase(0, 1);
      if (k == "model name" && model == "unknown-cpu") model = v;
      if (k == "flags" && flags.empty()) flags = v;
      if (model != "unknown-cpu" && !flags.empty()) break;
    }
    return one_line(model) + " [flags " + hex64(stable_hash(flags)).substr(0, 8) + "]";
  }();
  // Features hidden by $PERFDOJO_HIDE_CPU_FEATURES make another machine: its own cached
  // results and profile, never the full machine's.
  if (const char* hidden = std::getenv("PERFDOJO_HIDE_CPU_FEATURES"); hidden && *hidden)
    return kId + " [hiding " + one_line(hidden) + "]";
  return kId;
}

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/perfdojo";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/perfdojo";
  return "";
}

}  // namespace perfdojo::backends
