// Canonical text of the IR. print(parse(t)) is a fixed point; parse(print(p)) == p.
#pragma once

#include <string>

#include "ir/ir.h"

namespace perfdojo::ir {

/// The whole program: doc comment, sizes, buffers, a blank line, the body.
std::string print_program(const Program& p);
/// One expression, as it appears in a statement.
std::string print_expr(const Expr& e);
/// One affine index expression, e.g. "{0}*32+{3}".
std::string print_affine(const Affine& a);
/// One access, e.g. "A[{0},{2}]".
std::string print_access(const Access& a);
/// A statement without its scopes, e.g. "a[{0}] += e[{0},{1}]".
std::string print_stmt(const Stmt& s);
/// A floating-point literal in its shortest exact form ("0", "1.5", "-inf", "1e-05").
std::string print_number(double v);

}  // namespace perfdojo::ir
