// split_scope PATH I: loop fission, distributing a scope over its children: children [0, I) stay,
// [I, n) go to a copy right after it.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `split_scope` (no change is made).
Legality check_split_scope(const ir::Program& p, const Action& a, const Target& t,
                           const ProgramIndex* index = nullptr);
/// The mask's verdicts for `split_scope` from the program summary (see PrecheckFn).
Precheck precheck_split_scope(MaskSummary& summary, const MaskSite& site,
                              std::span<const int64_t> params);
/// Applies a legal `split_scope`.
ir::Program apply_split_scope(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
