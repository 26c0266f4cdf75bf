// Static validity of a Program: names, ranks, types, bounds, roles.
#pragma once

#include <vector>

#include "ir/diagnostic.h"
#include "ir/ir.h"

namespace perfdojo::ir {

/// Every problem found, in source order; empty means the program is valid.
std::vector<Diagnostic> check_program(const Program& p);

}  // namespace perfdojo::ir
