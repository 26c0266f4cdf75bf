// hoist PATH: move a loop-invariant statement out of its scope S, before S when it is S's first
// child, after S when it is S's last (a sole child replaces S).
//
// Legal when the statement is a plain store `X[I] = e` (a reduction accumulates once per
// iteration: kNotInvariant) that uses no iterator of S's depth or deeper (kNotInvariant), `e`
// does not read X, and no other node in S writes X or a buffer `e` reads (kDependence): every
// iteration then stores the same value to the same element. Moving it after S also needs the
// rest of S not to read X, since later iterations saw the previous iteration's store
// (kDependence). A statement that is neither first nor last, a scope, or a top-level statement
// is not a location hoist works on (kBadParameter).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `hoist` (no change is made).
Legality check_hoist(const ir::Program& p, const Action& a, const Target& t,
                     const ProgramIndex* index = nullptr);
/// The mask's verdicts for `hoist` from the program summary (see PrecheckFn).
Precheck precheck_hoist(MaskSummary& summary, const MaskSite& site,
                        std::span<const int64_t> params);
/// Applies a legal `hoist`.
ir::Program apply_hoist(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
