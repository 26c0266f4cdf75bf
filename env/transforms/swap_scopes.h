// swap_scopes PATH: interchange a scope with its only child scope; legal when no dependence has
// direction (<, >) on the pair.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `swap_scopes` (no change is made).
Legality check_swap_scopes(const ir::Program& p, const Action& a, const Target& t,
                           const ProgramIndex* index = nullptr);
/// The mask's verdicts for `swap_scopes` from the program summary (see PrecheckFn).
Precheck precheck_swap_scopes(MaskSummary& summary, const MaskSite& site,
                              std::span<const int64_t> params);
/// Applies a legal `swap_scopes`.
ir::Program apply_swap_scopes(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
