// libFuzzer target: the IR parser and checker on arbitrary bytes. Whatever parses must print to
// text that parses back to the same program (structurally), and the checker must answer.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ir/check.h"
#include "ir/parse.h"
#include "ir/print.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = perfdojo::ir::load_program(text, "fuzz.pdj");
  if (!r.ok()) return 0;
  (void)perfdojo::ir::check_program(*r);
  const std::string printed = perfdojo::ir::print_program(*r);
  auto again = perfdojo::ir::load_program(printed, "printed.pdj");
  if (!again.ok() || !perfdojo::ir::structurally_equal(*r, *again)) std::abort();  // round trip
  return 0;
}
