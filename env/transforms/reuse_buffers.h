// reuse_buffers X Y: Y's storage is X's. Every access of Y is renamed to X and Y's declaration
// is removed.
//
// Both must be temporaries of one element type and shape. Lifetimes are compared on the
// top-level body: with [fx, lx] and [fy, ly] the first and last top-level nodes touching X and
// Y, one range must end before the other starts (a buffer used nowhere never overlaps). Y must
// have no initial value (its declaration goes away), and neither may the later of the two: it
// would otherwise start from the earlier one's leftovers instead of its initial value. A buffer
// without an initial value starts undefined, so leftovers are as good as anything it held.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `reuse_buffers` (no change is made).
Legality check_reuse_buffers(const ir::Program& p, const Action& a, const Target& t,
                             const ProgramIndex* index = nullptr);
/// The mask's verdicts for `reuse_buffers` from the program summary (see PrecheckFn).
Precheck precheck_reuse_buffers(MaskSummary& summary, const MaskSite& site,
                                std::span<const int64_t> params);
/// Applies a legal `reuse_buffers`.
ir::Program apply_reuse_buffers(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
