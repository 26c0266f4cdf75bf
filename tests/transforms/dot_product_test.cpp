// dot_product: its refusals (one per reason), the legal forms bit for bit, and its golden cases
// (tests/data/golden/dot_product).
#include "transforms/dot_product.h"

#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace dot_product_cases {

const std::string kDotHead =
    "M = 2\n"
    "N = 16\n"
    "K = 8\n"
    "KB = 2\n"
    "input A: u8[M, K]\n"
    "input B4: i8[KB, N, 4]\n"
    "input B: i8[K, N]\n"
    "input F: f32[M, K]\n"
    "output C: i32[M, N] = 0\n"
    "output D: f32[M, N] = 0\n"
    "\n";
const std::string kDot = "M KB N 4 C[{0},{2}] += A[{0},{1}*4+{3}] * B4[{1},{2},{3}]\n";

}  // namespace dot_product_cases

using dot_product_cases::kDot;
using dot_product_cases::kDotHead;

TEST_CASE("dot_product refuses what is not a vector of 4-term u8 x i8 dot products") {
  require_refused(kDotHead + kDot, "dot_product 0.0.0.0.0 16", Reason::kNotAScope);
  // 12 is not a vector width of the target.
  require_refused(kDotHead + kDot, "dot_product 0.0.0 12", Reason::kUnsupportedByTarget);
  require_refused(kDotHead + "M KB N:unroll 4 C[{0},{2}] += A[{0},{1}*4+{3}] * B4[{1},{2},{3}]\n",
                  "dot_product 0.0.0 16", Reason::kAnnotated);
  require_refused(
      "M = 2\nN = 12\nK = 8\nKB = 2\ninput A: u8[M, K]\ninput B4: i8[KB, N, 4]\n"
      "output C: i32[M, N] = 0\n\n" +
          std::string("M KB N 4 C[{0},{2}] += A[{0},{1}*4+{3}] * B4[{1},{2},{3}]\n"),
      "dot_product 0.0.0 8", Reason::kNotDivisible);
  // Innermost (no scope of 4 inside), a scope of 16 or 8 inside, f32, a plain store.
  require_refused(kDotHead + "M KB 4 N C[{0},{3}] += A[{0},{1}*4+{2}] * B4[{1},{3},{2}]\n",
                  "dot_product 0.0.0.0 16", Reason::kIrregularAccess);
  require_refused(kDotHead + "M K N C[{0},{2}] += A[{0},{1}] * B[{1},{2}]\n", "dot_product 0.0 8",
                  Reason::kIrregularAccess);
  require_refused(kDotHead + "M N 8 C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n", "dot_product 0.0 16",
                  Reason::kIrregularAccess);
  require_refused(kDotHead + "M N 4 D[{0},{1}] += F[{0},{2}] * F[{0},{2}]\n", "dot_product 0.0 16",
                  Reason::kIrregularAccess, "D");
  require_refused(kDotHead + "M KB N 4 C[{0},{2}] = A[{0},{1}*4+{3}] * B4[{1},{2},{3}]\n",
                  "dot_product 0.0.0 16", Reason::kIrregularAccess, "C");
  // Accesses of another shape: the weights not packed (B[k, j]), the target not one per lane.
  require_refused(kDotHead + "M KB N 4 C[{0},{2}] += A[{0},{1}*4+{3}] * B[{1}*4+{3},{2}]\n",
                  "dot_product 0.0.0 16", Reason::kNonContiguous, "B");
  require_refused(kDotHead + "M KB N 4 C[{0},{0}] += A[{0},{1}*4+{3}] * B4[{1},{2},{3}]\n",
                  "dot_product 0.0.0 16", Reason::kNonContiguous, "C");
}

TEST_CASE("dot_product annotates the lanes, tiling by the width, and keeps every output") {
  const ir::Program before = load(kDotHead + kDot);
  const ir::Program whole = apply_all(before, {"dot_product 0.0.0 16"});
  CHECK(ir::print_program(whole).find("N:vec 4 C") != std::string::npos);
  require_same_outputs(before, whole);
  const ir::Program tiled = apply_all(before, {"dot_product 0.0.0 8"});
  CHECK(ir::print_program(tiled).find("2 8:vec 4 C") != std::string::npos);
  require_same_outputs(before, tiled);
  // The operands in the other order (i8 first) are the same dot product.
  const ir::Program swapped =
      load(kDotHead + "M KB N 4 C[{0},{2}] += B4[{1},{2},{3}] * A[{0},{1}*4+{3}]\n");
  require_same_outputs(swapped, apply_all(swapped, {"dot_product 0.0.0 16"}));
}

TEST_CASE("dot_product replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("dot_product");
}
