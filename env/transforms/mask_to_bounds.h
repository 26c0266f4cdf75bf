// mask_to_bounds PATH: turn a select mask on the scope's iterator into bounds of the scope, so
// the iterations the mask discards are never run (docs/actions.md, "mask_to_bounds").
//
// Every statement under the scope at depth d must be `t OP= c ? X : N` (or `c ? N : X`) with the
// same condition c: `{d}` (coefficient +1 or -1) compared with an affine function of the
// iterators around the scope, and N a no-op for that statement, so skipping an iteration where
// N is chosen changes nothing, bit for bit:
// - a plain store whose N loads the stored element itself (`C[i,j] = c ? X : C[i,j]`);
// - `*=` with 1; `= max(...)` with -inf; `= min(...)` with inf (the IR's max keeps a NaN target
//   as a NaN only when it never reaches it: the target is never NaN in what we generate);
// - `+=` with -0, or with 0 when the target never holds -0: an i32 buffer, or one that starts
//   at +0 and is only ever added to (a sum from +0 is -0 only if every addend is).
// The statements become `t OP= X`; the scope gets the bound the condition gives (`{1} < {0}`
// -> `(..{0})`, `{1} > {0}` -> `({0}+1..)`, `==` both), which must not replace a bound it has.
// Refusals: not_a_scope, annotated, nothing_to_do (no statement), irregular_access (a
// statement without such a mask, conditions that differ, `!=`, a bound already set).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `mask_to_bounds` (no change is made).
Legality check_mask_to_bounds(const ir::Program& p, const Action& a, const Target& t,
                              const ProgramIndex* index = nullptr);
/// The mask's verdicts for `mask_to_bounds`: an annotated scope is refused, the rest is left to
/// the full check.
Precheck precheck_mask_to_bounds(MaskSummary& summary, const MaskSite& site,
                                 std::span<const int64_t> params);
/// Applies a legal `mask_to_bounds`.
ir::Program apply_mask_to_bounds(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
