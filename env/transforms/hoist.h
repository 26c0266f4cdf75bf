// hoist (see docs/actions.md).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `hoist` (no change is made).
Legality check_hoist(const ir::Program& p, const Action& a, const Target& t);
/// Applies a legal `hoist`.
ir::Program apply_hoist(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
