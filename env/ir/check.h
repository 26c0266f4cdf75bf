// Static validity of a Program: names, ranks, types, bounds, roles.
#pragma once

#include <memory>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/ir.h"
#include "ir/load.h"

namespace perfdojo::ir {

/// Every problem found, in source order; empty means the program is valid.
std::vector<Diagnostic> check_program(const Program& p);

/// check_program's rules applied to a program as a streaming parse delivers it: it keeps the
/// declarations and what the rules need (the buffers written so far, the open scopes' extents),
/// never the body. Feed it from parse_stream, then call finish().
class StreamChecker final : public ProgramSink {
 public:
  StreamChecker();
  ~StreamChecker() override;
  /// `header` must outlive the checker (parse_stream's does, until it returns).
  void declarations(const Program& header) override;
  void open_scope(int64_t extent, std::string extent_name, Annot annot, SourceLoc loc,
                  ScopeBounds bounds) override;
  void close_scope() override;
  void statement(Stmt s) override;
  /// Every problem found, in source order.
  std::vector<Diagnostic> finish();

 private:
  friend std::vector<Diagnostic> check_program(const Program& p);
  class Impl;
  std::unique_ptr<Impl> impl_;
};

/// What `perfdojo check` takes from a streaming parse of a kernel: the checker's verdict, the
/// structural hash and the counts, all without holding the body.
class CheckedStream final : public ProgramSink {
 public:
  void declarations(const Program& header) override;
  void open_scope(int64_t extent, std::string extent_name, Annot annot, SourceLoc loc,
                  ScopeBounds bounds) override;
  void close_scope() override;
  void statement(Stmt s) override;

  StreamChecker checker;
  StructuralHasher hasher;
  int64_t statements = 0, scopes = 0;
};

// Parsing into it: check_stream (ir/load.h).

}  // namespace perfdojo::ir
