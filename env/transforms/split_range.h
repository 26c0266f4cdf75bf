// split_range PATH F: index-set splitting. A scope of extent E that F does not divide becomes two
// sibling scopes running the same body, the first over [0, E1) with E1 = floor(E / F) * F, the
// second over [E1, E) with the iterator offset by E1 in every index. The iterations run in the
// same order as before, so it is always legal on a plain scope; the first part can then be tiled
// by F (a register tile of 6 rows on 1024, panels of 32 columns on 1000) and the remainder handled
// on its own. Refused when F divides E (kNothingToDo: tile_scope applies directly), F < 2 or
// F >= E (kBadParameter), or the scope is annotated (kAnnotated).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `split_range` (no change is made).
Legality check_split_range(const ir::Program& p, const Action& a, const Target& t,
                           const ProgramIndex* index = nullptr);
/// The mask's verdicts for `split_range` from the program summary (see PrecheckFn).
Precheck precheck_split_range(MaskSummary& summary, const MaskSite& site,
                              std::span<const int64_t> params);
/// Applies a legal `split_range`.
ir::Program apply_split_range(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
