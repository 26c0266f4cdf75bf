// Parsing `.pdj` text into a Program. Never throws on bad text: errors are diagnostics.
#pragma once

#include <istream>
#include <string>
#include <string_view>

#include "ir/diagnostic.h"
#include "ir/ir.h"

namespace perfdojo::ir {

/// Parses text read from `in` in 64 KiB pieces, handing each part to `sink` as soon as its line
/// is parsed. A line longer than 1 MiB is refused without being held. After the first error the
/// sink hears nothing more, but later lines are still parsed for errors (at most 50). Returns the
/// diagnostics; empty means the sink was given the whole kernel, every scope closed.
std::vector<Diagnostic> parse_stream(std::istream& in, std::string_view file, ProgramSink& sink);
/// The same over text in memory.
std::vector<Diagnostic> parse_stream(std::string_view text, std::string_view file,
                                     ProgramSink& sink);

/// Parses a whole file's text; `file` names it in diagnostics. Does not run the checker.
Result<Program> parse_program(std::string_view text, std::string_view file = "<input>");
/// Reads and parses a file (an unreadable file is a diagnostic too).
Result<Program> parse_file(const std::string& path);
// Parsing and checking together: ir/load.h (load_program, load_file).

}  // namespace perfdojo::ir
