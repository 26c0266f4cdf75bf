// move_statement PATH: exchange a node (statement or scope) with the next sibling; legal when the two are independent within one iteration of their common scopes.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `move_statement` (no change is made).
Legality check_move_statement(const ir::Program& p, const Action& a, const Target& t,
                              const ProgramIndex* index = nullptr);
/// Applies a legal `move_statement`.
ir::Program apply_move_statement(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
