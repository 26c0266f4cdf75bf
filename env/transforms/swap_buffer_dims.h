// swap_buffer_dims (see docs/actions.md).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `swap_buffer_dims` (no change is made).
Legality check_swap_buffer_dims(const ir::Program& p, const Action& a, const Target& t);
/// Applies a legal `swap_buffer_dims`.
ir::Program apply_swap_buffer_dims(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
