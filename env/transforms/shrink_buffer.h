// shrink_buffer (see docs/actions.md).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `shrink_buffer` (no change is made).
Legality check_shrink_buffer(const ir::Program& p, const Action& a, const Target& t);
/// Applies a legal `shrink_buffer`.
ir::Program apply_shrink_buffer(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
