// clear_annotation PATH: make an annotated scope (:vec, :unroll, :par, GPU-mapped) a plain
// scope again, so structural moves apply to it once more and a search can back out of a
// finalised scope without resetting the episode. Never changes semantics: an annotation only
// says how the iterations may run, and running them one after another in order is always one
// of those ways (the interpreter runs every scope so).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `clear_annotation` (no change is made): the scope must carry an annotation.
Legality check_clear_annotation(const ir::Program& p, const Action& a, const Target& t,
                                const ProgramIndex* index = nullptr);
/// The mask's verdicts for `clear_annotation` from the program summary (see PrecheckFn).
Precheck precheck_clear_annotation(MaskSummary& summary, const MaskSite& site,
                                   std::span<const int64_t> params);
/// Applies a legal `clear_annotation`.
ir::Program apply_clear_annotation(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
