// tile_scope PATH F: strip-mine a scope of extent E into E/F x F (F divides E). Pure re-indexing,
// so always order-preserving.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `tile_scope` (no change is made).
Legality check_tile_scope(const ir::Program& p, const Action& a, const Target& t,
                          const ProgramIndex* index = nullptr);
/// The mask's verdicts for `tile_scope` from the program summary (see PrecheckFn).
Precheck precheck_tile_scope(MaskSummary& summary, const MaskSite& site,
                             std::span<const int64_t> params);
/// Applies a legal `tile_scope`.
ir::Program apply_tile_scope(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
