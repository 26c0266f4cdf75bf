#include "backends/compiler.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "util/process.h"

namespace perfdojo::backends {
namespace {

namespace fs = std::filesystem;

// The first lines of a compiler's complaint: enough to see the problem, short enough for a record.
std::string trim_diagnostics(const std::string& s) {
  std::string out;
  int lines = 0;
  size_t pos = 0;
  while (pos < s.size() && lines < 12) {
    size_t nl = s.find('\n', pos);
    if (nl == std::string::npos) nl = s.size();
    out += s.substr(pos, nl - pos) + "\n";
    pos = nl + 1;
    ++lines;
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

uint64_t stable_hash(const std::string& s, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string compiler_version(const std::string& compiler) {
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(compiler);
  if (it != cache.end()) return it->second;
  std::string v;
  // Bounded: a broken compiler must not stall every measurement that records its version.
  if (!find_executable(compiler).empty()) {
    util::ProcessResult r = util::run_process({compiler, "--version"}, {.timeout_s = 5.0});
    if (r.ok()) v = r.output.substr(0, r.output.find('\n'));
  }
  cache[compiler] = v;
  return v;
}

CompileResult compile_shared_object(const std::string& compiler,
                                    const std::vector<std::string>& flags,
                                    const std::string& source, const std::string& dir,
                                    const std::vector<std::string>& libs, double timeout_s) {
  CompileResult r;
  std::string key = compiler;
  for (const auto& f : flags) key += '\0' + f;
  for (const auto& l : libs) key += "\0lib " + l;
  key += '\0' + source;
  std::string stem = (fs::path(dir) / ("k" + hex64(stable_hash(key)))).string();
  r.so_path = stem + ".so";
  std::error_code ec;
  if (fs::exists(r.so_path, ec)) {
    r.reused = true;
    return r;
  }
  fs::create_directories(dir, ec);
  // Another thread of this process may build the same source at the same moment (the optimiser
  // compiles ahead on a second core): every file is written under a name of its own and renamed
  // into place, so neither ever reads the other's half-written file.
  static std::atomic<uint64_t> serial{0};
  const std::string unique = std::to_string(getpid()) + "." + std::to_string(serial.fetch_add(1));
  {
    const std::string c_tmp = stem + ".c.tmp" + unique;
    {
      std::ofstream out(c_tmp, std::ios::binary);
      out << source;
      if (!out) {
        r.error = "cannot write " + stem + ".c";
        return r;
      }
    }
    fs::rename(c_tmp, stem + ".c", ec);
    if (ec) {
      r.error = "cannot write " + stem + ".c: " + ec.message();
      return r;
    }
  }
  std::string tmp = stem + ".so.tmp" + unique;
  std::vector<std::string> argv = {compiler};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (const char* f : {"-shared", "-fPIC", "-o"}) argv.push_back(f);
  argv.push_back(tmp);
  argv.push_back(stem + ".c");
  argv.insert(argv.end(), libs.begin(), libs.end());  // after the source: --as-needed linkers
  auto t0 = std::chrono::steady_clock::now();
  util::ProcessResult run = util::run_process(argv, {.timeout_s = timeout_s});
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!run.ok()) {
    fs::remove(tmp, ec);
    if (run.timed_out) {
      r.error = "compile timed out after " + std::to_string(timeout_s) + " s (" + compiler +
                ", source " + stem + ".c)";
      return r;
    }
    r.error = "compile failed (" + compiler + " exit " + std::to_string(run.exit_code) +
              ", source " + stem + ".c):\n" + trim_diagnostics(run.output);
    return r;
  }
  fs::rename(tmp, r.so_path, ec);
  if (ec) r.error = "cannot rename " + tmp + ": " + ec.message();
  return r;
}

namespace {

std::optional<std::string> scan_for_contraction(const std::string& so_path, bool source_fuses) {
  if (find_executable("objdump").empty()) return std::nullopt;
  util::ProcessResult r =
      util::run_process({"objdump", "-d", "--no-show-raw-insn", so_path}, {.timeout_s = 20.0});
  if (!r.ok()) return std::nullopt;
  // "  1a2b:\tvfmaddsub231ps %zmm1,%zmm2,%zmm3": the mnemonic follows the first tab.
  size_t pos = 0;
  while (pos < r.output.size()) {
    size_t end = r.output.find('\n', pos);
    if (end == std::string::npos) end = r.output.size();
    size_t tab = r.output.find('\t', pos);
    if (tab < end) {
      size_t b = tab + 1, e = b;
      while (e < end && r.output[e] != ' ' && r.output[e] != '\t') ++e;
      std::string m = r.output.substr(b, e - b);
      auto starts = [&](const char* p) { return m.rfind(p, 0) == 0; };
      if (starts("vfmaddsub") || starts("vfmsubadd"))
        return m + " (an alternating fused add/subtract)";
      if (!source_fuses &&
          (starts("vfmadd") || starts("vfmsub") || starts("vfnmadd") || starts("vfnmsub")))
        return m + " (a fused multiply-add the source has none of)";
    }
    pos = end + 1;
  }
  return std::string();
}

}  // namespace

std::optional<std::string> unasked_contraction(const std::string& so_path, bool source_fuses) {
  // Objects are named by a hash of what built them: one scan per object and process.
  static std::mutex mu;
  static std::map<std::pair<std::string, bool>, std::optional<std::string>> seen;
  const auto key = std::make_pair(so_path, source_fuses);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = seen.find(key); it != seen.end()) return it->second;
  }
  auto found = scan_for_contraction(so_path, source_fuses);
  std::lock_guard<std::mutex> lock(mu);
  if (seen.size() > 4096) seen.clear();  // bounded: a long search compiles thousands
  return seen.emplace(key, found).first->second;
}

}  // namespace perfdojo::backends
