// widen_buffer: its refusals (one per reason), the widened programs bit for bit, the sketch that
// widens a bf16 GEMM's packed panels, and its golden cases (tests/data/golden/widen_buffer).
#include "transforms/widen_buffer.h"

#include "ir/print.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace widen_buffer_cases {

const std::string kWidenHead =
    "M = 4\n"
    "N = 8\n"
    "input A: bf16[M, N]\n"
    "input H: f16[M, N]\n"
    "input F: f32[M, N]\n"
    "temp T: bf16[M, N]\n"
    "temp W: f32[M, N]\n"
    "output Y: f32[M, N] = 0\n"
    "\n";
const std::string kWidenRead = "M N Y[{0},{1}] += T[{0},{1}] * 2\n";

}  // namespace widen_buffer_cases

using widen_buffer_cases::kWidenHead;
using widen_buffer_cases::kWidenRead;

TEST_CASE("widen_buffer refuses what would change a stored value, and what is not a temporary") {
  const std::string copy = "M N T[{0},{1}] = A[{0},{1}]\n";
  require_refused(kWidenHead + copy + kWidenRead, "widen_buffer Z", Reason::kNoSuchLocation);
  require_refused(kWidenHead + copy + kWidenRead, "widen_buffer A", Reason::kNotATemporary);
  require_refused(kWidenHead + "M N W[{0},{1}] = F[{0},{1}]\nM N Y[{0},{1}] += W[{0},{1}]\n",
                  "widen_buffer W", Reason::kNothingToDo);
  require_refused(
      "M = 4\nN = 8\ninput A: bf16[M, N]\ntemp T: bf16[M, N] = 1\noutput Y: f32[M, N] = 0\n\n" +
          std::string("M N T[{0},{1}] = A[{0},{1}]\n") + kWidenRead,
      "widen_buffer T", Reason::kHasInitialValue);
  // Stores that round: an f32 or f16 value, a sum, a reduction; and a temporary nothing writes.
  require_refused(kWidenHead + "M N T[{0},{1}] = F[{0},{1}]\n" + kWidenRead, "widen_buffer T",
                  Reason::kIrregularAccess, "T");
  require_refused(kWidenHead + "M N T[{0},{1}] = H[{0},{1}]\n" + kWidenRead, "widen_buffer T",
                  Reason::kIrregularAccess, "T");
  require_refused(kWidenHead + "M N T[{0},{1}] = A[{0},{1}] + A[{0},{1}]\n" + kWidenRead,
                  "widen_buffer T", Reason::kIrregularAccess, "T");
  require_refused(kWidenHead + copy + "M N T[{0},{1}] += A[{0},{1}]\n" + kWidenRead,
                  "widen_buffer T", Reason::kIrregularAccess, "T");
  require_refused(kWidenHead + "M N Y[{0},{1}] += A[{0},{1}]\n", "widen_buffer T",
                  Reason::kIrregularAccess, "T");
}

TEST_CASE("widen_buffer gives a copied temporary its compute type and every output bit for bit") {
  const ir::Program before = load(kWidenHead + "M N T[{0},{1}] = A[{0},{1}]\n" + kWidenRead);
  const ir::Program after = apply_all(before, {"widen_buffer T"});
  CHECK(ir::print_program(after).find("temp T: f32[M, N]") != std::string::npos);
  require_same_outputs(before, after);
  // Written twice, each a copy of a bf16 element: still exact.
  const ir::Program twice = load(
      kWidenHead + "M N T[{0},{1}] = A[{0},{1}]\nM 4 T[{0},{1}+4] = A[{0},{1}]\n" + kWidenRead);
  require_same_outputs(twice, apply_all(twice, {"widen_buffer T"}));
}

TEST_CASE("the sketch packs a bf16 GEMM's panels as f32, so its tile is the f32 one") {
  const ir::Program p = load(
      "M = 64\nN = 64\nK = 64\ninput A: bf16[M, K]\ninput B: bf16[K, N]\n"
      "output C: f32[M, N] = 0\n\nM N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n");
  const auto target = *transforms::target_by_name("x86_avx512");
  const auto e = transforms::sketch_program(p, target, 0);
  int widened = 0;
  for (const auto& a : e.trace) widened += a.kind == transforms::Kind::kWidenBuffer;
  CHECK(widened == 2);
  for (const auto& b : e.program.buffers)
    if (b.role == ir::Role::kTemp) CHECK_MESSAGE(b.dtype == ir::DType::kF32, b.name);
  require_same_outputs(p, e.program);
}

TEST_CASE("widen_buffer replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("widen_buffer");
}
