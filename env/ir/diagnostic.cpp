#include "ir/diagnostic.h"

namespace perfdojo::ir {

std::string Diagnostic::str() const {
  std::string s;
  if (!loc.file.empty()) s += loc.file.str() + ":";
  if (loc.line > 0) s += std::to_string(loc.line) + ":" + std::to_string(loc.col) + ":";
  if (!s.empty()) s += " ";
  return s + "error: " + message;
}

}  // namespace perfdojo::ir
