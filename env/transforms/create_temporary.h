// create_temporary (see docs/actions.md).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `create_temporary` (no change is made).
Legality check_create_temporary(const ir::Program& p, const Action& a, const Target& t);
/// Applies a legal `create_temporary`.
ir::Program apply_create_temporary(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
