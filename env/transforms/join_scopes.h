// join_scopes PATH: fuse a scope with the next sibling scope of equal extent; legal when no
// instance of the second reads or writes what a later iteration of the first touches.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `join_scopes` (no change is made).
Legality check_join_scopes(const ir::Program& p, const Action& a, const Target& t,
                           const ProgramIndex* index = nullptr);
/// The mask's verdicts for `join_scopes` from the program summary (see PrecheckFn).
Precheck precheck_join_scopes(MaskSummary& summary, const MaskSite& site,
                              std::span<const int64_t> params);
/// Applies a legal `join_scopes`.
ir::Program apply_join_scopes(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
