// inline_temporary (see docs/actions.md).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `inline_temporary` (no change is made).
Legality check_inline_temporary(const ir::Program& p, const Action& a, const Target& t);
/// Applies a legal `inline_temporary`.
ir::Program apply_inline_temporary(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
