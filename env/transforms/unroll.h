// unroll PATH F: mark a scope unrolled (tiling by F first when F is below the extent). Never
// changes semantics.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// The largest factor `unroll` accepts (copies of the body written out).
inline constexpr int64_t kMaxUnroll = 64;

/// Legality of `unroll` (no change is made).
Legality check_unroll(const ir::Program& p, const Action& a, const Target& t,
                      const ProgramIndex* index = nullptr);
/// The mask's verdicts for `unroll` from the program summary (see PrecheckFn).
Precheck precheck_unroll(MaskSummary& summary, const MaskSite& site,
                         std::span<const int64_t> params);
/// Applies a legal `unroll`.
ir::Program apply_unroll(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
