// Narrow storage types (docs/ir.md, "Narrow types"): bf16, f16, i8 and u8 widen exactly when read
// and narrow once when stored, to nearest even or by saturation.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "doctest/doctest.h"
#include "ir/check.h"
#include "ir/interp.h"
#include "ir/ir.h"
#include "ir/load.h"
#include "ir/print.h"
#include "support/test_files.h"

namespace narrow_types_test {

using namespace perfdojo::ir;
using perfdojo::testing::must_load;

TensorMap run(const std::string& text, const TensorMap& inputs) {
  auto r = interpret(must_load(text), inputs);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return *r;
}

TEST_CASE("narrow types round to nearest even, overflow to infinity and saturate") {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7, to even: 1.
  CHECK(narrow_to(DType::kBF16, 1 + 0x1p-8) == 1.0);
  CHECK(narrow_to(DType::kBF16, 1 + 0x1p-8 + 0x1p-20) == 1 + 0x1p-7);  // past the tie: up
  CHECK(narrow_to(DType::kBF16, 1 + 3 * 0x1p-8) == 1 + 0x1p-6);        // tie, to even: up
  CHECK(narrow_to(DType::kBF16, 0x1p-133) == 0x1p-133);  // the smallest subnormal, as in f32
  CHECK(narrow_to(DType::kBF16, 0x1p-134) == 0);         // half of it: a tie, to even: 0
  CHECK(std::isinf(narrow_to(DType::kBF16, 3.4e38)));    // rounds past the largest, 0x1.fep127
  CHECK(narrow_to(DType::kBF16, 0x1.fep127) == 0x1.fep127);
  CHECK(std::isnan(narrow_to(DType::kBF16, std::numeric_limits<double>::quiet_NaN())));
  CHECK(std::signbit(narrow_to(DType::kBF16, -0.0)));
  // f16 keeps 11: 65504 is the largest; 65520 is the tie with 65536 and goes to infinity.
  CHECK(narrow_to(DType::kF16, 65504) == 65504);
  CHECK(narrow_to(DType::kF16, 65519) == 65504);
  CHECK(std::isinf(narrow_to(DType::kF16, 65520)));
  CHECK(narrow_to(DType::kF16, 0x1p-24) == 0x1p-24);          // the smallest subnormal
  CHECK(narrow_to(DType::kF16, 0x1p-25) == 0);                // its half: to even, 0
  CHECK(narrow_to(DType::kF16, 0x1.8p-25) == 0x1p-24);        // more than half: up
  CHECK(narrow_to(DType::kF16, 3 * 0x1p-25) == 2 * 0x1p-24);  // 1.5 quanta: to even, 2
  CHECK(narrow_to(DType::kF16, 1 + 0x1p-11) == 1);            // tie at 1: to even
  // i8 and u8 saturate; NaN becomes 0.
  CHECK(narrow_to(DType::kI8, 300) == 127);
  CHECK(narrow_to(DType::kI8, -300) == -128);
  CHECK(narrow_to(DType::kU8, -5) == 0);
  CHECK(narrow_to(DType::kU8, 255) == 255);
  CHECK(narrow_to(DType::kU8, std::numeric_limits<double>::quiet_NaN()) == 0);
}

TEST_CASE("a narrow element's bits decode to its value") {
  for (DType t : {DType::kBF16, DType::kF16, DType::kI8, DType::kU8}) {
    for (double v : {0.0, 1.0, -1.5, 0.333333, 100.25, -7.0, 3e-6, 1e-9, 250.0}) {
      const double n = narrow_to(t, v);
      CHECK_MESSAGE(from_narrow_bits(t, narrow_bits(t, v)) == n, dtype_name(t), " ", v);
    }
  }
  CHECK(narrow_bits(DType::kBF16, 1.0) == 0x3f80u);
  CHECK(narrow_bits(DType::kF16, 1.0) == 0x3c00u);
  CHECK(narrow_bits(DType::kF16, -2.0) == 0xc000u);
  CHECK(narrow_bits(DType::kF16, 0x1p-24) == 0x0001u);
  CHECK(narrow_bits(DType::kF16, 65504) == 0x7bffu);
  CHECK(narrow_bits(DType::kI8, -1) == 0xffu);
  CHECK(dtype_bytes(DType::kBF16) == 2);
  CHECK(dtype_bytes(DType::kU8) == 1);
}

TEST_CASE("narrow declarations parse, print and widen to their compute type") {
  const std::string text =
      "M = 2\nK = 3\ninput A: bf16[M, K]\ninput B: f16[K]\ninput X: u8[K]\ninput W: i8[K]\n"
      "output C: f32[M] = 0\noutput Y: bf16[M]\noutput acc: i32[1] = 0\n\n"
      "M K C[{0}] += A[{0},{1}] * B[{1}]\n"
      "M Y[{0}] = C[{0}]\n"
      "K acc[0] += X[{0}] * W[{0}]\n";
  Program p = must_load(text);
  CHECK(p.find_buffer("A")->dtype == DType::kBF16);
  CHECK(p.find_buffer("X")->dtype == DType::kU8);
  const std::string printed = print_program(p);
  CHECK(printed.find("input A: bf16[M, K]") != std::string::npos);
  CHECK(printed.find("input W: i8[K]") != std::string::npos);
  CHECK(structurally_equal(must_load(printed), p));

  // A bf16 target takes an f32 value; f64 is refused, naming the compute type.
  auto bad =
      load_program("N = 2\ninput x: f64[N]\noutput y: bf16[N]\n\nN y[{0}] = x[{0}]\n", "bad.pdj");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error_text().find("'y' is bf16 (computed in f32) but the value is f64") !=
        std::string::npos);
  // An i8 element is an i32 value: mixing it with f32 is refused as i32 would be.
  auto mixed = load_program(
      "N = 2\ninput x: i8[N]\ninput s: f32[N]\noutput y: f32[N]\n\nN y[{0}] = x[{0}] * s[{0}]\n",
      "mixed.pdj");
  REQUIRE_FALSE(mixed.ok());
  CHECK(mixed.error_text().find("i32 and f32") != std::string::npos);
}

TEST_CASE("the interpreter widens, computes in the compute type and narrows once per store") {
  // A bf16 accumulator rounds every partial sum; an f32 one stored once rounds once.
  const std::string text =
      "N = 4\ninput x: bf16[N]\noutput s16: bf16[1] = 0\noutput s32: f32[1] = 0\n"
      "output once: bf16[1]\n\n"
      "N s16[0] += x[{0}]\nN s32[0] += x[{0}]\nonce[0] = s32[0]\n";
  TensorMap in;
  // 256 + 1 + 1 + 1: in bf16 each 257 rounds back to 256 (8 bits); in f32 the sum is 259.
  in.emplace("x", Tensor{DType::kBF16, {4}, {256, 1, 1, 1}});
  TensorMap out = run(text, in);
  CHECK(out.at("s16").data[0] == 256);
  CHECK(out.at("s32").data[0] == 259);
  CHECK(out.at("once").data[0] == 260);  // 259 to 8 bits: between 258 and 260, nearer 260

  // u8 x i8 in i32, then saturated into i8 and u8.
  const std::string q =
      "N = 3\ninput a: u8[N]\ninput b: i8[N]\noutput d: i32[1] = 0\noutput lo: i8[N]\n"
      "output hi: u8[N]\n\n"
      "N d[0] += a[{0}] * b[{0}]\nN lo[{0}] = a[{0}] * b[{0}]\nN hi[{0}] = a[{0}] * b[{0}]\n";
  TensorMap qi;
  qi.emplace("a", Tensor{DType::kU8, {3}, {255, 2, 200}});
  qi.emplace("b", Tensor{DType::kI8, {3}, {-128, 3, 1}});
  TensorMap qo = run(q, qi);
  CHECK(qo.at("d").data[0] == 255 * -128 + 6 + 200);
  CHECK(qo.at("lo").data == std::vector<double>{-128, 6, 127});
  CHECK(qo.at("hi").data == std::vector<double>{0, 6, 200});

  // Generated inputs are values of their type: bf16 values, integers spanning i8 and u8.
  Program p = must_load(
      "N = 512\ninput a: bf16[N]\ninput b: i8[N]\ninput c: u8[N]\noutput y: f32[N]\n\n"
      "N y[{0}] = a[{0}]\n");
  TensorMap gen = make_inputs(p, 3);
  double lo_b = 0, hi_c = 0;
  for (double v : gen.at("a").data) CHECK(narrow_to(DType::kBF16, v) == v);
  for (double v : gen.at("b").data) {
    CHECK(v == std::trunc(v));
    lo_b = std::min(lo_b, v);
  }
  for (double v : gen.at("c").data) hi_c = std::max(hi_c, v);
  CHECK(lo_b < -100);
  CHECK(hi_c > 200);
  CHECK(hi_c <= 255);
}

}  // namespace narrow_types_test
