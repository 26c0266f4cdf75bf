// libFuzzer target: trace text (what `perfdojo apply --trace` and the env's restore read) parsed
// and replayed on a small kernel, every step's legality checked. Nothing may crash, and a
// trace that replays must give a program the checker accepts.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ir/check.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "transforms/action.h"
#include "transforms/registry.h"

namespace {
const char* kKernel =
    "B = 4\nN = 32\ninput s: f32[B, N]\noutput d: f32[B, N]\ntemp m: f32[B] = -inf\n"
    "temp e: f32[B, N]\ntemp a: f32[B] = 0\n\n"
    "B N m[{0}] = max(s[{0},{1}])\n| N e[{0},{1}] = exp(s[{0},{1}] - m[{0}])\n"
    "| | a[{0}] += e[{0},{1}]\n| N d[{0},{1}] = e[{0},{1}] / a[{0}]\n";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace perfdojo;
  static const ir::Program kProgram = *ir::load_program(kKernel, "softmax.pdj");
  static const transforms::Target kTarget = *transforms::target_by_name("x86_avx512");
  auto trace = transforms::parse_trace(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!trace.ok() || trace->size() > 64) return 0;
  auto out = transforms::replay(kProgram, *trace, kTarget);
  if (out.ok() && !ir::check_program(*out).empty()) std::abort();  // a legal move broke the IR
  return 0;
}
