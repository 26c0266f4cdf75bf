// create_temporary PATH BUF: cache the region of BUF that one iteration of the scope at PATH
// touches in a new temporary (register / local-memory blocking).
//
// With S the scope at PATH (depth d), every access of BUF inside S must use one identical index
// I. The iterators of I deeper than d, in increasing depth, become the temporary's dimensions
// (extent: the largest scope at that depth holding an access); without any, it is `[1]` accessed
// `[0]`. Each such iterator must occur in exactly one dimension of I and each dimension may hold
// at most one of them, so distinct region elements land in distinct temporary elements. The body
// of S becomes: a copy-in nest `BUF_t[..] = BUF[I']`, the old body with BUF[I] -> BUF_t[..], and,
// when S writes BUF, a copy-out nest `BUF[I'] = BUF_t[..]`. The copy-in is left out only when
// S never reads BUF, writes it with plain `=` only, and one such write covers the whole region.
// Refused when S is vectorised, parallel or GPU-mapped, or lies in a parallel or GPU-mapped
// scope: the temporary is one storage shared by every iteration of those scopes.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `create_temporary` (no change is made).
Legality check_create_temporary(const ir::Program& p, const Action& a, const Target& t,
                                const ProgramIndex* index = nullptr);
/// The mask's verdicts for `create_temporary` from the program summary (see PrecheckFn).
Precheck precheck_create_temporary(MaskSummary& summary, const MaskSite& site, std::span<const int64_t> params);
/// Applies a legal `create_temporary`.
ir::Program apply_create_temporary(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
