// swap_scopes PATH: interchange a scope with its only child scope; legal when no dependence has direction (<, >) on the pair.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `swap_scopes` (no change is made).
Legality check_swap_scopes(const ir::Program& p, const Action& a, const Target& t,
                           const ProgramIndex* index = nullptr);
/// Applies a legal `swap_scopes`.
ir::Program apply_swap_scopes(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
