#include "backends/machine_profile.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "backends/backend.h"
#include "util/json.h"

namespace perfdojo::backends {
namespace {

// One table of the numeric fields drives printing and parsing, so the two never disagree.
struct Field {
  const char* key;
  double MachineProfile::*member;
  const char* doc;
  bool may_be_zero;
};

const std::vector<Field>& fields() {
  static const std::vector<Field> kFields = {
      {"peak_gflops_avx512", &MachineProfile::peak_gflops_avx512,
       "FMA peak, 16 lanes (0: no AVX-512)", true},
      {"peak_gflops_avx2", &MachineProfile::peak_gflops_avx2, "FMA peak, 8 lanes", false},
      {"peak_gflops_scalar", &MachineProfile::peak_gflops_scalar, "FMA peak, scalar", false},
      {"peak_gops_vnni", &MachineProfile::peak_gops_vnni,
       "int8 dot-product peak, vpdpbusd (0: no VNNI)", true},
      {"peak_gflops_bf16", &MachineProfile::peak_gflops_bf16,
       "bf16 dot-product peak, vdpbf16ps (0: no AVX-512 BF16)", true},
      {"fma_latency_cycles", &MachineProfile::fma_latency_cycles, "dependent FMA latency", false},
      {"add_latency_cycles", &MachineProfile::add_latency_cycles, "dependent add latency", false},
      {"freq_ghz", &MachineProfile::freq_ghz, "core clock", false},
      {"l1_bytes", &MachineProfile::l1_bytes, "L1 data cache per core", false},
      {"l2_bytes", &MachineProfile::l2_bytes, "L2 per core", false},
      {"l3_bytes", &MachineProfile::l3_bytes, "L3, shared", false},
      {"l1_ways", &MachineProfile::l1_ways, "L1 associativity", false},
      {"l2_ways", &MachineProfile::l2_ways, "L2 associativity", false},
      {"l3_ways", &MachineProfile::l3_ways, "L3 associativity", false},
      {"l1_bw_gbs", &MachineProfile::l1_bw_gbs, "read bandwidth from L1, one core", false},
      {"l2_bw_gbs", &MachineProfile::l2_bw_gbs, "read bandwidth from L2, one core", false},
      {"l3_bw_gbs", &MachineProfile::l3_bw_gbs, "read bandwidth from L3, one core", false},
      {"dram_bw_gbs", &MachineProfile::dram_bw_gbs, "read bandwidth from memory, one core", false},
      {"dram_bw_all_gbs", &MachineProfile::dram_bw_all_gbs, "read bandwidth from memory, all cores",
       false},
      {"exp_cycles_scalar", &MachineProfile::exp_cycles_scalar, "exp/log/tanh, one element", false},
      {"exp_cycles_vector", &MachineProfile::exp_cycles_vector, "exp/log/tanh, one vector", false},
      {"div_cycles_scalar", &MachineProfile::div_cycles_scalar, "divide/sqrt throughput, scalar",
       false},
      {"div_cycles_vector", &MachineProfile::div_cycles_vector, "divide/sqrt throughput, vector",
       false},
      {"loop_overhead_uops", &MachineProfile::loop_overhead_uops, "uops per loop iteration", true},
      {"fork_join_us", &MachineProfile::fork_join_us, "one parallel scope entry, threads idle",
       true},
      {"fork_join_hot_us", &MachineProfile::fork_join_hot_us, "one entry right after another",
       true},
      {"fork_spin_us", &MachineProfile::fork_spin_us, "idle OpenMP threads spin this long", true},
      {"parallel_efficiency", &MachineProfile::parallel_efficiency, "parallel speed-up / threads",
       false},
      {"call_overhead_us", &MachineProfile::call_overhead_us, "one kernel call", true},
      {"vector_lanes", &MachineProfile::vector_lanes,
       "f32 lanes of the vector unit (0: from the x86 peaks)", true},
      {"peak_gflops_vector", &MachineProfile::peak_gflops_vector,
       "FMA peak at vector_lanes (when set)", true},
      {"vector_registers", &MachineProfile::vector_registers,
       "vector registers (0: from the x86 peaks)", true},
      {"issue_width", &MachineProfile::issue_width, "instructions issued per cycle", false},
      {"loads_per_cycle", &MachineProfile::loads_per_cycle, "load instructions per cycle", false},
      {"stores_per_cycle", &MachineProfile::stores_per_cycle, "store instructions per cycle",
       false},
      {"window_uops", &MachineProfile::window_uops, "instructions in flight that overlap", false},
      {"ssr_streams", &MachineProfile::ssr_streams, "stream semantic registers (Snitch)", true},
      {"hw_loops", &MachineProfile::hw_loops, "1: FREP-style hardware loops (Snitch)", true},
  };
  return kFields;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string unquote(const std::string& s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
  return s;
}

// Sets one key; returns "" or what is wrong with it.
std::string set_key(MachineProfile& p, const std::string& key, const std::string& raw) {
  std::string value = unquote(trim(raw));
  if (key == "name") {
    value = trim(value);  // what printing and parsing again would keep
    if (value.empty()) return "'name' is empty";
    for (unsigned char c : value)
      if (c < 0x20 || c == 0x7f || c == '#' || c == '"' || c == '\\')
        return "'name' may not hold control characters, '#', quotes or backslashes";
    p.name = value;
    return "";
  }
  if (key == "isa") {
    if (value != "x86_avx512" && value != "x86_avx2" && value != "x86_64" &&
        value != "aarch64_neon" && value != "aarch64_sve" && value != "riscv64_rvv" &&
        value != "cuda")
      return "'isa' must be x86_avx512, x86_avx2, x86_64, aarch64_neon, aarch64_sve, "
             "riscv64_rvv or cuda, got '" +
             value + "'";
    p.isa = value;
    return "";
  }
  bool is_cores = key == "cores";
  const Field* f = nullptr;
  for (const auto& x : fields())
    if (key == x.key) f = &x;
  if (!f && !is_cores) return "unknown key '" + key + "'";
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v))
    return "'" + key + "' must be a number, got '" + value + "'";
  bool zero_ok = f && f->may_be_zero;
  if (v < 0 || (v == 0 && !zero_ok)) return "'" + key + "' must be positive, got '" + value + "'";
  if (is_cores) {
    if (v != std::floor(v) || v > 1048576)
      return "'cores' must be a whole number up to 1048576, got '" + value + "'";
    p.cores = static_cast<int>(v);
  } else {
    p.*(f->member) = v;
  }
  return "";
}

}  // namespace

MachineProfile default_profile() { return MachineProfile{}; }

// Published figures; docs/cross.md gives each one's source and marks the estimates.
std::optional<MachineProfile> builtin_profile(const std::string& name) {
  MachineProfile p;
  p.peak_gflops_avx512 = 0;
  p.fork_join_us = 30;
  p.fork_join_hot_us = 2;
  if (name == "neoverse-n1") {  // AWS Graviton2: 64 cores at 2.5 GHz, NEON 128-bit
    p.name = "builtin-neoverse-n1";
    p.isa = "aarch64_neon";
    p.freq_ghz = 2.5;
    p.vector_lanes = 4;
    p.peak_gflops_vector = p.peak_gflops_avx2 = 40;  // 2 FMA pipes x 4 lanes x 2 x 2.5 GHz
    p.peak_gflops_scalar = 10;                       // 2 pipes x 2 x 2.5 GHz
    p.fma_latency_cycles = 4;
    p.add_latency_cycles = 2;
    p.l1_bytes = 64 * 1024.0, p.l1_ways = 4;
    p.l2_bytes = 1024 * 1024.0, p.l2_ways = 8;
    p.l3_bytes = 32 * 1024 * 1024.0, p.l3_ways = 16;
    p.l1_bw_gbs = 159.4, p.l2_bw_gbs = 73.4, p.l3_bw_gbs = 35.9;  // Arm's one-core stream figures
    p.dram_bw_gbs = 20.9, p.dram_bw_all_gbs = 169.6;
    p.cores = 64;
    p.exp_cycles_scalar = 14, p.exp_cycles_vector = 56;  // glibc 2.36 has no AArch64 libmvec
    p.div_cycles_scalar = 7, p.div_cycles_vector = 10;
    p.vector_registers = 32;
    p.issue_width = 4, p.loads_per_cycle = 2, p.stores_per_cycle = 1, p.window_uops = 128;
    return p;
  }
  if (name == "neoverse-v1") {  // AWS Graviton3: 64 cores at 2.6 GHz, SVE 256-bit
    p.name = "builtin-neoverse-v1";
    p.isa = "aarch64_sve";
    p.freq_ghz = 2.6;
    p.vector_lanes = 8;
    p.peak_gflops_vector = p.peak_gflops_avx2 = 83.2;  // 2 SVE FMA pipes x 8 lanes x 2 x 2.6 GHz
    p.peak_gflops_scalar = 20.8;                       // 4 FP pipes x 2 x 2.6 GHz
    p.fma_latency_cycles = 4;
    p.add_latency_cycles = 2;
    p.l1_bytes = 64 * 1024.0, p.l1_ways = 4;
    p.l2_bytes = 1024 * 1024.0, p.l2_ways = 8;
    p.l3_bytes = 32 * 1024 * 1024.0, p.l3_ways = 16;
    p.l1_bw_gbs = 166, p.l2_bw_gbs = 83, p.l3_bw_gbs = 40;  // 64, 32, ~15 B/cycle (estimates)
    p.dram_bw_gbs = 25, p.dram_bw_all_gbs = 250;
    p.cores = 64;
    p.exp_cycles_scalar = 14, p.exp_cycles_vector = 112;
    p.div_cycles_scalar = 7, p.div_cycles_vector = 13;
    p.vector_registers = 32;
    p.issue_width = 5, p.loads_per_cycle = 3, p.stores_per_cycle = 2, p.window_uops = 256;
    return p;
  }
  if (name == "zen3") {  // one core of an AMD EPYC Zen 3 (AVX2, no AVX-512): `perfdojo
    // calibrate` on a 2-core Zen 3 VM (docs/cross.md), so that an agent can train on an AVX2
    // core's widths (8 lanes) and prices instantly
    p.name = "builtin-zen3";
    p.isa = "x86_avx2";
    p.freq_ghz = 3.2;
    p.vector_lanes = 8;
    p.peak_gflops_vector = p.peak_gflops_avx2 = 102.4;
    p.peak_gflops_scalar = 19.3;
    p.fma_latency_cycles = 4;
    p.add_latency_cycles = 3;
    p.l1_bytes = 32 * 1024.0, p.l1_ways = 8;
    p.l2_bytes = 512 * 1024.0, p.l2_ways = 8;
    p.l3_bytes = 32 * 1024 * 1024.0, p.l3_ways = 16;
    p.l1_bw_gbs = 205.8, p.l2_bw_gbs = 101.8, p.l3_bw_gbs = 77.9;
    p.dram_bw_gbs = 22.7, p.dram_bw_all_gbs = 33.1;
    p.cores = 1;  // the env's one core (the model's parallel scopes are not this profile's use)
    p.exp_cycles_scalar = 11, p.exp_cycles_vector = 12;
    p.div_cycles_scalar = 4, p.div_cycles_vector = 10;
    p.vector_registers = 16;
    p.issue_width = 4, p.loads_per_cycle = 2, p.stores_per_cycle = 1, p.window_uops = 192;
    p.fork_join_us = 9.8, p.fork_join_hot_us = 0.7, p.parallel_efficiency = 0.9;
    p.call_overhead_us = 0.3;
    return p;
  }
  if (name == "snitch") {  // one compute core of an 8-core Snitch cluster at 1 GHz (Occamy)
    p.name = "builtin-snitch";
    p.isa = "riscv64_rvv";
    p.freq_ghz = 1.0;
    p.vector_lanes = 2;                             // packed SIMD: 2 x f32 in the 64-bit FPU
    p.peak_gflops_vector = p.peak_gflops_avx2 = 4;  // one vfmac.s per cycle: 2 lanes x 2
    p.peak_gflops_scalar = 2;
    p.fma_latency_cycles = 3;
    p.add_latency_cycles = 3;
    // No caches: the 128 KiB TCDM scratchpad is "L1"; everything else arrives by the cluster's
    // DMA engine (64 B/cycle, shared by 8 cores), modelled as one level behind it.
    p.l1_bytes = 128 * 1024.0, p.l1_ways = 32;
    p.l2_bytes = p.l3_bytes = 1024 * 1024 * 1024.0, p.l2_ways = p.l3_ways = 16;
    p.l1_bw_gbs = 32;  // the core's 64-bit port and three SSR ports, 8 B/cycle each
    p.l2_bw_gbs = p.l3_bw_gbs = p.dram_bw_gbs = 8, p.dram_bw_all_gbs = 64;
    p.cores = 8;
    p.exp_cycles_scalar = 60, p.exp_cycles_vector = 120;  // software exp (no libm unit)
    p.div_cycles_scalar = 12, p.div_cycles_vector = 24;
    p.loop_overhead_uops = 2;
    p.vector_registers = 32;
    p.issue_width = 1, p.loads_per_cycle = 1, p.stores_per_cycle = 1, p.window_uops = 4;
    p.ssr_streams = 3;
    p.hw_loops = 1;
    p.call_overhead_us = 0.05;
    return p;
  }
  if (name == "a100") {  // NVIDIA A100 (SXM4, 40 GB): 108 SMs x 64 FP32 lanes at 1.41 GHz
    // A "core" of the model is one FP32 lane (one CUDA thread's share of an SM); a parallel
    // scope spreads over all 6912. Bandwidths are per lane; the whole GPU's HBM is
    // dram_bw_all_gbs. docs/cuda.md gives the sources and what the model leaves out.
    p.name = "builtin-a100";
    p.isa = "cuda";
    p.freq_ghz = 1.41;
    p.vector_lanes = 1;
    p.peak_gflops_vector = p.peak_gflops_avx2 = p.peak_gflops_scalar = 2.82;  // 19.5 TFLOP/s / 6912
    p.fma_latency_cycles = 4;
    p.add_latency_cycles = 4;
    p.l1_bytes = 192 * 1024.0, p.l1_ways = 4;  // L1 / shared memory per SM
    p.l2_bytes = p.l3_bytes = 40 * 1024 * 1024.0, p.l2_ways = p.l3_ways = 16;
    p.l1_bw_gbs = 2.82;                               // 128 B/cycle per SM, over its 64 lanes
    p.l2_bw_gbs = p.l3_bw_gbs = 0.9;                  // ~6 TB/s of L2 over 6912 lanes (est.)
    p.dram_bw_gbs = 0.225, p.dram_bw_all_gbs = 1555;  // HBM2, 1555 GB/s
    p.cores = 6912;
    p.exp_cycles_scalar = p.exp_cycles_vector = 20;  // expf in software around the SFU (est.)
    p.div_cycles_scalar = p.div_cycles_vector = 10;
    p.vector_registers = 255;  // 32-bit registers a thread may hold
    p.issue_width = 1, p.loads_per_cycle = 1, p.stores_per_cycle = 1, p.window_uops = 8;
    p.fork_join_us = 5, p.fork_join_hot_us = 3, p.fork_spin_us = 0, p.parallel_efficiency = 0.8;
    p.call_overhead_us = 5;  // a launch
    return p;
  }
  return std::nullopt;
}

std::vector<std::string> builtin_profile_names() {
  return {"neoverse-n1", "neoverse-v1", "snitch", "a100", "zen3"};
}

namespace {

// Figures a busy core makes larger; every other measured figure it makes smaller.
bool lower_is_better(const std::string& key) {
  return key.find("cycles") != std::string::npos || key.find("_us") != std::string::npos ||
         key == "loop_overhead_uops";
}
// Figures that describe the hardware, not a speed: never merged.
bool is_size(const std::string& key) {
  return key.find("_bytes") != std::string::npos || key.find("_ways") != std::string::npos ||
         key == "vector_lanes" || key == "vector_registers" || key == "issue_width" ||
         key == "loads_per_cycle" || key == "stores_per_cycle" || key == "window_uops" ||
         key == "ssr_streams" || key == "hw_loops";
}

}  // namespace

std::string this_machine_isa() {
  if (cpu_has("avx512f")) return "x86_avx512";
  if (cpu_has("avx2") && cpu_has("fma")) return "x86_avx2";
  return "x86_64";
}

bool profile_fits_this_machine(const MachineProfile& p) {
  const std::string isa = this_machine_isa();
  if (p.isa != isa) return false;
  if (isa == "x86_avx512") return p.peak_gflops_avx512 > 0;
  return p.peak_gflops_avx2 > 0;
}

MachineProfile best_of(const MachineProfile& a, const MachineProfile& b) {
  MachineProfile out = a;
  for (const auto& f : fields()) {
    const std::string key = f.key;
    if (is_size(key) || key == "freq_ghz") continue;
    const double x = a.*(f.member), y = b.*(f.member);
    if (x == 0 || y == 0) continue;  // "not present" stays as a says
    out.*(f.member) = lower_is_better(key) ? std::min(x, y) : std::max(x, y);
  }
  // The clock follows the AVX2 peak (two FMA pipes of 8 lanes), as calibrate derives it.
  if (out.peak_gflops_avx2 > a.peak_gflops_avx2) out.freq_ghz = b.freq_ghz;
  return out;
}

std::string profile_regression(const MachineProfile& old, const MachineProfile& fresh,
                               double tolerance) {
  if (old.isa != fresh.isa) return "";
  std::string why;
  for (const char* key : {"peak_gflops_avx512", "peak_gflops_avx2", "l1_bw_gbs", "l2_bw_gbs",
                          "l3_bw_gbs", "dram_bw_gbs"}) {
    for (const auto& f : fields()) {
      if (std::string(f.key) != key) continue;
      const double o = old.*(f.member), n = fresh.*(f.member);
      if (o > 0 && n < (1 - tolerance) * o) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "%s%s %.1f vs %.1f", why.empty() ? "" : ", ", key, n, o);
        why += buf;
      }
    }
  }
  return why;
}

std::string profile_to_text(const MachineProfile& p) {
  std::ostringstream o;
  o << "# perfdojo machine profile (perfdojo calibrate); key = value, '#' starts a comment\n";
  o << "name = " << p.name << "\n";
  o << "isa = " << p.isa << "\n";
  o << "cores = " << p.cores << "\n";
  for (const auto& f : fields())
    o << f.key << " = " << util::json_number(p.*(f.member)) << "  # " << f.doc << "\n";
  return o.str();
}

std::string profile_to_json(const MachineProfile& p) {
  util::JsonObject o;
  o.add("name", p.name).add("isa", p.isa).add("cores", p.cores);
  for (const auto& f : fields()) o.add(f.key, p.*(f.member));
  return o.str();
}

std::optional<MachineProfile> parse_profile(const std::string& text, const std::string& file,
                                            std::string* error) {
  MachineProfile p = default_profile();
  auto fail = [&](int line, const std::string& what) -> std::optional<MachineProfile> {
    if (error) *error = file + (line > 0 ? ":" + std::to_string(line) : "") + ": " + what;
    return std::nullopt;
  };
  std::string t = trim(text);
  if (t.empty()) return fail(0, "empty machine profile");
  if (t.front() == '{') {
    if (t.back() != '}') return fail(0, "JSON profile does not end with '}'");
    util::json::Document d;
    util::JsonParseOptions options;
    options.numbers_as_strings = true;  // set_key reads them as it reads key = value lines
    options.max_depth = 1;
    if (auto e = util::parse_json(t, &d, options)) {
      if (e->too_deep)
        return fail(0, "JSON profile must be one flat object of numbers and strings");
      return fail(0, "JSON profile, " + e->message());
    }
    if (!d.IsObject())
      return fail(0, "JSON profile must be one flat object of numbers and strings");
    for (const auto& m : d.GetObject()) {
      if (!m.value.IsString())
        return fail(0, "JSON profile must be one flat object of numbers and strings");
      std::string why = set_key(p, std::string(util::json_string(m.name)),
                                std::string(util::json_string(m.value)));
      if (!why.empty()) return fail(0, why);
    }
    return p;
  }
  std::istringstream lines(text);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    if (auto hash = line.find('#'); hash != std::string::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) return fail(n, "expected 'key = value', got '" + line + "'");
    std::string why = set_key(p, trim(line.substr(0, eq)), line.substr(eq + 1));
    if (!why.empty()) return fail(n, why);
  }
  return p;
}

std::optional<MachineProfile> load_profile(const std::string& path, std::string* error) {
  if (path.rfind("builtin:", 0) == 0) {
    auto p = builtin_profile(path.substr(8));
    if (!p && error) {
      *error = path + ": no built-in profile of that name; known:";
      for (const auto& n : builtin_profile_names()) *error += " " + n;
    }
    return p;
  }
  std::ifstream in(path);
  if (!in) {
    if (error) *error = path + ": cannot read machine profile";
    return std::nullopt;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_profile(ss.str(), path, error);
}

bool save_profile(const MachineProfile& p, const std::string& path, std::string* error) {
  std::ofstream out(path);
  bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  out << (json ? profile_to_json(p) + "\n" : profile_to_text(p));
  out.close();
  if (!out) {
    if (error) *error = path + ": cannot write machine profile";
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Calibration. The kernels are written with GCC vector extensions and compiled into this file
// for each instruction set (target attributes), so the figures describe the code shapes the
// generated kernels use, not a vendor library. Each runs `reps` passes and returns a value that
// depends on every result, so nothing is optimised away; `noipa` keeps GCC from seeing that a
// kernel is pure and calling it once for a loop of identical calls.
namespace {

typedef float V16 __attribute__((vector_size(64)));
typedef float V8 __attribute__((vector_size(32)));

#define PERFDOJO_FMA_CHAINS(NAME, V, TARGET)                                            \
  __attribute__((target(TARGET), noipa)) float NAME(long iters, float m, float a) {     \
    V c0 = V{} + 1.0f, c1 = c0 + 1, c2 = c0 + 2, c3 = c0 + 3, c4 = c0 + 4, c5 = c0 + 5; \
    V c6 = c0 + 6, c7 = c0 + 7, c8 = c0 + 8, c9 = c0 + 9, c10 = c0 + 10, c11 = c0 + 11; \
    V vm = V{} + m, va = V{} + a;                                                       \
    for (long i = 0; i < iters; ++i) {                                                  \
      c0 = c0 * vm + va;                                                                \
      c1 = c1 * vm + va;                                                                \
      c2 = c2 * vm + va;                                                                \
      c3 = c3 * vm + va;                                                                \
      c4 = c4 * vm + va;                                                                \
      c5 = c5 * vm + va;                                                                \
      c6 = c6 * vm + va;                                                                \
      c7 = c7 * vm + va;                                                                \
      c8 = c8 * vm + va;                                                                \
      c9 = c9 * vm + va;                                                                \
      c10 = c10 * vm + va;                                                              \
      c11 = c11 * vm + va;                                                              \
    }                                                                                   \
    V s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;                  \
    float r = 0;                                                                        \
    for (unsigned k = 0; k < sizeof(V) / sizeof(float); ++k) r += s[k];                 \
    return r;                                                                           \
  }

PERFDOJO_FMA_CHAINS(fma_chains_avx512, V16, "avx512f,fma")
PERFDOJO_FMA_CHAINS(fma_chains_avx2, V8, "avx2,fma")

__attribute__((target("fma"), noipa)) float fma_chains_scalar(long iters, float m, float a) {
  float c[12];
  for (int k = 0; k < 12; ++k) c[k] = 1.0f + k;
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < 12; ++k) c[k] = c[k] * m + a;
  }
  float r = 0;
  for (float x : c) r += x;
  return r;
}

// Twelve independent chains of the dot-product instructions, as FMA chains above: vpdpbusd
// (16 lanes x 4 u8*i8 products into i32: 128 operations; AVX-VNNI's ymm form, 64) and
// vdpbf16ps (16 lanes x 2 bf16 products into f32: 64 operations). Intrinsics: GCC's vector
// extensions have no form of these instructions.
__attribute__((target("avx2"))) inline int sum_lanes_epi32(__m256i v) {
  alignas(32) int x[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(x), v);
  int r = 0;
  for (int k = 0; k < 8; ++k) r += x[k];
  return r;
}

#define PERFDOJO_DOT_CHAINS(NAME, V, TARGET, ZERO, STEP, REDUCE, A, B)    \
  __attribute__((target(TARGET), noipa)) double NAME(long iters, int s) { \
    V c[12];                                                              \
    for (int k = 0; k < 12; ++k) c[k] = ZERO;                             \
    const auto a = A;                                                     \
    const auto b = B;                                                     \
    for (long i = 0; i < iters; ++i) {                                    \
      for (int k = 0; k < 12; ++k) c[k] = STEP(c[k], a, b);               \
    }                                                                     \
    double r = 0;                                                         \
    for (int k = 0; k < 12; ++k) r += REDUCE(c[k]);                       \
    return r;                                                             \
  }

PERFDOJO_DOT_CHAINS(vnni_chains_avx512, __m512i, "avx512f,avx512vnni", _mm512_setzero_si512(),
                    _mm512_dpbusd_epi32, _mm512_reduce_add_epi32,
                    _mm512_set1_epi32(0x01010101 * (s & 3)), _mm512_set1_epi32(0x01020304))
PERFDOJO_DOT_CHAINS(vnni_chains_avx2, __m256i, "avx2,avxvnni", _mm256_setzero_si256(),
                    _mm256_dpbusd_avx_epi32, sum_lanes_epi32,
                    _mm256_set1_epi32(0x01010101 * (s & 3)), _mm256_set1_epi32(0x01020304))
PERFDOJO_DOT_CHAINS(bf16_chains_avx512, __m512, "avx512f,avx512bf16", _mm512_setzero_ps(),
                    _mm512_dpbf16_ps, _mm512_reduce_add_ps,
                    _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f * (s & 3)), _mm512_set1_ps(1e-3f)),
                    _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f)))

// One dependent chain: its time per step is the FMA latency.
__attribute__((target("fma"), noipa)) float fma_chain_latency(long iters, float m, float a) {
  float c = 1;
  for (long i = 0; i < iters; ++i) c = c * m + a;
  return c;
}

// One dependent add after another, as a sequential float reduction runs (GCC may not
// reassociate it): some cores add faster than they multiply-add.
__attribute__((noipa)) float add_chain_latency(long iters, float a) {
  float c = 1;
  for (long i = 0; i < iters; ++i) c = c + a;
  return c;
}

#define PERFDOJO_READ(NAME, V, TARGET)                                                      \
  __attribute__((target(TARGET), noipa)) float NAME(const float* p, long n, int passes) {   \
    constexpr long kL = sizeof(V) / sizeof(float);                                          \
    V s0 = {}, s1 = {}, s2 = {}, s3 = {}, s4 = {}, s5 = {}, s6 = {}, s7 = {};               \
    for (int r = 0; r < passes; ++r) {                                                      \
      for (long i = 0; i + 8 * kL <= n; i += 8 * kL) {                                      \
        const V* q = reinterpret_cast<const V*>(p + i);                                     \
        s0 += q[0];                                                                         \
        s1 += q[1];                                                                         \
        s2 += q[2];                                                                         \
        s3 += q[3];                                                                         \
        s4 += q[4];                                                                         \
        s5 += q[5];                                                                         \
        s6 += q[6];                                                                         \
        s7 += q[7];                                                                         \
      }                                                                                     \
      asm volatile("" ::: "memory");                                                        \
    }                                                                                       \
    V s = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;                                            \
    float t = 0;                                                                            \
    for (long k = 0; k < kL; ++k) t += s[k];                                                \
    return t;                                                                               \
  }                                                                                         \
  __attribute__((target(TARGET), noipa)) void NAME##_copy(float* d, const float* p, long n, \
                                                          int passes) {                     \
    constexpr long kL = sizeof(V) / sizeof(float);                                          \
    for (int r = 0; r < passes; ++r) {                                                      \
      for (long i = 0; i + 4 * kL <= n; i += 4 * kL) {                                      \
        const V* q = reinterpret_cast<const V*>(p + i);                                     \
        V* o = reinterpret_cast<V*>(d + i);                                                 \
        o[0] = q[0];                                                                        \
        o[1] = q[1];                                                                        \
        o[2] = q[2];                                                                        \
        o[3] = q[3];                                                                        \
      }                                                                                     \
      asm volatile("" ::: "memory");                                                        \
    }                                                                                       \
  }

PERFDOJO_READ(read_avx512, V16, "avx512f")
PERFDOJO_READ(read_avx2, V8, "avx2")

volatile float g_sink;

#ifdef PERFDOJO_HAVE_LIBMVEC
// glibc's vector math library, which generated vector code calls for exp (x86-64 vector ABI).
extern "C" V8 _ZGVdN8v_expf(V8);
extern "C" V16 _ZGVeN16v_expf(V16);

__attribute__((target("avx2,fma"), noipa)) void exp_vec8(const float* x, float* y, long n) {
  for (long i = 0; i + 8 <= n; i += 8) {
    V8 v;
    std::memcpy(&v, x + i, sizeof v);
    v = _ZGVdN8v_expf(v);
    std::memcpy(y + i, &v, sizeof v);
  }
}

__attribute__((target("avx512f"), noipa)) void exp_vec16(const float* x, float* y, long n) {
  for (long i = 0; i + 16 <= n; i += 16) {
    V16 v;
    std::memcpy(&v, x + i, sizeof v);
    v = _ZGVeN16v_expf(v);
    std::memcpy(y + i, &v, sizeof v);
  }
}
#endif

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs `body(count)` with a count grown until one call lasts a fifth of `seconds`, then times
// seven calls and returns units per second: the best call for speeds (the one least disturbed
// by neighbours on a shared machine), or the median for costs that disturbances are part of.
enum class Pick { kBest, kMedian };

template <typename F>
double rate(double seconds, double units_per_count, F body, Pick pick = Pick::kBest,
            long min_count = 1) {
  long count = min_count;
  for (;;) {
    double t0 = now_s();
    body(count);
    double dt = now_s() - t0;
    if (dt >= seconds / 5 || count > (1L << 40)) break;
    count *= dt <= 0 ? 16 : std::max(2L, static_cast<long>(seconds / 5 / dt));
  }
  std::vector<double> rates;
  for (int r = 0; r < 7; ++r) {
    double t0 = now_s();
    body(count);
    double dt = std::max(now_s() - t0, 1e-9);
    rates.push_back(units_per_count * static_cast<double>(count) / dt);
  }
  std::sort(rates.begin(), rates.end());
  return pick == Pick::kBest ? rates.back() : rates[rates.size() / 2];
}

template <typename F>
double best_rate(double seconds, double units_per_count, F body) {
  return rate(seconds, units_per_count, body, Pick::kBest);
}

// Cache sizes from sysfs (Linux), falling back to sysconf, else the defaults stay.
void detect_caches(MachineProfile& p) {
  for (int idx = 0; idx < 8; ++idx) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/";
    std::ifstream lvl(dir + "level"), typ(dir + "type"), sz(dir + "size"),
        ways(dir + "ways_of_associativity");
    if (!lvl || !typ || !sz) continue;
    int level = 0;
    double w = 0;
    std::string type, size;
    lvl >> level;
    typ >> type;
    sz >> size;
    if (ways) ways >> w;
    if (type == "Instruction" || size.empty()) continue;
    double bytes = std::atof(size.c_str());
    char unit = size.back();
    if (unit == 'K') bytes *= 1024;
    if (unit == 'M') bytes *= 1024 * 1024;
    if (bytes <= 0) continue;
    if (level == 1) p.l1_bytes = bytes;
    if (level == 2) p.l2_bytes = bytes;
    if (level == 3) p.l3_bytes = bytes;
    if (w > 0 && level == 1) p.l1_ways = w;
    if (w > 0 && level == 2) p.l2_ways = w;
    if (w > 0 && level == 3) p.l3_ways = w;
  }
}

}  // namespace

double effective_l3_bytes(double l2_bytes, double l3_bytes, double l3_bw, double dram_bw,
                          const std::vector<std::pair<long, double>>& sweep) {
  if (!(l3_bw > 1.25 * dram_bw)) return l3_bytes;
  const double cut = std::sqrt(l3_bw * dram_bw);
  double inside = 0;
  bool left = false;  // memory speed at a working set well inside the reported L3
  for (const auto& [bytes, bw] : sweep) {
    if (bytes <= l2_bytes) continue;
    if (bw >= cut && !left) inside = static_cast<double>(bytes);
    if (bw < cut && bytes <= 0.6 * l3_bytes) left = true;
  }
  return left && inside > 0 ? std::min(l3_bytes, inside) : l3_bytes;
}

static MachineProfile calibrate_once(const CalibrateOptions& o);

MachineProfile calibrate(const CalibrateOptions& o) {
  MachineProfile best = calibrate_once(o);
  for (int r = 1; r < o.rounds; ++r) {
    if (o.progress)
      o.progress("round " + std::to_string(r + 1) + " of " + std::to_string(o.rounds));
    best = best_of(best, calibrate_once(o));
  }
  return best;
}

MachineProfile calibrate_once(const CalibrateOptions& o) {
  MachineProfile p = default_profile();
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  p.name = std::string("calibrated-") + (host[0] ? host : "unknown");
  p.cores = usable_cores();
  detect_caches(p);
  const double secs = o.seconds_per_test;
  const float m = 0.999999f, a = 1e-7f;

  const bool has512 = cpu_has("avx512f");
  const bool has2 = cpu_has("avx2") && cpu_has("fma");
  p.isa = this_machine_isa();
  if (has512) {
    p.peak_gflops_avx512 = best_rate(secs, 12 * 16 * 2 * 1e-9,
                                     [&](long n) { g_sink = fma_chains_avx512(n * 1000, m, a); }) *
                           1000;
    say("fma avx512: " + std::to_string(p.peak_gflops_avx512) + " GFLOP/s");
  } else {
    p.peak_gflops_avx512 = 0;
    say("fma avx512: not supported");
  }
  if (has2) {
    p.peak_gflops_avx2 = best_rate(secs, 12 * 8 * 2 * 1e-9,
                                   [&](long n) { g_sink = fma_chains_avx2(n * 1000, m, a); }) *
                         1000;
    say("fma avx2: " + std::to_string(p.peak_gflops_avx2) + " GFLOP/s");
  }
  // The dot-product units, where the CPU has them (0 where not: the int8 and bf16 kernels'
  // targets then refuse, and their figures say so).
  p.peak_gops_vnni = p.peak_gflops_bf16 = 0;
  if (has512 && cpu_has("avx512vnni")) {
    p.peak_gops_vnni = best_rate(secs, 12 * 128 * 1e-9,
                                 [&](long n) { g_sink = vnni_chains_avx512(n * 1000, 1); }) *
                       1000;
  } else if (has2 && cpu_has("avxvnni")) {
    p.peak_gops_vnni =
        best_rate(secs, 12 * 64 * 1e-9, [&](long n) { g_sink = vnni_chains_avx2(n * 1000, 1); }) *
        1000;
  }
  say(p.peak_gops_vnni > 0
          ? "int8 dot products (vpdpbusd): " + std::to_string(p.peak_gops_vnni) + " Gop/s"
          : std::string("int8 dot products: no VNNI"));
  if (has512 && cpu_has("avx512bf16")) {
    p.peak_gflops_bf16 =
        best_rate(secs, 12 * 64 * 1e-9, [&](long n) { g_sink = bf16_chains_avx512(n * 1000, 1); }) *
        1000;
  }
  say(p.peak_gflops_bf16 > 0
          ? "bf16 dot products (vdpbf16ps): " + std::to_string(p.peak_gflops_bf16) + " GFLOP/s"
          : std::string("bf16 dot products: no AVX-512 BF16"));
  if (has2) {
    p.peak_gflops_scalar = best_rate(secs, 12 * 2 * 1e-9,
                                     [&](long n) { g_sink = fma_chains_scalar(n * 1000, m, a); }) *
                           1000;
    say("fma scalar: " + std::to_string(p.peak_gflops_scalar) + " GFLOP/s");
    // Two FMA pipes of 8 lanes: the clock follows from the AVX2 peak.
    p.freq_ghz = p.peak_gflops_avx2 / 32;
    double fma_per_ns =
        best_rate(secs, 1e-9, [&](long n) { g_sink = fma_chain_latency(n * 1000, m, a); }) * 1000;
    p.fma_latency_cycles = p.freq_ghz / fma_per_ns;
    double add_per_ns =
        best_rate(secs, 1e-9, [&](long n) { g_sink = add_chain_latency(n * 1000, a); }) * 1000;
    p.add_latency_cycles = p.freq_ghz / add_per_ns;
    say("fma latency: " + std::to_string(p.fma_latency_cycles) + " cycles, add latency " +
        std::to_string(p.add_latency_cycles) + " cycles at " + std::to_string(p.freq_ghz) + " GHz");
  }

  // exp through libm, one element at a time, as generated scalar code calls it.
  {
    std::vector<float> xs(4096), ys(4096);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = -4.0f + 8.0f * static_cast<float>(i) / 4096.0f;
    double per_s = best_rate(secs, 4096, [&](long n) {
      for (long r = 0; r < n; ++r) {
        for (size_t i = 0; i < xs.size(); ++i) ys[i] = std::exp(xs[i]);
        asm volatile("" ::: "memory");
      }
      g_sink = ys[n % 4096];
    });
    p.exp_cycles_scalar = std::max(1.0, p.freq_ghz * 1e9 / per_s);
    // Without libmvec, generated vector code calls libm once per lane, moving each lane out
    // and back; with it, one call per register.
    p.exp_cycles_vector = p.native_lanes() * (p.exp_cycles_scalar + 1);
#ifdef PERFDOJO_HAVE_LIBMVEC
    if (has2) {
      const bool wide = has512;
      double vec_per_s = best_rate(secs, 4096.0 / (wide ? 16 : 8), [&](long n) {
        for (long r = 0; r < n; ++r) {
          if (wide) {
            exp_vec16(xs.data(), ys.data(), 4096);
          } else {
            exp_vec8(xs.data(), ys.data(), 4096);
          }
          asm volatile("" ::: "memory");
        }
        g_sink = ys[n % 4096];
      });
      p.exp_cycles_vector = std::max(1.0, p.freq_ghz * 1e9 / vec_per_s);
    }
#endif
    say("exp vector: " + std::to_string(p.exp_cycles_vector) + " cycles per register");
    say("exp scalar: " + std::to_string(p.exp_cycles_scalar) + " cycles");
  }

  // OpenMP, as generated `:par` scopes use it. A fork right after another finds the threads
  // still spinning; one after a stretch of serial work longer than their spin finds them asleep
  // and pays for waking them (on a loaded machine, milliseconds). The speed-up is timed on
  // regions long enough to bury the fork. Medians, not bests: the disturbances of a shared
  // machine are part of what kernels pay here.
  {
    const int t = std::max(1, p.cores);
    auto fork_cost = [&](long gap) {
      double serial_gaps = rate(
          secs, 1,
          [&](long n) {
            for (long r = 0; r < n; ++r) g_sink = fma_chain_latency(gap, m, a);
          },
          Pick::kMedian);
      // At least a few dozen forks per round, or a slow first one (creating the threads, or
      // waking them) decides how many follow and every round times a fork after a pause.
      double forks = rate(
          secs, 1,
          [&](long n) {
            for (long r = 0; r < n; ++r) {
              g_sink = fma_chain_latency(gap, m, a);
#pragma omp parallel for schedule(static)
              for (int i = 0; i < t; ++i) g_sink = static_cast<float>(i);
            }
          },
          Pick::kMedian, gap < 1000 ? 64 : 4);
      return std::max(0.0, 1 / forks - 1 / serial_gaps) * 1e6;
    };
    p.fork_join_hot_us = fork_cost(1);
    p.fork_join_us = std::max(p.fork_join_hot_us, fork_cost(400000));  // about 1 ms between forks
    const long work = 400000;  // FMA-chain steps per thread, about 1 ms
    double serial = rate(
        secs * 2, 1,
        [&](long n) {
          for (long r = 0; r < n; ++r)
            for (int i = 0; i < t; ++i) g_sink = fma_chain_latency(work, m, a);
        },
        Pick::kMedian);
    double parallel = rate(
        secs * 2, 1,
        [&](long n) {
          for (long r = 0; r < n; ++r) {
#pragma omp parallel for schedule(static)
            for (int i = 0; i < t; ++i) g_sink = fma_chain_latency(work, m, a);
          }
        },
        Pick::kMedian, 8);
    // The regions run back to back: what they pay beyond their work is the hot fork.
    const double region = std::max(1e-9, 1 / parallel - p.fork_join_hot_us * 1e-6);
    p.parallel_efficiency = std::clamp((1 / serial) / region / t, 0.05, 1.0);
    say("openmp: fork/join " + std::to_string(p.fork_join_us) + " us (" +
        std::to_string(p.fork_join_hot_us) + " us right after another), parallel efficiency " +
        std::to_string(p.parallel_efficiency) + " on " + std::to_string(t) + " threads");
  }

  // Streaming bandwidth at working sets from a quarter of L1 to far beyond L3.
  auto read_fn = has512 ? read_avx512 : read_avx2;
  auto copy_fn = has512 ? read_avx512_copy : read_avx2_copy;
  if (has2) {
    // Past L3 for the DRAM figure, but bounded: some virtual machines report a host's whole
    // L3 (hundreds of MiB). Every working set below is clamped to the buffers' size.
    const long max_bytes =
        std::clamp(static_cast<long>(p.l3_bytes) * 2, 256L << 20, 1L << 30) & ~4095L;
    auto fit = [&](long bytes) { return std::clamp(bytes, 4096L, max_bytes) & ~63L; };
    float* src = static_cast<float*>(std::aligned_alloc(64, max_bytes));
    float* dst = static_cast<float*>(std::aligned_alloc(64, max_bytes));
    if (src && dst) {
      std::memset(src, 0, max_bytes);
      std::memset(dst, 0, max_bytes);
      auto read_bw = [&](long bytes) {
        long n = bytes / 4;
        int passes = static_cast<int>(std::max(1L, (64L << 20) / bytes));
        return best_rate(secs, static_cast<double>(bytes) * passes * 1e-9,
                         [&](long c) { g_sink = read_fn(src, n, static_cast<int>(c) * passes); });
      };
      auto copy_bw = [&](long bytes) {
        long n = bytes / 4 / 2;  // source and destination together fill the working set
        int passes = static_cast<int>(std::max(1L, (64L << 20) / bytes));
        return best_rate(secs, static_cast<double>(bytes) * passes * 1e-9,
                         [&](long c) { copy_fn(dst, src, n, static_cast<int>(c) * passes); });
      };
      std::vector<std::pair<long, double>> sweep;  // working set, read bandwidth
      for (long bytes = 16L << 10; bytes <= max_bytes; bytes *= 4) {
        sweep.emplace_back(bytes, read_bw(bytes));
        say("bandwidth at " + std::to_string(bytes >> 10) + " KiB: read " +
            std::to_string(sweep.back().second) + " GB/s, copy " + std::to_string(copy_bw(bytes)) +
            " GB/s");
      }
      p.l1_bw_gbs = read_bw(fit(static_cast<long>(p.l1_bytes / 2)));
      p.l2_bw_gbs = read_bw(fit(static_cast<long>(std::max(p.l1_bytes * 4, p.l2_bytes / 2))));
      // L3 just past L2, not at a fraction of the reported L3: a virtual machine may report its
      // host's whole L3 (480 MiB seen, where a quarter of it already streamed from memory at
      // half the L3's bandwidth).
      p.l3_bw_gbs = read_bw(fit(
          static_cast<long>(std::min(p.l2_bytes * 4, std::max(p.l3_bytes / 2, p.l2_bytes * 2)))));
      p.dram_bw_gbs = read_bw(fit(std::max(static_cast<long>(p.l3_bytes * 2), 64L << 20)));
      p.l3_bytes = effective_l3_bytes(p.l2_bytes, p.l3_bytes, p.l3_bw_gbs, p.dram_bw_gbs, sweep);
      // All cores at once, each on its own slice.
      const int t = p.cores;
      const long slice =
          std::min(max_bytes / t, std::max(static_cast<long>(p.l3_bytes * 2), 32L << 20)) & ~4095L;
      double best = 0;
      for (int round = 0; round < 3; ++round) {
        std::atomic<int> ready{0};
        std::vector<std::thread> threads;
        const double t0 = now_s();
        const int passes = 4;
        for (int k = 0; k < t; ++k) {
          threads.emplace_back([&, k] {
            ready.fetch_add(1);
            while (ready.load() < t) {
            }
            g_sink = read_fn(src + k * (slice / 4), slice / 4, passes);
          });
        }
        for (auto& th : threads) th.join();
        double dt = std::max(now_s() - t0, 1e-9);
        best = std::max(best, static_cast<double>(slice) * passes * t * 1e-9 / dt);
      }
      p.dram_bw_all_gbs = std::max(best, p.dram_bw_gbs);
      say("bandwidth: L1 " + std::to_string(p.l1_bw_gbs) + ", L2 " + std::to_string(p.l2_bw_gbs) +
          ", L3 " + std::to_string(p.l3_bw_gbs) + ", DRAM " + std::to_string(p.dram_bw_gbs) +
          " (all cores " + std::to_string(p.dram_bw_all_gbs) + ") GB/s");
    }
    std::free(src);
    std::free(dst);
  }
  return p;
}

}  // namespace perfdojo::backends
