// tile_scope PATH F: strip-mine a scope of extent E into E/F x F (F divides E). Pure re-indexing, so always order-preserving.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `tile_scope` (no change is made).
Legality check_tile_scope(const ir::Program& p, const Action& a, const Target& t,
                          const ProgramIndex* index = nullptr);
/// Applies a legal `tile_scope`.
ir::Program apply_tile_scope(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
