// vectorize PATH W: run an innermost scope W lanes at a time (tiling by W first when the extent is
// a multiple of W). Accesses must be unit-stride or invariant; reductions into invariant targets
// are allowed (they reassociate).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `vectorize` (no change is made).
Legality check_vectorize(const ir::Program& p, const Action& a, const Target& t,
                         const ProgramIndex* index = nullptr);
/// The mask's verdicts for `vectorize` from the program summary (see PrecheckFn).
Precheck precheck_vectorize(MaskSummary& summary, const MaskSite& site,
                            std::span<const int64_t> params);
/// Applies a legal `vectorize`.
ir::Program apply_vectorize(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
