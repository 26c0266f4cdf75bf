// shrink_buffer BUF I: drop dimension I of temporary BUF when each iteration of one scope works
// on its own slice of that dimension, so every iteration can reuse one slice.
//
// Legal when dimension I of every access is exactly `{k}` for one k, `{k}` occurs in no other
// dimension, and every access lies inside one and the same scope S at depth k. Then iteration s
// of S touches slice s only. The slice must also start fresh in every execution of S: no two
// accesses (one a write) from different iterations of S's enclosing scopes may touch the same
// element (checked with the dependence test). An initial value is re-established by a nest at
// the start of S's body and dropped from the declaration. A rank-1 buffer becomes `[1]` accessed
// `[0]`. Refused when S is vectorised, parallel or GPU-mapped (the slice would be shared by
// concurrent iterations), and, for a buffer with an initial value, when S lies in a parallel or
// GPU-mapped scope (every iteration of that scope would re-initialise the whole slice).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `shrink_buffer` (no change is made).
Legality check_shrink_buffer(const ir::Program& p, const Action& a, const Target& t,
                             const ProgramIndex* index = nullptr);
/// The mask's verdicts for `shrink_buffer` from the program summary (see PrecheckFn).
Precheck precheck_shrink_buffer(MaskSummary& summary, const MaskSite& site,
                                std::span<const int64_t> params);
/// Applies a legal `shrink_buffer`.
ir::Program apply_shrink_buffer(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
