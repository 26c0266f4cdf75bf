// libFuzzer target: the IR parser and checker on arbitrary bytes. Whatever parses must print to
// text that parses back to the same program (structurally), and the checker must answer. The
// streaming path (a stream read in pieces, the streaming checker and hasher, as `perfdojo check`
// runs them) must give the same diagnostics and, for a valid kernel, the same hash and the same
// canonical text.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "ir/check.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"

namespace {

using namespace perfdojo::ir;

std::string joined(const std::vector<Diagnostic>& errors) {
  std::string s;
  for (const auto& d : errors) s += d.str() + "\n";
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = load_program(text, "fuzz.pdj");
  std::istringstream in{std::string(text)};
  CheckedStream sink;
  auto streamed = check_stream(in, "fuzz.pdj", sink);
  if (joined(streamed) != (r.ok() ? std::string() : joined(r.errors()))) std::abort();
  if (!r.ok()) return 0;
  if (sink.hasher.finish() != structural_hash(*r)) std::abort();
  (void)check_program(*r);
  const std::string printed = print_program(*r);
  std::ostringstream streamed_text;
  StreamPrinter printer(streamed_text);
  if (!parse_stream(text, "fuzz.pdj", printer).empty() || streamed_text.str() != printed)
    std::abort();
  auto again = load_program(printed, "printed.pdj");
  if (!again.ok() || !structurally_equal(*r, *again)) std::abort();  // round trip
  return 0;
}
