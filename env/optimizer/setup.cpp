#include "optimizer/setup.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "backends/compiler.h"
#include "backends/result_cache.h"
#include "optimizer/optimizer.h"

namespace perfdojo::optimizer {

std::optional<Mode> mode_by_name(const std::string& name) {
  if (name == "conservative") return Mode::kConservative;
  if (name == "balanced") return Mode::kBalanced;
  if (name == "aggressive") return Mode::kAggressive;
  return std::nullopt;
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kConservative:
      return "conservative";
    case Mode::kBalanced:
      return "balanced";
    case Mode::kAggressive:
      return "aggressive";
  }
  return "?";
}

ModeSettings settings_for(Mode m) {
  switch (m) {
    case Mode::kConservative:
      return {4, 10, 4, 10, false, false};
    case Mode::kBalanced:
      return {8, 16, 8, 20, true, true};
    case Mode::kAggressive:
      return {16, 24, 16, 40, true, true};
  }
  return {8, 16, 8, 20, true, true};
}

std::string cached_profile_path(const std::string& cache_dir) {
  if (cache_dir.empty()) return "";
  return (std::filesystem::path(cache_dir) /
          ("machine-" +
           backends::hex64(backends::stable_hash(backends::cpu_identity() + " calibration " +
                                                 std::to_string(backends::kCalibrationVersion))) +
           ".profile"))
      .string();
}

namespace detail {
namespace {

// The 1-minute load average (0 when unknown).
double one_minute_load() {
  double load = 0;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = 0;
    std::fclose(f);
  }
  return load;
}

}  // namespace

// The cost model's profile for this machine: given, from the environment, cached, or measured
// now (and cached). Sets config.machine_profile to a readable file; returns where it came from.
std::string resolve_profile(backends::BackendConfig& config, backends::MachineProfile* out,
                            const LoadSource& load_source) {
  const LoadSource& loadavg = load_source ? load_source : LoadSource(one_minute_load);
  std::string err;
  auto use = [&](const std::string& path, const std::string& how) -> std::string {
    auto p = backends::load_profile(path, &err);
    if (!p) return "";
    config.machine_profile = path;
    *out = *p;
    return p->name + " (" + how + ")";
  };
  if (!config.machine_profile.empty()) return use(config.machine_profile, config.machine_profile);
  if (const char* env = std::getenv("PERFDOJO_MACHINE_PROFILE"); env && *env) {
    if (auto s = use(env, std::string("$PERFDOJO_MACHINE_PROFILE = ") + env); !s.empty()) return s;
  }
  if (!config.calibrate) {
    *out = backends::default_profile();
    return out->name + " (built-in)";
  }
  // else the result cache's folder
  const std::string dir = !config.profile_dir.empty() ? config.profile_dir : config.cache_dir;
  std::string cached = cached_profile_path(dir);
  if (!cached.empty() && std::filesystem::exists(cached)) {
    // One taken for another ISA (an older file, or features hidden) is calibrated again.
    auto p = backends::load_profile(cached, &err);
    if (p && backends::profile_fits_this_machine(*p))
      if (auto s = use(cached, "calibrated earlier, " + cached); !s.empty()) return s;
  }
  // A calibration taken while other jobs keep the cores busy describes a slower machine (an FMA
  // peak of 43 instead of ~90 GFLOP/s was seen): use it for this run, never keep it.
  const double load_before = loadavg();
  backends::MachineProfile measured = backends::calibrate();
  const double load = std::max(load_before, loadavg());
  const bool busy = load > 0.75 * std::max(1u, std::thread::hardware_concurrency());
  std::string path = busy ? std::string() : cached;
  if (path.empty())
    path = (std::filesystem::temp_directory_path() /
            ("perfdojo-profile-" + std::to_string(::getpid()) + ".txt"))
               .string();
  else
    std::filesystem::create_directories(dir);
  if (backends::save_profile(measured, path, &err)) {
    config.machine_profile = path;
    *out = measured;
    if (busy) {
      char why[96];
      std::snprintf(why, sizeof why, " (calibrated now on a busy machine, load %.1f: not kept)",
                    load);
      return measured.name + why;
    }
    return measured.name + " (calibrated now" + (cached.empty() ? "" : ", kept in " + path) + ")";
  }
  *out = backends::default_profile();
  return out->name + " (built-in: " + err + ")";
}

double peak_gflops(backends::X86Isa isa, const backends::MachineProfile& profile) {
  double peak = 0;
  if (isa == backends::X86Isa::kAvx512) peak = profile.peak_gflops_avx512;
  if (isa == backends::X86Isa::kAvx2 || isa == backends::X86Isa::kPortable)
    peak = profile.peak_gflops_avx2;  // portable C: the compiler still vectorises
  if (!(peak > 0)) peak = backends::x86_peak_gflops_per_core(isa);
  return peak;
}

}  // namespace detail
std::string resolve_machine_profile(backends::BackendConfig& config,
                                    backends::MachineProfile* out) {
  return detail::resolve_profile(config, out);
}

double fma_peak_gflops(backends::X86Isa isa, const backends::MachineProfile& profile) {
  return detail::peak_gflops(isa, profile);
}

}  // namespace perfdojo::optimizer
