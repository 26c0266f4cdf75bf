// `perfdojo calibrate | estimate`: the cost model's machine profile and its estimates.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include "backends/backend.h"
#include "backends/cost_model.h"
#include "backends/machine_profile.h"
#include "cli/cli.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "util/json.h"

namespace perfdojo::cli {
namespace {

using util::JsonObject;

int cmd_calibrate(const Args& a) {
  if (!a.positional.empty()) return usage_error("calibrate takes no positional arguments", a.json);
  backends::CalibrateOptions o;
  if (a.values.count("seconds")) {
    char* end = nullptr;
    o.seconds_per_test = std::strtod(a.get("seconds").c_str(), &end);
    if (*end != '\0' || !(o.seconds_per_test > 0))
      return usage_error("--seconds needs a positive number, got '" + a.get("seconds") + "'",
                         a.json);
  }
  int64_t rounds = 3;
  if (int rc = kExitOk; !int_option(a, "rounds", 1, 20, &rounds, &rc)) return rc;
  o.rounds = static_cast<int>(rounds);
  const std::string out = a.get("out");
  // A good profile already there is kept unless the new one is as good: a calibration on a busy
  // core describes a slower machine, and the cost model silently gets worse with it.
  std::optional<backends::MachineProfile> old;
  if (!out.empty() && std::filesystem::exists(out)) {
    std::string err;
    old = backends::load_profile(out, &err);
  }
  // Progress goes to stderr so stdout stays the result.
  o.progress = [](const std::string& s) { std::cerr << "calibrate: " << s << "\n"; };
  backends::MachineProfile p = backends::calibrate(o);
  std::string regression = old ? backends::profile_regression(*old, p) : "";
  bool wrote = false;
  if (!out.empty() && (regression.empty() || a.has("force"))) {
    std::string err;
    if (!backends::save_profile(p, out, &err)) return usage_error(err, a.json);
    wrote = true;
  }
  const std::string refusal =
      regression.empty() || wrote
          ? ""
          : "kept " + out + ": this calibration is more than 15% worse than the profile there (" +
                regression + "); the core looks busy. Re-run on an idle core, or --force";
  if (a.json) {
    std::cout << JsonObject()
                     .add("ok", refusal.empty())
                     .add("file", out)
                     .add("written", wrote)
                     .add("isa", p.isa)
                     .add("rounds", rounds)
                     .add("regression", regression)
                     .add("error", refusal)
                     .raw("profile", backends::profile_to_json(p))
                     .str()
              << "\n";
  } else {
    std::cout << backends::profile_to_text(p);
    if (!regression.empty())
      std::cerr << "calibrate: warning: worse than " << out << ": " << regression << "\n";
    if (wrote) std::cerr << "calibrate: wrote " << out << "\n";
    if (!refusal.empty()) std::cerr << "calibrate: " << refusal << "\n";
  }
  return refusal.empty() ? kExitOk : kExitInvalid;
}

int cmd_estimate(const Args& a) {
  if (a.positional.size() != 1) return usage_error("estimate takes exactly one FILE", a.json);
  const std::string& file = a.positional[0];
  backends::MachineProfile prof = backends::default_profile();
  std::string pfile = a.get("profile");
  if (pfile.empty())
    if (const char* env = std::getenv("PERFDOJO_MACHINE_PROFILE")) pfile = env;
  if (!pfile.empty()) {
    std::string err;
    auto loaded = backends::load_profile(pfile, &err);
    if (!loaded) {
      if (a.json) {
        std::cout << JsonObject().add("ok", false).add("file", file).add("error", err).str()
                  << "\n";
      } else {
        std::cerr << "perfdojo: " << err << "\n";
      }
      return kExitInvalid;
    }
    prof = *loaded;
  }
  if (a.has("cores")) {
    // The profile's cores, its per-core figures kept: its all-core memory bandwidth stays what
    // it is (the kernel's data on the memory of the node that first touched it), so a
    // memory-bound kernel stops scaling there while compute keeps dividing.
    int64_t cores = 0;
    if (int rc = 0; !int_option(a, "cores", 1, 4096, &cores, &rc)) return rc;
    prof.cores = static_cast<int>(cores);
    prof.name += " at " + std::to_string(cores) + " cores";
  }
  auto r = ir::load_file(file);
  if (!r.ok()) return report_errors(r.errors(), a.json, file);
  backends::CostEstimate e = backends::estimate_cost(*r, prof);
  static const char* kLevels[4] = {"L1", "L2", "L3", "DRAM"};
  if (a.json) {
    JsonObject bytes, times;
    for (int k = 0; k < 4; ++k) {
      bytes.add(kLevels[k], e.bytes[k]);
      times.add(kLevels[k], e.level_s[k]);
    }
    std::cout << JsonObject()
                     .add("ok", true)
                     .add("file", file)
                     .add("profile", prof.name)
                     .add("cores", prof.cores)
                     .add("time_s", e.time_s)
                     .add("flops", e.flops)
                     .add("gflops", e.time_s > 0 ? e.flops / e.time_s * 1e-9 : 0.0)
                     .add("compute_s", e.compute_s)
                     .add("overhead_s", e.overhead_s)
                     .raw("bytes", bytes.str())
                     .raw("level_s", times.str())
                     .add("bound", backends::bound_name(e.bound))
                     .str()
              << "\n";
  } else {
    std::printf("%s: %.4g s estimated on %s (%.3g GFLOP/s), bound by %s\n", file.c_str(), e.time_s,
                prof.name.c_str(), e.time_s > 0 ? e.flops / e.time_s * 1e-9 : 0.0,
                backends::bound_name(e.bound));
    std::printf("  flops      %.6g\n  compute    %.4g s\n  overhead   %.4g s\n", e.flops,
                e.compute_s, e.overhead_s);
    for (int k = 0; k < 4; ++k)
      std::printf("  %-5s      %.6g bytes, %.4g s\n", kLevels[k], e.bytes[k], e.level_s[k]);
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> cost_commands() {
  return {
      {"calibrate",
       "calibrate [--out FILE] [--seconds S] [--rounds N] [--force]",
       "measure this machine (FMA peaks, cache and memory bandwidth) for the cost model; --out "
       "writes "
       "the profile (JSON when FILE ends in .json, else key = value)",
       {"out", "seconds", "rounds"},
       {"force"},
       cmd_calibrate},
      {"estimate",
       "estimate FILE [--profile PROFILE] [--cores N]",
       "the cost model's time for a kernel: flops, bytes per cache level and the bound (profile: "
       "--profile, else $PERFDOJO_MACHINE_PROFILE, else built-in); --cores N: on N of the "
       "profile's "
       "cores, its all-core memory bandwidth unchanged (a kernel's :par scopes divide among them)",
       {"profile", "cores"},
       {},
       cmd_estimate},
  };
}

}  // namespace perfdojo::cli
