// The measured half of Optimizer::transform: candidates confirmed by real measurement, each
// faster one checked by the interpreter on a scaled-down instance before it counts.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "optimizer/search.h"
#include "transforms/analysis.h"

namespace perfdojo::optimizer::detail {

bool verify_small(const ir::Program& original, const std::vector<transforms::Action>& trace,
                  const transforms::Target& target, const std::string& arch,
                  const backends::BackendConfig& config) {
  // The interpreter checks the generated code of the same trace on a scaled-down instance: the
  // transformations and the code generator together, against the original's semantics.
  // Packed, cache-blocked traces (the micro-kernel sketch: kc = 256 needs K >= 512) replay only
  // on larger instances; 1.6e7 statement executions interpret in about half a second.
  auto inst = transforms::small_instance(original, trace, target, 2e6);
  if (!inst) inst = transforms::small_instance(original, trace, target, 1.6e7);
  if (!inst) return false;
  backends::MeasureOptions mo;
  mo.verify = true;
  mo.min_reps = mo.max_reps = 1;
  mo.time_budget_s = 0.01;
  backends::BackendConfig cfg = config;
  cfg.extra["verify_interpreter_max_flops"] = "1e9";
  auto checker = backends::make_backend(arch, cfg);
  auto m = checker->measure(inst->second, mo);
  return m.ok() && m.verified;
}

// A quick unverified screening run ranks; only a candidate that screens faster than the best so
// far gets the verified measurement and the scaled-down interpreter check before it counts.
bool SearchRun::try_candidate(const ir::Program& q, const std::vector<transforms::Action>& trace) {
  if (!measured.insert(ir::structural_hash(q)).second) return false;
  const auto t0 = Clock::now();
  auto sm = target_backend.measure(q, screen);
  ++r.measurements;
  bool better = false;
  if (sm.ok() && sm.median_s < std::min(best_screen, r.final_s) * 0.98) {
    auto m = target_backend.measure(q, mo);
    ++r.measurements;
    // The interpreter check on the scaled-down instance is what proves the trace and the code
    // generator right; the backend's own check at full size (a wrong result is an error)
    // adds to it when it can run (an unannotated large program has no sequential reference
    // other than itself).
    better = m.ok() && m.median_s < r.final_s && verify_small(program, trace, target, arch, config);
    if (better) {
      best_screen = sm.median_s;
      r.final_s = m.median_s;
      r.flags = m.flags;
      r.verified = true;
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
  r.curve.push_back({seconds_since(start), r.evaluations, best_estimate});
  return better;
}

// Alternates: a few of the model's favourites, then a measured climb from the best program so
// far, which screens its next untried children (the model's best first, six at a time) and
// moves to the first one verified faster. A misranking model (its favourites all slower) thus
// costs a few measurements, not the budget; the loop ends when the favourites and the best
// program's children are exhausted, or at 95% of the budget.
void SearchRun::confirm() {
  for (const Candidate& c : proposed) {  // the proposals first, whatever the model thinks
    if (over(0.75)) break;
    try_candidate(c.program, c.trace);
  }
  while (!over(0.95)) {
    const size_t favourites_before = next_favourite;
    for (int k = 0; k < 4 && next_favourite < pool.size() && !over(0.95); ++next_favourite)
      if (!pool[next_favourite].trace.empty()) {
        try_candidate(pool[next_favourite].program, pool[next_favourite].trace);
        ++k;
      }
    bool climbed = false, exhausted = false;
    climb(climbed, exhausted);
    if (!climbed && favourites_before == next_favourite && exhausted) break;
  }
  if (res.trace.empty()) r.verified = verify_small(program, {}, target, arch, config);
}

void SearchRun::climb(bool& climbed, bool& exhausted) {
  auto by_estimate = [](const Candidate& x, const Candidate& y) { return x.estimate < y.estimate; };
  while (!over(0.95) && !exhausted) {
    const uint64_t here_hash = ir::structural_hash(res.program);
    if (next_of != here_hash) {  // computed once per program, not once per round
      next.clear();
      children_of(Candidate{res.program, res.trace, 0}, &next, nullptr, 0.95);
      std::sort(next.begin(), next.end(), by_estimate);
      next_of = here_hash;
    }
    size_t& tried = children_tried[here_hash];
    bool moved = false;
    for (size_t stop = tried + 6; tried < next.size() && tried < stop && !over(0.95); ++tried) {
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

}  // namespace perfdojo::optimizer
