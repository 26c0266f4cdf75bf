// parallelize PATH: run the iterations of a scope on threads; legal when no dependence is carried
// by it, reductions included.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `parallelize` (no change is made).
Legality check_parallelize(const ir::Program& p, const Action& a, const Target& t,
                           const ProgramIndex* index = nullptr);
/// The mask's verdicts for `parallelize` from the program summary (see PrecheckFn).
Precheck precheck_parallelize(MaskSummary& summary, const MaskSite& site,
                              std::span<const int64_t> params);
/// Applies a legal `parallelize`.
ir::Program apply_parallelize(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
