// Canonical text of the IR. print(parse(t)) is a fixed point; parse(print(p)) == p.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace perfdojo::ir {

/// The whole program: doc comment, sizes, buffers, a blank line, the body.
std::string print_program(const Program& p);
/// The doc comment, sizes and buffers, and the blank line before the body.
std::string print_declarations(const Program& p);

/// print_program as a ProgramSink: the canonical text of a program written to `out` line by line
/// as a streaming parse delivers it, so a file is reformatted without holding its tree.
class StreamPrinter final : public ProgramSink {
 public:
  explicit StreamPrinter(std::ostream& out) : out_(out) {}
  void declarations(const Program& header) override;
  void open_scope(int64_t extent, std::string extent_name, Annot annot, SourceLoc loc,
                  ScopeBounds bounds) override;
  void close_scope() override;
  void statement(Stmt s) override;

 private:
  std::ostream& out_;
  size_t depth_ = 0;                  ///< scopes open
  std::vector<std::string> pending_;  ///< scopes opened since the last line, not yet written
  std::string line_;
};

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
