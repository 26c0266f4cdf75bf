// reuse_buffers (see docs/actions.md).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `reuse_buffers` (no change is made).
Legality check_reuse_buffers(const ir::Program& p, const Action& a, const Target& t);
/// Applies a legal `reuse_buffers`.
ir::Program apply_reuse_buffers(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
