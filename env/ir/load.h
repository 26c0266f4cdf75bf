// Loading a kernel: parse, then check. Above both (parse.h knows nothing of the checker, and
// the checker only listens to a parse), so the two no longer call each other.
#pragma once

#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/ir.h"

namespace perfdojo::ir {

/// Parses then checks; the usual entry point for user-supplied kernels.
Result<Program> load_program(std::string_view text, std::string_view file = "<input>");
/// Reads, parses and checks a file.
Result<Program> load_file(const std::string& path);

class CheckedStream;
/// Parses `in` as a stream into a CheckedStream (check.h): the parse's diagnostics, or else the
/// checker's. The same verdict as load_file, in the memory of one line plus the declarations.
std::vector<Diagnostic> check_stream(std::istream& in, std::string_view file, CheckedStream& out);

}  // namespace perfdojo::ir
