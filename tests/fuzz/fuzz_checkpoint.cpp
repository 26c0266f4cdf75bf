// libFuzzer target: the agent checkpoint reader (agents/checkpoint.cpp, which needs no LibTorch).
// The first byte chooses: odd, the input is a whole file as given (magic, version, sections and
// checksum checked as they stand); even, the input is a file's body and the target appends the
// correct checksum, so the fuzzer gets past it into the section lengths and the header parser.
// A refusal must be a diagnostic; nothing may crash, hang or read out of bounds.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "agents/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace perfdojo::agents;
  if (size == 0) return 0;
  const bool whole = data[0] & 1;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (!whole) {
    const uint64_t sum = checkpoint_checksum(bytes);
    char tail[8];
    std::memcpy(tail, &sum, 8);
    bytes.append(tail, 8);
  }
  auto c = load_checkpoint_bytes(bytes, "<fuzz>");
  if (!c.ok() && (c.errors().empty() || c.errors()[0].message.empty())) std::abort();
  if (c.ok()) {
    // A checkpoint that loads must say what it needs: compatibility checks never crash either.
    (void)check_compatible(c.value(), c.value().config, c.value().feature_size,
                           c.value().action_count, c.value().token_vocab);
  }
  return 0;
}
