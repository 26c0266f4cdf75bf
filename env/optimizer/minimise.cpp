// The returned trace without the actions it does not need (SearchRun::minimise).
//
// A search keeps every action on the path to its best program, including those that changed
// nothing the clock can see: a copy into a one-element temporary, an unroll GCC would have done,
// a tile the next move undid. Such a kernel is harder to read and its trace harder to learn from.
// Each action, last first, is dropped when the rest still replays on the target and the cost
// model estimates the result no slower; the shorter trace replaces the returned one only when
// the interpreter verifies it and the two, timed interleaved in one process, are within
// kTidyTolerance.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>

#include "optimizer/search.h"

namespace perfdojo::optimizer::detail {

std::optional<ir::Program> replay_as_searched(const ir::Program& original,
                                              const std::vector<transforms::Action>& trace,
                                              const transforms::Target& target,
                                              bool allow_reassociation, int64_t max_statements) {
  ir::Program cur = original;
  for (const auto& a : trace) {
    if (!allow_reassociation && reassociates(cur, a)) return std::nullopt;
    auto next = transforms::apply(cur, a, target);
    if (!next.ok()) return std::nullopt;
    cur = std::move(next).value();
  }
  if (too_much_code(cur, max_statements)) return std::nullopt;
  return cur;
}

std::vector<transforms::Action> drop_unneeded(
    const ir::Program& original, std::vector<transforms::Action> trace, ir::Program& result,
    const transforms::Target& target, bool allow_reassociation,
    const std::function<double(const ir::Program&)>& estimate, const std::function<bool()>& over,
    int64_t max_statements) {
  double shortest = estimate(result);
  for (size_t i = trace.size(); i-- > 0 && !over();) {
    std::vector<transforms::Action> without = trace;
    without.erase(without.begin() + static_cast<long>(i));
    auto q = replay_as_searched(original, without, target, allow_reassociation, max_statements);
    if (!q) continue;
    const double e = estimate(*q);
    if (!(e <= shortest)) continue;
    trace = std::move(without);
    result = std::move(*q);
    shortest = e;
  }
  return trace;
}

void SearchRun::minimise() {
  finish_compiling();
  // A modelled target's times are the estimates themselves: nothing to confirm by measurement,
  // and the search's own trace stays as it was found.
  if (res.trace.empty() || !r.verified || target_backend.deterministic()) return;
  auto over = [&] {
    return seconds_since(start) > timeout_s * 0.97 - final_reserve_s() || cancelled();
  };
  auto shortest =
      replay_as_searched(program, res.trace, target, ms.allow_reassociation, code_limit);
  if (!shortest || !ir::structurally_equal(*shortest, res.program))
    return;  // not the search's own path
  std::vector<transforms::Action> trace = drop_unneeded(
      program, res.trace, *shortest, target, ms.allow_reassociation,
      [&](const ir::Program& q) { return estimate(q); }, over, code_limit);
  const int dropped = static_cast<int>(res.trace.size() - trace.size());
  if (std::getenv("PERFDOJO_VERBOSE"))
    fprintf(stderr, "\nminimise: %d of %zu actions dropped by the model (%.2fs left)\n", dropped,
            res.trace.size(), timeout_s * 0.97 - final_reserve_s() - seconds_since(start));
  if (dropped == 0 || over()) return;
  std::string how;
  if (!verify_small(program, trace, target, arch, config, &r.device_unrun, &how)) return;
  auto pair = target_backend.compare({&res.program, &*shortest}, mo);
  r.measurements += 2;
  if (std::getenv("PERFDOJO_VERBOSE") && pair[0].ok() && pair[1].ok())
    fprintf(stderr, "minimise: %.6f s against %.6f s\n", pair[1].median_s, pair[0].median_s);
  if (!pair[0].ok() || !pair[1].ok() || pair[1].median_s > pair[0].median_s * (1 + kTidyTolerance))
    return;
  r.final_s *= pair[1].median_s / pair[0].median_s;  // on the best's scale, as try_candidate does
  res.program = std::move(*shortest);
  res.trace = std::move(trace);
  r.actions_dropped = dropped;
  r.verified_on = how;
  record_curve();
}

}  // namespace perfdojo::optimizer::detail
