// libFuzzer target: machine profiles (key = value lines or a flat JSON object). A profile that
// parses must survive printing and parsing again unchanged.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backends/machine_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace perfdojo::backends;
  std::string err;
  auto p =
      parse_profile(std::string(reinterpret_cast<const char*>(data), size), "fuzz.profile", &err);
  if (!p) {
    if (err.empty()) std::abort();  // a refusal must say why
    return 0;
  }
  auto again = parse_profile(profile_to_text(*p), "printed.profile", &err);
  if (!again || profile_to_text(*again) != profile_to_text(*p)) std::abort();
  return 0;
}
