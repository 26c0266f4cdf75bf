// Parsing `.pdj` text into a Program. Never throws on bad text: errors are diagnostics.
#pragma once

#include <string>
#include <string_view>

#include "ir/diagnostic.h"
#include "ir/ir.h"

namespace perfdojo::ir {

/// Parses a whole file's text; `file` names it in diagnostics. Does not run the checker.
Result<Program> parse_program(std::string_view text, std::string_view file = "<input>");
/// Reads and parses a file (an unreadable file is a diagnostic too).
Result<Program> parse_file(const std::string& path);
/// Parses then checks; the usual entry point for user-supplied kernels.
Result<Program> load_program(std::string_view text, std::string_view file = "<input>");
/// Reads, parses and checks a file.
Result<Program> load_file(const std::string& path);

}  // namespace perfdojo::ir
