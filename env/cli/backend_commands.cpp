// `perfdojo codegen | measure`: the backends from the command line.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "backends/backend.h"
#include "backends/cross_backend.h"
#include "backends/machine_profile.h"
#include "backends/result_cache.h"
#include "backends/x86_backend.h"
#include "cli/cli.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "optimizer/optimizer.h"
#include "util/json.h"

namespace perfdojo::cli {
namespace {

using util::JsonObject;

// The best x86 backend this machine runs: the default of `measure`.
std::string default_backend() {
  for (const char* n : {"x86_avx512", "x86_avx2", "x86_64"}) {
    auto b = backends::make_backend(n);
    if (b && b->available().ok) return n;
  }
  return "x86_64";
}

bool parse_u64(const std::string& s, uint64_t* out) {
  try {
    size_t used = 0;
    *out = std::stoull(s, &used);
    return used == s.size() && !s.empty() && s[0] != '-';
  } catch (const std::exception&) {
    return false;
  }
}

bool parse_positive(const std::string& s, double* out) {
  try {
    size_t used = 0;
    *out = std::stod(s, &used);
    return used == s.size() && *out > 0;
  } catch (const std::exception&) {
    return false;
  }
}

bool any_parallel(const std::vector<ir::NodePtr>& body) {
  for (const auto& n : body)
    if (n->is_scope && (n->annot == ir::Annot::kParallel || any_parallel(n->body))) return true;
  return false;
}

// Where the calibrated machine profile is kept (as `optimize` keeps it).
backends::BackendConfig profile_config() {
  backends::BackendConfig c;
  if (const std::string dir = profile_dir(); !dir.empty()) c.profile_dir = dir;
  return c;
}

backends::BackendConfig config_of(const Args& a) {
  backends::BackendConfig c;
  if (a.values.count("compiler")) c.compiler = a.get("compiler");
  if (!a.has("no-cache")) c.cache_dir = a.get("cache-dir", backends::default_cache_dir());
  return c;
}

int cmd_codegen(const Args& a) {
  if (a.positional.size() != 1) return usage_error("codegen takes exactly one FILE", a.json);
  std::string name = a.get("backend", "x86_avx512");
  auto isa = backends::x86_isa_by_name(name);
  if (!isa)
    return usage_error(
        "codegen needs an x86 --backend (x86_avx512, x86_avx2, x86_64), not '" + name + "'",
        a.json);
  auto r = ir::load_file(a.positional[0]);
  if (!r.ok()) return report_errors(r.errors(), a.json, a.positional[0]);
  const backends::BackendConfig config = config_of(a);
  backends::GeneratedC g = backends::x86_generate_c(*isa, *r, config);
  if (a.json) {
    util::JsonArray notes;
    for (const auto& n : g.notes) notes.add(n);
    std::string flags;
    for (const auto& f : backends::x86_compile_flags(*isa, config.compiler))
      flags += (flags.empty() ? "" : " ") + f;
    std::cout << JsonObject()
                     .add("ok", true)
                     .add("file", a.positional[0])
                     .add("backend", name)
                     .add("flags", flags)
                     .add("vector_scopes", g.vector_scopes)
                     .add("scalar_fallbacks", g.scalar_fallbacks)
                     .raw("notes", notes.str())
                     .add("source", g.source)
                     .str()
              << "\n";
  } else {
    std::cout << g.source;
  }
  return kExitOk;
}

int cmd_measure(const Args& a) {
  if (a.positional.size() != 1) return usage_error("measure takes exactly one FILE", a.json);
  const std::string& file = a.positional[0];
  std::string name = a.get("backend", "");
  if (name.empty()) name = default_backend();
  // The name parsed once: an x86 ISA or a cross target (verified and peaked below), or neither
  // (the cost model, the interpreter).
  const auto arch = optimizer::Arch::parse(name);
  backends::MeasureOptions o;
  if (a.values.count("seed") && !parse_u64(a.get("seed"), &o.seed))
    return usage_error("--seed needs a non-negative integer, found '" + a.get("seed") + "'",
                       a.json);
  if (a.values.count("budget") && !parse_positive(a.get("budget"), &o.time_budget_s))
    return usage_error(
        "--budget needs a positive number of seconds, found '" + a.get("budget") + "'", a.json);
  if (a.values.count("timeout") && !parse_positive(a.get("timeout"), &o.timeout_s))
    return usage_error(
        "--timeout needs a positive number of seconds, found '" + a.get("timeout") + "'", a.json);
  o.verify = !a.has("no-verify");
  o.flush_cache = a.has("flush");
  auto backend = backends::make_backend(name, config_of(a));
  if (!backend) {
    std::string names;
    for (const auto& n : backends::backend_names()) names += (names.empty() ? "" : ", ") + n;
    return usage_error("unknown --backend '" + name + "' (" + names + ")", a.json);
  }
  auto r = ir::load_file(file);
  if (!r.ok()) return report_errors(r.errors(), a.json, file);
  backends::Measurement m = backend->measure(*r, o);
  double flops = backends::flop_count(*r), bytes = backends::compulsory_bytes(*r);
  // Too large to interpret and nothing to compare with at full size: the generated code of a
  // scaled-down instance is checked against the interpreter instead, as the optimiser does.
  std::string verified_on = m.verified ? "full size" : "";
  // One outcome, one exit code (docs/cli.md): verified or unchecked (--no-verify, no device) 0,
  // not_verifiable 3, wrong 4, failed 5.
  std::string outcome = m.verified                 ? "verified"
                        : o.verify && !m.no_device ? "not_verifiable"
                                                   : "unchecked";
  std::string why = m.verified || outcome == "unchecked" ? "" : "no check ran at full size";
  if (m.ok() && !m.verified && !m.no_device && o.verify && arch) {
    backends::BackendConfig vc = config_of(a);
    auto [v, how] = optimizer::check_trace(*r, {}, name, vc);
    outcome = v;
    why = v == "verified" ? "" : how;
    if (v == "verified") verified_on = "scaled-down instance";
  }
  if (!m.ok()) {
    outcome = m.wrong_result ? "wrong" : "failed";
    if (a.json) {
      std::cout << JsonObject()
                       .add("ok", false)
                       .add("outcome", outcome)
                       .add("exit_code", outcome == "wrong" ? kExitWrong : kExitFailed)
                       .add("file", file)
                       .add("backend", name)
                       .add("error", *m.error)
                       .add("flags", m.flags)
                       .str()
                << "\n";
    } else {
      std::cerr << file << ": " << name << ": " << *m.error << "\n";
    }
    return outcome == "wrong" ? kExitWrong : kExitFailed;
  }
  const int code = outcome == "verified" || outcome == "unchecked" ? kExitOk
                   : outcome == "wrong"                            ? kExitWrong
                                                                   : kExitNotVerifiable;
  double gflops = m.median_s > 0 ? flops / m.median_s * 1e-9 : 0;
  double gbytes = m.median_s > 0 ? bytes / m.median_s * 1e-9 : 0;
  // Peak of the cores the program may use (one, or all this process may run on with a parallel
  // scope), from this machine's calibrated profile.
  double peak = 0;
  std::string peak_source, peak_note;
  int cores = any_parallel(r->body) ? backend->capabilities().threads : 1;
  if (arch && arch->isa) {
    backends::BackendConfig pc = profile_config();
    backends::MachineProfile prof;
    peak_source = optimizer::resolve_machine_profile(pc, &prof);
    peak = optimizer::kernel_peak_gflops(r.value(), optimizer::fma_peak_gflops(*arch->isa, prof),
                                         cores, prof.peak_gops_vnni);
    peak_note = optimizer::int8_peak_note(r.value(), prof.peak_gops_vnni);
  }
  const bool verified = !verified_on.empty();
  std::string verdict = verified ? "verified on the " + verified_on
                        : m.no_device
                            ? "NOT verified: compiled, but this machine has no device to run it"
                        : outcome == "wrong" ? "WRONG: checked on a scaled-down instance: " + why
                        : o.verify           ? "NOT verified (could not check: " + why + ")"
                                             : "not verified (--no-verify)";
  if (a.json) {
    JsonObject j;
    j.add("ok", code == kExitOk)
        .add("outcome", outcome)
        .add("outcome_why", why)
        .add("exit_code", code)
        .add("file", file)
        .add("backend", name)
        .add("median_s", m.median_s)
        .add("min_s", m.min_s);
    j.add("spread", m.spread).add("reps", m.reps).add("gflops", gflops).add("gbytes_per_s", gbytes);
    if (peak > 0)
      j.add("peak_gflops", peak)
          .add("fraction_of_peak", gflops / peak)
          .add("peak_from", peak_source);
    if (!peak_note.empty()) j.add("peak_note", peak_note);
    j.add("isa", backends::this_machine_isa()).add("cores", cores).add("noisy", m.noisy);
    j.add("verified", verified)
        .add("verified_on", verified_on)
        .add("max_rel_error", m.max_rel_error)
        .add("verification", m.verification)
        .add("compile_s", m.compile_s);
    j.add("cached", m.cached).add("flags", m.flags).add("seed", o.seed);
    std::cout << j.str() << "\n";
  } else {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%s on %s: median %.6g s (min %.6g s, spread %.1f%%, %d reps)%s\n", file.c_str(),
                  name.c_str(), m.median_s, m.min_s, 100 * m.spread, m.reps,
                  m.cached ? " [cached]" : "");
    std::cout << buf;
    std::snprintf(buf, sizeof buf, "  %.3f GFLOP/s, %.3f GB/s compulsory", gflops, gbytes);
    std::cout << buf;
    if (peak > 0) {
      std::snprintf(buf, sizeof buf,
                    ", %.1f%% of peak (%.0f GFLOP/s on %d core%s of an %s machine; %s)",
                    100 * gflops / peak, peak, cores, cores == 1 ? "" : "s",
                    backends::this_machine_isa().c_str(), peak_source.c_str());
      std::cout << buf;
    }
    if (!peak_note.empty()) std::cout << "\n  note: " << peak_note;
    if (m.noisy)
      std::cout << "\n  warning: the spread stayed above 10% after a repeat: the core was busy";
    char err[256] = "";
    if (m.verified)
      std::snprintf(err, sizeof err, " (%s; max relative error %.3g)",
                    m.verification.empty() ? "checked" : m.verification.c_str(), m.max_rel_error);
    std::snprintf(buf, sizeof buf, "; compile %.3f s", m.compile_s);
    std::cout << "\n  result: " << verdict << err << buf << "\n  flags: " << m.flags << "\n";
  }
  return code;
}

}  // namespace

std::vector<Command> backend_commands() {
  return {
      {"codegen",
       "codegen FILE [--backend B]",
       "print the C an x86 backend compiles for FILE (x86_avx512, x86_avx2, x86_64)",
       {"backend"},
       {},
       cmd_codegen},
      {"measure",
       "measure FILE [--backend B] [--seed S] [--no-verify] [--no-cache] [--flush (evict the "
       "kernel's data from the caches before every timed call)] [--budget S] [--timeout S]",
       "compile, verify and time FILE on a backend (default: the best x86 one available); prints "
       "the median time, "
       "GFLOP/s, GB/s, the fraction of peak and the correctness verdict",
       {"backend", "seed", "budget", "timeout", "compiler", "cache-dir"},
       {"no-verify", "no-cache", "flush"},
       cmd_measure},
  };
}

}  // namespace perfdojo::cli
