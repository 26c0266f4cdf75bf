// join_nested PATH: merge a scope with its only child scope into one scope of the product extent,
// when every index uses the two iterators only as outer*inner_extent + inner.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `join_nested` (no change is made).
Legality check_join_nested(const ir::Program& p, const Action& a, const Target& t,
                           const ProgramIndex* index = nullptr);
/// The mask's verdicts for `join_nested` from the program summary (see PrecheckFn).
Precheck precheck_join_nested(MaskSummary& summary, const MaskSite& site,
                              std::span<const int64_t> params);
/// Applies a legal `join_nested`.
ir::Program apply_join_nested(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
