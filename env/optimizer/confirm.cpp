// The measured half of Optimizer::transform: candidates confirmed by real measurement, each
// faster one checked by the interpreter on a scaled-down instance before it counts.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "backends/host_buffers.h"
#include "ir/interp.h"
#include "optimizer/search.h"
#include "transforms/analysis.h"

namespace perfdojo::optimizer::detail {

namespace {

// One verified run of `p` on a fresh backend, checked against the interpreter (up to 1e9 flops).
backends::Measurement interpreter_checked(const ir::Program& p, const std::string& arch,
                                          const backends::BackendConfig& config) {
  backends::MeasureOptions mo;
  mo.verify = true;
  mo.min_reps = mo.max_reps = 1;
  mo.time_budget_s = 0.01;
  backends::BackendConfig cfg = config;
  cfg.verify_interpreter_max_flops = 1e9;
  return backends::make_backend(arch, cfg)->measure(p, mo);
}

// Whether the original's own generated code (no transformation applied) agrees with the
// interpreter on a scaled-down instance: what makes its sequential build a trusted reference at
// full size. Checked once per original and backend configuration in a process.
Verdict original_code_checked(const ir::Program& original, const transforms::Target& target,
                              const std::string& arch, const backends::BackendConfig& config,
                              std::string* why) {
  static std::mutex mu;
  static std::set<uint64_t> good;
  // the backends' test hook changes the code
  const std::string how = arch + "\n" + config.compiler + "\n" + config.inject;
  const uint64_t key =
      ir::structural_hash(original) ^ (std::hash<std::string>{}(how)*0x9e3779b97f4a7c15ull);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (good.count(key)) return Verdict::kVerified;
  }
  auto inst = transforms::small_instance(original, {}, target, 2e6);
  if (!inst) {
    *why =
        "no instance of the original small enough to interpret (its sizes cannot be scaled down "
        "consistently), so its sequential build is no trusted reference";
    return Verdict::kUncheckable;
  }
  auto m = interpreter_checked(inst->first, arch, config);
  if (!(m.ok() && m.verified)) {
    *why = "the original's own code on a scaled-down instance: " + m.error.value_or("no check ran");
    return !code_at_fault(m) ? Verdict::kUncheckable : Verdict::kWrong;
  }
  std::lock_guard<std::mutex> lock(mu);
  good.insert(key);
  return Verdict::kVerified;
}

}  // namespace

bool code_at_fault(const backends::Measurement& m) {
  if (m.wrong_result) return true;
  if (!m.error) return false;
  // The worker and the compiler report these in words (backends/worker.h, compiler.h).
  for (const char* s : {"crashed", "timed out", "compile failed", "killed", "memory limit"})
    if (m.error->find(s) != std::string::npos) return true;
  return false;
}

bool verify_small(const ir::Program& original, const std::vector<transforms::Action>& trace,
                  const transforms::Target& target, const std::string& arch,
                  const backends::BackendConfig& config, bool* device_unrun, std::string* how) {
  std::string why;
  const Verdict v = check_small(original, trace, target, arch, config, device_unrun, &why);
  if (v == Verdict::kVerified && how) *how = why;
  return v == Verdict::kVerified;
}

Verdict check_small(const ir::Program& original, const std::vector<transforms::Action>& trace,
                    const transforms::Target& target, const std::string& arch,
                    const backends::BackendConfig& config, bool* device_unrun, std::string* how) {
  std::string scratch;
  if (!how) how = &scratch;
  // The interpreter checks the generated code of the same trace on a scaled-down instance: the
  // transformations and the code generator together, against the original's semantics.
  // Packed, cache-blocked traces (the micro-kernel sketch: kc = 256 needs K >= 512) replay only
  // on larger instances; 1.6e7 statement executions interpret in about half a second. A trace
  // fitted to the full sizes (remainders split off at 480 of 512 columns) may replay on no
  // smaller instance: up to 6.4e7 (about two seconds, the full size of a 512-token attention),
  // a candidate that beat the best so far is worth checking at full size.
  auto inst = transforms::small_instance(original, trace, target, 2e6);
  if (!inst) inst = transforms::small_instance(original, trace, target, 1.6e7);
  if (!inst) inst = transforms::small_instance(original, trace, target, 6.4e7);
  const bool verbose = std::getenv("PERFDOJO_VERBOSE") != nullptr;
  if (!inst) {
    // Blocks sized for the full problem (kc = 256 over a 1536-long reduction tiled by 48 as
    // well: no size below 768 keeps both) can leave no instance small enough to interpret. Then
    // the result runs at full size against the original's sequential build on the same inputs,
    // itself checked against the interpreter on a scaled-down instance of the original: still
    // the transformations and the code generator together, end to end.
    auto checker = backends::make_backend(arch, config);
    auto full = transforms::replay(original, trace, target);
    if (!checker || !checker->capabilities().verify_against_reference || !full.ok()) {
      *how = "no instance of at most 6.4e7 statement executions replays the trace, and " +
             std::string(!full.ok()
                             ? "the trace does not replay at full size"
                             : "the " + arch +
                                   " backend cannot compare with the original's sequential build");
      if (verbose) fprintf(stderr, "\nnot verified: %s", how->c_str());
      return Verdict::kUncheckable;
    }
    if (Verdict v = original_code_checked(original, target, arch, config, how);
        v != Verdict::kVerified) {
      if (verbose) fprintf(stderr, "\nnot verified: %s", how->c_str());
      return v;
    }
    backends::MeasureOptions mo;
    mo.min_reps = mo.max_reps = 1;
    mo.time_budget_s = 0.01;
    mo.reference = &original;
    auto m = checker->measure(full.value(), mo);
    if (!(m.ok() && m.verified)) {
      *how =
          "full size, against the original's sequential build: " + m.error.value_or("no check ran");
      if (verbose) fprintf(stderr, "\nnot verified: %s", how->c_str());
      return !code_at_fault(m) ? Verdict::kUncheckable : Verdict::kWrong;
    }
    *how = "full size, against the original's sequential build";
    return Verdict::kVerified;
  }
  auto m = interpreter_checked(inst->second, arch, config);
  if (m.ok() && m.no_device) {
    // Compiled for the device, not run: the transformations are still checked, on the
    // interpreter, against the original at the same scaled-down size.
    if (device_unrun) *device_unrun = true;
    const auto inputs =
        ir::make_inputs(inst->first, backends::MeasureOptions{}.seed);  // the seed it ran with
    std::map<std::string, ir::Tensor> bounds;
    ir::InterpretOptions io;
    io.error_bounds = &bounds;
    auto want = ir::interpret(inst->first, inputs, io);
    auto got = ir::interpret(inst->second, inputs);
    if (!want.ok() || !got.ok()) {
      *how = "the interpreter refused the program: " + (want.ok() ? got : want).error_text();
      return Verdict::kUncheckable;
    }
    std::map<std::string, ir::Tensor> w, g;
    for (const auto& b : inst->first.buffers)
      if (b.role == ir::Role::kOutput) {
        w[b.name] = want->at(b.name);
        g[b.name] = got->at(b.name);
      }
    backends::Measurement check;
    backends::Comparison cmp;
    cmp.bounds = &bounds;  // the moves may reassociate: within the original's rounding bound
    if (!backends::compare_outputs(inst->first, g, w, check, cmp)) {
      *how = "scaled-down instance, interpreter (not run: no device): " + check.error.value_or("");
      return Verdict::kWrong;
    }
    *how = "scaled-down instance, interpreter (not run: no device)";
    return Verdict::kVerified;
  }
  if (!(m.ok() && m.verified)) {
    *how = "scaled-down instance: " + m.error.value_or("no check ran");
    if (verbose) fprintf(stderr, "\nnot verified: %s", how->c_str());
    return !code_at_fault(m) ? Verdict::kUncheckable : Verdict::kWrong;
  }
  *how = "scaled-down instance, interpreter";
  return Verdict::kVerified;
}

// A quick unverified screening run ranks; only a candidate that screens faster than the best so
// far gets the verified measurement and the scaled-down interpreter check before it counts. A
// close call is decided by timing the candidate and the best so far interleaved in one process,
// so a busy moment cannot make a slower program look faster; a clear win (half again faster than
// the best's time) is measured alone.
bool SearchRun::try_candidate(const ir::Program& q, const std::vector<transforms::Action>& trace) {
  if (!measured.insert(ir::structural_hash(q)).second) return false;
  const auto t0 = Clock::now();
  backends::Measurement sm;
  if (auto it = screened.find(ir::structural_hash(q)); it != screened.end()) {
    sm = std::move(it->second);  // counted when taken
    screened.erase(it);
  } else {
    sm = target_backend.measure(q, screen);
    ++r.measurements;
  }
  if (transforms::parallel_scopes(q.body) > 0) ++r.parallel_candidates;
  bool better = false;
  if (sm.ok() && sm.median_s < std::min(best_screen, r.final_s) * 0.98) {
    backends::Measurement m;
    if (sm.median_s * 1.5 < r.final_s) {
      m = target_backend.measure(q, mo);
      ++r.measurements;
      better = m.ok() && m.median_s < r.final_s;
    } else {
      auto pair = target_backend.compare({&res.program, &q}, mo);
      r.measurements += 2;
      m = pair[1];
      // Against the best as timed in this same run; its figure from then if it failed now.
      const double best_now = pair[0].ok() ? pair[0].median_s : r.final_s;
      better = m.ok() && m.median_s < best_now;
      if (better && pair[0].ok()) m.median_s *= r.final_s / best_now;  // on the best's old scale
    }
    // The interpreter check on the scaled-down instance is what proves the trace and the code
    // generator right; the backend's own check at full size (a wrong result is an error)
    // adds to it when it can run (an unannotated large program has no sequential reference
    // other than itself).
    std::string how;
    better = better && verify_small(program, trace, target, arch, config, &r.device_unrun, &how);
    if (better) {
      best_screen = sm.median_s;
      r.final_s = m.median_s;
      r.flags = m.flags;
      r.verified = true;
      r.verified_on = how;
      if (r.first_measured_s == 0) r.first_measured_s = seconds_since(start);
      res.program = q;
      res.trace = trace;
    }
  }
  if (std::getenv("PERFDOJO_VERBOSE"))
    fprintf(stderr, "\n%s in %.2fs: %s\n%s", better ? "accepted" : "measured", seconds_since(t0),
            sm.ok() ? std::to_string(sm.median_s).c_str() : sm.error->c_str(),
            transforms::print_trace(trace).c_str());
  if (progress)
    progress(std::min(1.0, seconds_since(start) / timeout_s), r.evaluations,
             r.baseline_s / r.final_s);
  record_curve();
  return better;
}

void SearchRun::compile_ahead(const ir::Program& measuring, std::vector<ir::Program> programs) {
  finish_compiling();
  if (r.threads < 2 || programs.empty()) return;
  // A kernel on every core would be timed against the compiler: then nothing compiles meanwhile.
  if (transforms::parallel_scopes(measuring.body) > 0) return;
  for (const ir::Program& p : programs)
    if (transforms::parallel_scopes(p.body) > 0) return;
  ahead = std::thread([this, ps = std::move(programs)] { target_backend.prepare(ps); });
}

void SearchRun::screen_ahead(const std::vector<const ir::Program*>& programs) {
  if (target_backend.concurrency() < 2) return;
  std::vector<const ir::Program*> todo;
  std::vector<uint64_t> hashes;
  for (const ir::Program* p : programs) {
    const uint64_t h = ir::structural_hash(*p);
    if (measured.count(h) || screened.count(h) ||
        std::find(hashes.begin(), hashes.end(), h) != hashes.end())
      continue;
    todo.push_back(p);
    hashes.push_back(h);
  }
  if (todo.size() < 2) return;  // one is screened by try_candidate as usual
  auto ms = target_backend.measure_each(todo, screen);
  r.measurements += static_cast<int>(ms.size());
  for (size_t i = 0; i < ms.size(); ++i) screened[hashes[i]] = std::move(ms[i]);
}

void SearchRun::finish_compiling() {
  if (ahead.joinable()) ahead.join();
}

void SearchRun::measure_proposals() {
  {  // the first one compiles in the measurement; the others meanwhile on another core
    std::vector<ir::Program> later;
    for (size_t i = 1; i < proposed.size(); ++i) later.push_back(proposed[i].program);
    if (!proposed.empty()) compile_ahead(proposed[0].program, std::move(later));
    std::vector<const ir::Program*> all;
    for (const Candidate& c : proposed) all.push_back(&c.program);
    screen_ahead(all);
  }
  for (const Candidate& c : proposed) {  // whatever the model thinks of them
    if (over(kProposalShare)) break;
    try_candidate(c.program, c.trace);
  }
}

double SearchRun::final_reserve_s() const {
  if (!(r.baseline_s > 0)) return 0;
  return std::min(0.3 * timeout_s, kFinalMinReps * 1.5 * (r.baseline_s + r.final_s) + 0.5);
}

void SearchRun::retime_final() {
  finish_compiling();  // nothing else runs while the report's times are taken
  if (cancelled() || !(r.baseline_s > 0)) return;  // Ctrl-C: the best so far, at once
  backends::MeasureOptions fo = mo;
  fo.min_reps = kFinalMinReps;
  fo.max_reps = std::max(mo.max_reps, 20);
  fo.time_budget_s = std::clamp(timeout_s * 0.02, 0.2, 3.0);
  const ir::Program& orig = *original;
  const bool same = res.trace.empty() && ir::structurally_equal(res.program, orig);
  // The original is returned (minimised to nothing): no faster kernel arrived at any time.
  if (same) r.first_measured_s = 0;
  auto ms = same ? target_backend.compare({&orig}, fo)
                 : target_backend.compare({&orig, &res.program}, fo);
  r.measurements += static_cast<int>(ms.size());
  const auto& b = ms.front();
  const auto& f = ms.back();
  if (!b.ok() || !f.ok()) return;  // keep the search's figures; interleaved stays false
  r.baseline_s = b.median_s;
  r.baseline_min_s = b.min_s;
  r.baseline_spread = b.spread;
  r.final_s = f.median_s;
  r.final_min_s = f.min_s;
  r.final_spread = f.spread;
  r.final_reps = std::min(b.reps, f.reps);
  r.noisy = b.noisy || f.noisy;
  r.interleaved = !target_backend.deterministic();  // estimates are not timed at all
  if (!same && f.median_s > b.median_s) {
    // Side by side the original was at least as fast (the search accepted a win within its
    // noise): the original is returned, never a slower kernel.
    res.program = orig;
    res.trace.clear();
    r.first_measured_s = 0;  // the kernel it timed is not the one returned
    r.final_s = b.median_s;
    r.final_min_s = b.min_s;
    r.final_spread = b.spread;
    r.flags = b.flags;
    r.verified = b.verified;  // its own full-size check, if it had one
    r.verified_on.clear();
    original_checked = false;
    check_original();
    r.note =
        "the best candidate timed slower than the original side by side in the final re-timing; "
        "returning the original unchanged";
  }
}

// Alternates: a few of the model's favourites, then a measured climb from the best program so
// far, which screens its next untried children (the model's best first, six at a time) and
// moves to the first one verified faster. A misranking model (its favourites all slower) thus
// costs a few measurements, not the budget; the loop ends when the favourites and the best
// program's children are exhausted, or at 95% of the budget.
void SearchRun::confirm() {
  measure_proposals();  // those not measured before the beam (the deadline came first)
  while (!confirm_over()) {
    const size_t favourites_before = next_favourite;
    {
      std::vector<ir::Program> later;
      for (size_t i = next_favourite + 1; i < std::min(pool.size(), next_favourite + 4); ++i)
        later.push_back(pool[i].program);
      if (next_favourite < pool.size())
        compile_ahead(pool[next_favourite].program, std::move(later));
      std::vector<const ir::Program*> four;
      for (size_t i = next_favourite; i < pool.size() && four.size() < 4; ++i)
        if (!pool[i].trace.empty()) four.push_back(&pool[i].program);
      screen_ahead(four);
    }
    for (int k = 0; k < 4 && next_favourite < pool.size() && !confirm_over(); ++next_favourite)
      if (!pool[next_favourite].trace.empty()) {
        try_candidate(pool[next_favourite].program, pool[next_favourite].trace);
        ++k;
      }
    bool climbed = false, exhausted = false;
    climb(climbed, exhausted);
    if (!climbed && favourites_before == next_favourite && exhausted) break;
  }
  check_original();
}

void SearchRun::check_original() {
  if (!res.trace.empty() || original_checked) return;
  original_checked = true;
  std::string how;
  const Verdict v = check_small(program, {}, target, arch, config, &r.device_unrun, &how);
  if (v != Verdict::kVerified && r.verified) {
    // The backend's own full-size check of the original stands.
    if (r.verified_on.empty()) r.verified_on = "full size, interpreter";
    return;
  }
  if (v == Verdict::kVerified) {
    r.verified = true;
    r.verified_on = how;
  } else {
    r.outcome = outcome_of(v);
    r.outcome_why = how;
  }
}

void SearchRun::climb(bool& climbed, bool& exhausted) {
  auto by_estimate = [](const Candidate& x, const Candidate& y) { return x.estimate < y.estimate; };
  while (!confirm_over() && !exhausted) {
    const uint64_t here_hash = ir::structural_hash(res.program);
    if (next_of != here_hash) {  // computed once per program, not once per round
      next.clear();
      children_of(Candidate{res.program, res.trace, 0}, &next, nullptr, 0.95);
      std::sort(next.begin(), next.end(), by_estimate);
      next_of = here_hash;
    }
    size_t& tried = children_tried[here_hash];
    bool moved = false;
    {
      std::vector<ir::Program> later;
      for (size_t i = tried + 1; i < std::min(next.size(), tried + 6); ++i)
        later.push_back(next[i].program);
      if (tried < next.size()) compile_ahead(next[tried].program, std::move(later));
      std::vector<const ir::Program*> six;
      for (size_t i = tried; i < std::min(next.size(), tried + 6); ++i)
        six.push_back(&next[i].program);
      screen_ahead(six);
    }
    for (size_t stop = tried + 6; tried < next.size() && tried < stop && !confirm_over(); ++tried) {
      if (try_candidate(next[tried].program, next[tried].trace)) {
        moved = climbed = true;
        break;
      }
    }
    exhausted = !moved && tried >= next.size();
    if (!moved) break;  // back to the favourites before more children of this program
  }
}

}  // namespace perfdojo::optimizer::detail

namespace perfdojo::optimizer {

bool verify_trace(const ir::Program& original, const std::vector<transforms::Action>& trace,
                  const std::string& arch, const backends::BackendConfig& config) {
  const auto target = transforms::target_by_name(arch);
  return target && detail::verify_small(original, trace, *target, arch, config);
}

std::pair<std::string, std::string> check_trace(const ir::Program& original,
                                                const std::vector<transforms::Action>& trace,
                                                const std::string& arch,
                                                const backends::BackendConfig& config) {
  const auto target = transforms::target_by_name(arch);
  if (!target) return {"not_verifiable", "no target named '" + arch + "'"};
  std::string how;
  const detail::Verdict v =
      detail::check_small(original, trace, *target, arch, config, nullptr, &how);
  return {detail::outcome_of(v), how};
}

}  // namespace perfdojo::optimizer
