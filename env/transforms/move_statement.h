// move_statement PATH: exchange a node (statement or scope) with the next sibling; legal when the
// two are independent within one iteration of their common scopes.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `move_statement` (no change is made).
Legality check_move_statement(const ir::Program& p, const Action& a, const Target& t,
                              const ProgramIndex* index = nullptr);
/// The mask's verdicts for `move_statement` from the program summary (see PrecheckFn).
Precheck precheck_move_statement(MaskSummary& summary, const MaskSite& site,
                                 std::span<const int64_t> params);
/// Applies a legal `move_statement`.
ir::Program apply_move_statement(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
