// The reference interpreter on small programs whose results are known exactly.
#include "ir/interp.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "ir/ir.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "support/test_files.h"

namespace {

using namespace perfdojo::ir;

using perfdojo::testing::must_load;

Tensor tensor(DType t, std::vector<int64_t> shape, std::vector<double> data) {
  return Tensor{t, std::move(shape), std::move(data)};
}

/// Runs `text` on the given inputs and returns every buffer afterwards.
TensorMap run(const std::string& text, const TensorMap& inputs = {}) {
  Program p = must_load(text);
  auto r = interpret(p, inputs);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return *r;
}

/// The single value of a one-element buffer.
double scalar(const TensorMap& m, const std::string& name) {
  const Tensor& t = m.at(name);
  REQUIRE(t.data.size() == 1);
  return t.data[0];
}

const TensorMap kFour = {
    {"x", Tensor{DType::kF32, {4}, {3, -5, 0.5, 2}}},
};
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("+= sums from its identity 0") {
  auto m = run("input x: f32[4]\noutput y: f32[1] = 0\n\n4 y[0] += x[{0}]\n", kFour);
  CHECK(scalar(m, "y") == 0.5);
}

TEST_CASE("*= multiplies from its identity 1") {
  auto m = run("input x: f32[4]\noutput y: f32[1] = 1\n\n4 y[0] *= x[{0}]\n", kFour);
  CHECK(scalar(m, "y") == -15);
}

TEST_CASE("max reduces from its identity -inf") {
  auto m = run("input x: f32[4]\noutput y: f32[1] = -inf\n\n4 y[0] = max(x[{0}])\n", kFour);
  CHECK(scalar(m, "y") == 3);
  // All-negative data: the identity must not win.
  auto n = run("input x: f32[4]\noutput y: f32[1] = -inf\n\n4 y[0] = max(x[{0}] - 10)\n", kFour);
  CHECK(scalar(n, "y") == -7);
}

TEST_CASE("min reduces from its identity inf") {
  auto m = run("input x: f32[4]\noutput y: f32[1] = inf\n\n4 y[0] = min(x[{0}])\n", kFour);
  CHECK(scalar(m, "y") == -5);
  auto n = run("input x: f32[4]\noutput y: f32[1] = inf\n\n4 y[0] = min(x[{0}] + 10)\n", kFour);
  CHECK(scalar(n, "y") == 5);
  auto w = run("output y: i32[1]\n\n1 y[0] = 3000000000\n");
  CHECK(scalar(w, "y") == -1294967296);  // out-of-range literals wrap like i32(...)
}

TEST_CASE("a reduction continues from whatever its target holds, not from its identity") {
  auto m = run("input x: f32[4]\noutput y: f32[1] = 100\n\n4 y[0] += x[{0}]\n", kFour);
  CHECK(scalar(m, "y") == 100.5);
  auto n = run("input x: f32[4]\noutput y: f32[1] = 10\n\n4 y[0] = max(x[{0}])\n", kFour);
  CHECK(scalar(n, "y") == 10);
}

TEST_CASE("a reduction over an inner scope gives one result per outer iteration") {
  TensorMap in = {{"x", tensor(DType::kF32, {2, 3}, {1, 2, 3, 10, 20, 30})}};
  auto m = run("input x: f32[2, 3]\noutput y: f32[2] = 0\n\n2 3 y[{0}] += x[{0},{1}]\n", in);
  CHECK(m.at("y").data == std::vector<double>{6, 60});
}

TEST_CASE("i32 max and min reductions start from the inf identities the docs recommend") {
  // -inf / inf saturate to the extreme i32 values.
  auto m = run("output y: i32[1] = -inf\n\n1 y[0] = max(-5)\n");
  CHECK(scalar(m, "y") == -5);
  auto n = run("output y: i32[1] = inf\n\n1 y[0] = min(5)\n");
  CHECK(scalar(n, "y") == 5);
}

TEST_CASE("an f32 accumulator rounds every step: 1e8 + 1 stays 1e8") {
  auto f = run("output y: f32[1] = 100000000\n\n4 y[0] += 1\n");
  CHECK(scalar(f, "y") == 100000000);
  auto d = run("output y: f64[1] = 100000000\n\n4 y[0] += 1\n");
  CHECK(scalar(d, "y") == 100000004);
}

TEST_CASE("an f32 statement rounds every intermediate, not only the stored result") {
  // 2^24 + 1 is not an f32: it rounds back to 2^24 before the subtraction.
  auto f = run("output y: f32[1]\n\n1 y[0] = 16777216 + 1 - 16777216\n");
  CHECK(scalar(f, "y") == 0);
  auto d = run("output y: f64[1]\n\n1 y[0] = 16777216 + 1 - 16777216\n");
  CHECK(scalar(d, "y") == 1);
}

TEST_CASE("f32 buffers hold exact f32 values even when given doubles") {
  TensorMap in = {{"x", tensor(DType::kF32, {1}, {0.1})}};
  auto m = run("input x: f32[1]\noutput y: f32[1]\n\n1 y[0] = x[0]\n", in);
  CHECK(scalar(m, "y") == static_cast<double>(0.1f));
  CHECK(scalar(m, "x") == static_cast<double>(0.1f));
}

TEST_CASE("i32 division truncates toward zero") {
  auto m =
      run("output y: i32[4]\n\n"
          "1 y[0] = 7 / 2\n"
          "| y[1] = -7 / 2\n"
          "| y[2] = 7 / -2\n"
          "| y[3] = -7 / -2\n");
  CHECK(m.at("y").data == std::vector<double>{3, -3, -3, 3});
}

TEST_CASE("i32 division by zero gives 0 instead of trapping") {
  TensorMap in = {{"k", tensor(DType::kI32, {3}, {5, -5, 0})}};
  auto m = run("input k: i32[3]\noutput y: i32[3]\n\n3 y[{0}] = k[{0}] / 0\n", in);
  CHECK(m.at("y").data == std::vector<double>{0, 0, 0});
}

TEST_CASE("i32 arithmetic wraps around like two's complement") {
  auto m =
      run("output y: i32[2]\n\n"
          "1 y[0] = 2147483647 + 1\n"
          "| y[1] = -2147483648 - 1\n");
  CHECK(m.at("y").data == std::vector<double>{-2147483648.0, 2147483647.0});
}

TEST_CASE("casting to i32 truncates toward zero") {
  TensorMap in = {{"x", tensor(DType::kF32, {4}, {2.7, -2.7, 0.5, -0.5})}};
  auto m = run("input x: f32[4]\noutput y: i32[4]\n\n4 y[{0}] = i32(x[{0}])\n", in);
  CHECK(m.at("y").data == std::vector<double>{2, -2, 0, 0});
}

TEST_CASE("an i32 value converted to f32 rounds to the nearest f32") {
  TensorMap in = {{"k", tensor(DType::kI32, {1}, {16777217})}};
  auto m = run("input k: i32[1]\noutput y: f32[1]\n\n1 y[0] = f32(k[0])\n", in);
  CHECK(scalar(m, "y") == 16777216);
}

TEST_CASE("the checker refuses a temporary read before any statement writes it") {
  auto p = load_program(
      "input x: f32[4]\ntemp t: f32[4]\noutput y: f32[4]\n\n"
      "4 y[{0}] = t[{0}] + x[{0}]\n",
      "k.pdj");
  REQUIRE_FALSE(p.ok());
  CHECK(p.error_text().find("k.pdj:5:12: error: temporary 't' is read here before any statement "
                            "writes it") != std::string::npos);
  // A reduction reads its target too.
  CHECK_FALSE(load_program("input x: f32[4]\ntemp t: f32[1]\noutput y: f32[1]\n\n"
                           "4 t[0] += x[{0}]\n1 y[0] = t[0]\n")
                  .ok());
}

TEST_CASE("elements of an f32 temporary no statement wrote read as NaN") {
  // The checker follows buffers, not elements: t[2] and t[3] are never written.
  auto m =
      run("input x: f32[4]\ntemp t: f32[4]\noutput y: f32[4]\n\n"
          "2 t[{0}] = x[{0}]\n"
          "4 y[{0}] = t[{0}] + x[{0}]\n",
          kFour);
  CHECK_FALSE(std::isnan(m.at("y").data[0]));
  CHECK(std::isnan(m.at("y").data[2]));
  CHECK(std::isnan(m.at("t").data[3]));
}

TEST_CASE("a temporary written before it is read holds no NaN") {
  auto m =
      run("input x: f32[4]\ntemp t: f32[4]\noutput y: f32[4]\n\n"
          "4 t[{0}] = x[{0}] * 2\n"
          "| y[{0}] = t[{0}] + 1\n",
          kFour);
  CHECK(m.at("y").data == std::vector<double>{7, -9, 2, 5});
}

TEST_CASE("an uninitialised i32 temporary reads as 0, since i32 has no NaN") {
  auto m = run("temp t: i32[2]\noutput y: i32[2]\n\n2 y[{0}] = t[{0}] + 1\n");
  CHECK(m.at("y").data == std::vector<double>{1, 1});
}

TEST_CASE("a select picks its branch per element") {
  auto m = run("input x: f32[4]\noutput y: f32[4]\n\n4 y[{0}] = x[{0}] > 0 ? x[{0}] : 0\n", kFour);
  CHECK(m.at("y").data == std::vector<double>{3, 0, 0.5, 2});
  auto n = run(
      "input x: f32[4]\noutput y: f32[4]\n\n4 y[{0}] = x[{0}] == 2 ? 1 : x[{0}] <= 0.5 ? -1 : 7\n",
      kFour);
  CHECK(n.at("y").data == std::vector<double>{7, -1, -1, 1});
}

TEST_CASE("a select compares in its operands' type while computing in the target's") {
  TensorMap in = {{"k", tensor(DType::kI32, {3}, {-1, 0, 1})},
                  {"x", tensor(DType::kF32, {3}, {1, 2, 3})}};
  auto m =
      run("input k: i32[3]\ninput x: f32[3]\noutput y: f32[3]\n\n"
          "3 y[{0}] = k[{0}] >= 0 ? x[{0}] / 2 : -1\n",
          in);
  CHECK(m.at("y").data == std::vector<double>{-1, 1, 1.5});
}

TEST_CASE("functions compute what their names say") {
  TensorMap in = {{"x", tensor(DType::kF64, {1}, {4})}};
  auto m =
      run("input x: f64[1]\noutput y: f64[8]\n\n"
          "1 y[0] = sqrt(x[0])\n"
          "| y[1] = rsqrt(x[0])\n"
          "| y[2] = exp(x[0] - 4)\n"
          "| y[3] = log(x[0] / 4)\n"
          "| y[4] = abs(-x[0])\n"
          "| y[5] = tanh(x[0] - 4)\n"
          "| y[6] = max(x[0], 5) + min(x[0], 5)\n"
          "| y[7] = -x[0]\n",
          in);
  CHECK(m.at("y").data == std::vector<double>{2, 0.5, 1, 0, 4, 0, 9, -4});
}

TEST_CASE("statements run in textual order inside each iteration") {
  // The running prefix sum needs the write of one iteration to be seen by the next.
  auto m =
      run("input x: f32[4]\noutput y: f32[4]\ntemp s: f32[1] = 0\n\n"
          "4 s[0] += x[{0}]\n"
          "| y[{0}] = s[0]\n",
          kFour);
  CHECK(m.at("y").data == std::vector<double>{3, -2, -1.5, 0.5});
}

TEST_CASE("interpret returns every buffer and leaves the inputs as given") {
  auto m = run(
      "input x: f32[4]\ntemp t: f32[4]\noutput y: f32[4]\n\n4 t[{0}] = x[{0}]\n| y[{0}] = t[{0}]\n",
      kFour);
  CHECK(m.size() == 3);
  CHECK(m.at("x").data == kFour.at("x").data);
  CHECK(m.at("t").data == kFour.at("x").data);
}

TEST_CASE("interpret refuses missing or misshapen input data with a diagnostic") {
  Program p = must_load("input x: f32[4]\noutput y: f32[4]\n\n4 y[{0}] = x[{0}]\n");
  auto missing = interpret(p, {});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.errors()[0].message == "no data given for input 'x'");
  auto wrong = interpret(p, {{"x", tensor(DType::kF32, {2, 2}, {1, 2, 3, 4})}});
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.errors()[0].message == "data for input 'x' has the wrong shape");
}

TEST_CASE("make_inputs depends only on seed, name and shape, not on the rest of the program") {
  Program a = must_load("input q: f32[8, 16]\noutput y: f32[1] = 0\n\n8 16 y[0] += q[{0},{1}]\n");
  Program b = must_load(
      "N = 8\ninput z: f32[3]\ninput q: f32[N, 16]\noutput o: f32[N] = -inf\n\n"
      "N 16 o[{0}] = max(q[{0},{1}] * 2)\n");
  const TensorMap ia = make_inputs(a, 7), ib = make_inputs(b, 7);
  CHECK(ia.size() == 1);
  CHECK(ib.size() == 2);
  CHECK(ia.at("q").data == ib.at("q").data);
  CHECK(ia.at("q").shape == std::vector<int64_t>{8, 16});
  // Calling again gives the same data.
  CHECK(make_inputs(a, 7).at("q").data == ia.at("q").data);
}

TEST_CASE("make_inputs gives different data for a different seed, name or shape") {
  BufferDecl d;
  d.name = "q";
  d.role = Role::kInput;
  d.shape = {64};
  d.shape_names = {""};
  const Tensor base = make_input(d, 7);
  CHECK(make_input(d, 7).data == base.data);
  CHECK(make_input(d, 8).data != base.data);
  BufferDecl renamed = d;
  renamed.name = "r";
  CHECK(make_input(renamed, 7).data != base.data);
  BufferDecl reshaped = d;
  reshaped.shape = {8, 8};
  reshaped.shape_names = {"", ""};
  CHECK(make_input(reshaped, 7).data != base.data);
}

TEST_CASE("generated f32 inputs lie in [-1, 1) by default and in the declared range otherwise") {
  Program p = must_load(
      "input a: f32[4096]\ninput b: f32[4096] in [2, 2.5]\ninput c: f64[4096] in [-1e-3, 1e-3]\n"
      "output y: f32[1] = 0\n\n4096 y[0] += a[{0}] + b[{0}] + f32(c[{0}])\n");
  const TensorMap m = make_inputs(p, 1);
  auto within = [](const Tensor& t, double lo, double hi) {
    double mn = kInf, mx = -kInf;
    for (double v : t.data) mn = std::min(mn, v), mx = std::max(mx, v);
    CHECK(mn >= lo);
    CHECK(mx < hi);
    // 4096 uniform draws come close to both ends.
    CHECK(mn < lo + (hi - lo) * 0.01);
    CHECK(mx > hi - (hi - lo) * 0.01);
  };
  within(m.at("a"), -1, 1);
  within(m.at("b"), 2, 2.5);
  within(m.at("c"), -1e-3, 1e-3);
  for (double v : m.at("a").data) CHECK(v == static_cast<double>(static_cast<float>(v)));
}

TEST_CASE("generated i32 inputs are integers in [-8, 8) by default") {
  Program p = must_load("input k: i32[1024]\noutput y: i32[1] = 0\n\n1024 y[0] += k[{0}]\n");
  const Tensor t = make_inputs(p, 3).at("k");
  double mn = kInf, mx = -kInf;
  for (double v : t.data) {
    CHECK(v == std::floor(v));
    mn = std::min(mn, v), mx = std::max(mx, v);
  }
  CHECK(mn == -8);
  CHECK(mx == 7);
}

TEST_CASE("max_relative_error is relative above 1, absolute below, and infinite on NaN mismatch") {
  Tensor a = tensor(DType::kF32, {3}, {100, 0.5, 0});
  CHECK(max_relative_error(a, a) == 0);
  CHECK(max_relative_error(a, tensor(DType::kF32, {3}, {101, 0.5, 0})) ==
        doctest::Approx(1.0 / 101));
  CHECK(max_relative_error(a, tensor(DType::kF32, {3}, {100, 0.25, 0})) == 0.25);
  CHECK(max_relative_error(a, tensor(DType::kF32, {3}, {100, 0.5, NAN})) == kInf);
  CHECK(max_relative_error(a, tensor(DType::kF32, {1, 3}, {100, 0.5, 0})) == kInf);
  Tensor n = tensor(DType::kF32, {1}, {NAN});
  CHECK(max_relative_error(n, n) == 0);
}

TEST_CASE("strict: a read of an element nothing wrote is refused with its place, init or not") {
  // t is written on half its elements, then all of it is read: the checker sees a write before
  // the read (program order), only the elements tell.
  const std::string text =
      "input x: f32[4]\noutput y: f32[4]\ntemp t: f32[4]\n\n"
      "2 t[{0}] = x[{0}] * 2\n4 y[{0}] = t[{0}] + 1\n";
  Program p = must_load(text);
  InterpretOptions strict;
  strict.forbid_uninitialised_reads = true;
  auto r = interpret(p, kFour, strict);
  REQUIRE_FALSE(r.ok());
  CHECK_MESSAGE(r.error_text().find(":6:") != std::string::npos, r.error_text());
  CHECK_MESSAGE(r.error_text().find("reads temp 't' element [2] before anything wrote it") !=
                    std::string::npos,
                r.error_text());
  // Without the option the run goes on (the element holds NaN, as the backends start them).
  CHECK(interpret(p, kFour).ok());
  // With an initial value every element is written from the start.
  Program q = must_load(
      "input x: f32[4]\noutput y: f32[4]\ntemp t: f32[4] = 0\n\n"
      "2 t[{0}] = x[{0}] * 2\n4 y[{0}] = t[{0}] + 1\n");
  CHECK(interpret(q, kFour, strict).ok());
  // A reduction reads its target: into an output without an initial value, refused.
  Program red = must_load("input x: f32[4]\noutput s: f32[1]\n\n4 s[0] += x[{0}]\n");
  auto rr = interpret(red, kFour, strict);
  if (rr.ok()) {
    // (the checker may already refuse this statically; then interpret reports that instead)
    FAIL("an accumulation into an unwritten output ran");
  }
}

TEST_CASE(
    "fma rounds once: (1 + 2^-23)^2 - (1 + 2^-22) keeps the 2^-46 a product then a sum loses") {
  const double e = std::ldexp(1.0, -23);
  const TensorMap in = {{"a", tensor(DType::kF32, {1}, {1 + e})},
                        {"c", tensor(DType::kF32, {1}, {-(1 + 2 * e)})}};
  auto fused = run(
      "input a: f32[1]\ninput c: f32[1]\noutput y: f32[1]\n\ny[0] = fma(a[0], a[0], c[0])\n", in);
  auto split =
      run("input a: f32[1]\ninput c: f32[1]\noutput y: f32[1]\n\ny[0] = a[0] * a[0] + c[0]\n", in);
  CHECK(scalar(fused, "y") == std::ldexp(1.0, -46));
  CHECK(scalar(split, "y") == 0);
}

TEST_CASE("a fused update adds the product to the old value with one rounding") {
  const double e = std::ldexp(1.0, -23);
  const TensorMap in = {{"a", tensor(DType::kF32, {1}, {1 + e})}};
  auto m =
      run("input a: f32[1]\noutput y: f32[1] = 0\n\n"
          "y[0] = 0 - 1 - 2 * 0.00000011920928955078125\n"
          "y[0] = fma(a[0], a[0], y[0])\n",
          in);
  CHECK(scalar(m, "y") == std::ldexp(1.0, -46));
}

TEST_CASE("i32 fma wraps as its product and sum do") {
  const TensorMap in = {{"a", tensor(DType::kI32, {1}, {65536})}};
  auto m = run("input a: i32[1]\noutput y: i32[1]\n\ny[0] = fma(a[0], a[0], 5)\n", in);
  CHECK(scalar(m, "y") == 5);  // 2^32 wraps to 0
}

TEST_CASE(
    "error bounds: each operation adds one unit roundoff of its result; a sum bounds every order") {
  TensorMap bounds;
  InterpretOptions o;
  o.error_bounds = &bounds;
  const double u = std::ldexp(1.0, -24);  // f32
  Program scale = must_load("input x: f32[4]\noutput y: f32[4]\n\n4 y[{0}] = x[{0}] * 1\n");
  REQUIRE(interpret(scale, kFour, o).ok());
  for (size_t i = 0; i < 4; ++i)
    CHECK(bounds.at("y").data[i] == doctest::Approx(u * std::abs(kFour.at("x").data[i])));
  // 4 terms in f32: each add contributes u |partial sum|, within 3 u (sum of |x|).
  Program sum = must_load("input x: f32[4]\noutput y: f32[1] = 0\n\n4 y[0] += x[{0}]\n");
  auto r = interpret(sum, kFour, o);
  REQUIRE(r.ok());
  const double b = bounds.at("y").data[0];
  CHECK(b > 0);
  CHECK(b <= 4 * u * (3 + 5 + 0.5 + 2));
}

TEST_CASE("the race detector names a :par scope whose iterations depend on each other") {
  // A prefix sum parallelised past parallelize's check: iteration i reads what i - 1 wrote.
  Program carried =
      must_load("input x: f32[8]\noutput y: f32[9] = 0\n\n8:par y[{0}+1] = y[{0}] + x[{0}]\n");
  InterpretOptions o;
  o.detect_races = true;
  auto r = interpret(carried, {{"x", tensor(DType::kF32, {8}, {1, 2, 3, 4, 5, 6, 7, 8})}}, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error_text().find("data race in the :par scope at line 4") != std::string::npos);
  CHECK(r.error_text().find("iteration 1 reads output 'y' element [1], which iteration 0 wrote") !=
        std::string::npos);
  // A sum into one element from every iteration: a write-write race.
  Program sum = must_load("input x: f32[4]\noutput s: f32[1] = 0\n\n4:par s[0] += x[{0}]\n");
  auto rs = interpret(sum, kFour, o);
  REQUIRE_FALSE(rs.ok());
  CHECK(rs.error_text().find("data race") != std::string::npos);
  // Without the detector both run (sequentially), as before.
  CHECK(interpret(carried, {{"x", tensor(DType::kF32, {8}, {1, 2, 3, 4, 5, 6, 7, 8})}}).ok());
}

TEST_CASE("a race-free :par scope computes the same bits in forward, reverse and shuffled order") {
  Program rows = must_load(
      "input x: f32[6, 5]\noutput y: f32[6] = 0\ntemp t: f32[6, 5]\n\n"
      "6:par 5 t[{0},{1}] = x[{0},{1}] * 3\n| | y[{0}] += t[{0},{1}]\n");
  const TensorMap in = make_inputs(rows, 5);
  InterpretOptions o;
  o.detect_races = true;
  auto fwd = interpret(rows, in, o);
  REQUIRE(fwd.ok());
  for (auto order : {InterpretOptions::ParOrder::kReverse, InterpretOptions::ParOrder::kShuffle}) {
    o.par_order = order;
    o.shuffle_seed = 42;
    auto other = interpret(rows, in, o);
    REQUIRE(other.ok());
    CHECK(other->at("y").data == fwd->at("y").data);
  }
  // A carried dependence does change with the order: what the reordering run exists to catch.
  Program carried =
      must_load("input x: f32[8]\noutput y: f32[9] = 0\n\n8:par y[{0}+1] = y[{0}] + x[{0}]\n");
  InterpretOptions rev;
  rev.par_order = InterpretOptions::ParOrder::kReverse;
  const TensorMap xs = {{"x", tensor(DType::kF32, {8}, {1, 2, 3, 4, 5, 6, 7, 8})}};
  CHECK(interpret(carried, xs, rev)->at("y").data != interpret(carried, xs)->at("y").data);
}

TEST_CASE(
    "lane-parallel :vec runs give the sequential bits where lanes are independent, and differ "
    "across a collision") {
  InterpretOptions simd;
  simd.simd_vectors = true;
  // Independent lanes, a lane-private reduction and one every lane shares: the same bits.
  Program ok = must_load(
      "input x: f32[4, 8]\noutput y: f32[4, 8]\noutput s: f32[4] = 0\n\n"
      "4 8:vec y[{0},{1}] = x[{0},{1}] * 2\n| | s[{0}] += y[{0},{1}]\n");
  const TensorMap in = make_inputs(ok, 9);
  auto seq = interpret(ok, in);
  auto lanes = interpret(ok, in, simd);
  REQUIRE((seq.ok() && lanes.ok()));
  CHECK(lanes->at("y").data == seq->at("y").data);
  CHECK(lanes->at("s").data == seq->at("s").data);
  // Lane l reads what lane l - 1 writes in the same statement: vector code reads the old values.
  Program collide = must_load("output y: f32[9] = 0\n\n8:vec y[{0}+1] = y[{0}] + 1\n");
  auto a = interpret(collide, {});
  auto b = interpret(collide, {}, simd);
  REQUIRE((a.ok() && b.ok()));
  CHECK(a->at("y").data[8] == 8);
  CHECK(b->at("y").data[8] == 1);
}
