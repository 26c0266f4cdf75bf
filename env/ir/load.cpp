#include "ir/load.h"

#include "ir/check.h"
#include "ir/parse.h"

namespace perfdojo::ir {

Result<Program> load_program(std::string_view text, std::string_view file) {
  auto r = parse_program(text, file);
  if (!r.ok()) return r;
  auto errors = check_program(r.value());
  if (!errors.empty()) return errors;
  return r;
}

Result<Program> load_file(const std::string& path) {
  auto r = parse_file(path);
  if (!r.ok()) return r;
  auto errors = check_program(r.value());
  if (!errors.empty()) return errors;
  return r;
}

std::vector<Diagnostic> check_stream(std::istream& in, std::string_view file, CheckedStream& out) {
  auto errors = parse_stream(in, file, out);
  if (errors.empty()) errors = out.checker.finish();
  return errors;
}

}  // namespace perfdojo::ir
