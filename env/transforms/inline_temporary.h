// inline_temporary BUF: forward substitution. The one statement `BUF[I] = e` that writes the
// temporary is deleted, each read of BUF is replaced by `e`, and BUF's declaration is removed.
//
// Legal when BUF is a temporary without an initial value, written by exactly one statement W,
// a plain store whose `e` does not read BUF; every read of BUF is `BUF[I]` with W's own index,
// in a statement that follows W in the same scope body (not nested deeper), and there is at
// least one; and no node from W up to the last reader writes a buffer `e` reads (the last
// reader's own target is exempt: its right-hand side is evaluated before it stores). Then each
// reader re-evaluates `e` in the same iteration on the same values. `e` must have a type of its
// own (contain a load or a cast): a bare literal would be evaluated in its new context's type.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `inline_temporary` (no change is made).
Legality check_inline_temporary(const ir::Program& p, const Action& a, const Target& t,
                                const ProgramIndex* index = nullptr);
/// The mask's verdicts for `inline_temporary` from the program summary (see PrecheckFn).
Precheck precheck_inline_temporary(MaskSummary& summary, const MaskSite& site,
                                   std::span<const int64_t> params);
/// Applies a legal `inline_temporary`.
ir::Program apply_inline_temporary(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
