// contract: each rule's exact text, the statements it leaves alone, and that the contracted
// program computes what the original does to within the roundings it drops.
#include "transforms/contract.h"

#include <string>

#include "ir/print.h"
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace {

constexpr const char* kHeader = R"(N = 8
input a: f32[N]
input b: f32[N]
input c: f32[N]
input d: f64[N]
input k: i32[N]
output y: f32[N]
output z: f64[N]
output w: i32[N]

)";

// The body of `contract` applied to one statement inside `N`, and how many it fused.
std::string contracted(const std::string& stmt, int* count = nullptr) {
  ir::Program p = load(std::string(kHeader) + "N " + stmt + "\n");
  const std::string text = ir::print_program(transforms::contract(p, count));
  const std::string body = text.substr(text.find("\n\n") + 2);
  REQUIRE(body.rfind("N ", 0) == 0);
  return body.substr(2, body.size() - 3);
}

}  // namespace

TEST_CASE("contract fuses each multiply-add form into one fma, the left product first") {
  int n = 0;
  CHECK(contracted("y[{0}] += a[{0}] * b[{0}]", &n) == "y[{0}] = fma(a[{0}], b[{0}], y[{0}])");
  CHECK(n == 1);
  CHECK(contracted("y[{0}] = a[{0}] * b[{0}] + c[{0}]") == "y[{0}] = fma(a[{0}], b[{0}], c[{0}])");
  CHECK(contracted("y[{0}] = c[{0}] + a[{0}] * b[{0}]") == "y[{0}] = fma(a[{0}], b[{0}], c[{0}])");
  CHECK(contracted("y[{0}] = a[{0}] * b[{0}] - c[{0}]") == "y[{0}] = fma(a[{0}], b[{0}], -c[{0}])");
  CHECK(contracted("y[{0}] = c[{0}] - a[{0}] * b[{0}]") == "y[{0}] = fma(-a[{0}], b[{0}], c[{0}])");
  CHECK(contracted("y[{0}] = a[{0}] * b[{0}] + c[{0}] * a[{0}]", &n) ==
        "y[{0}] = fma(a[{0}], b[{0}], c[{0}] * a[{0}])");
  CHECK(n == 1);
  // Nested: the inner sum fuses first, then the outer one around it.
  CHECK(contracted("z[{0}] = d[{0}] * d[{0}] + (d[{0}] * 2 + 1)", &n) ==
        "z[{0}] = fma(d[{0}], d[{0}], fma(d[{0}], 2, 1))");
  CHECK(n == 2);
}

TEST_CASE(
    "contract leaves integer statements, plain stores of products and select conditions alone") {
  int n = -1;
  CHECK(contracted("w[{0}] = k[{0}] * k[{0}] + 1", &n) == "w[{0}] = k[{0}] * k[{0}] + 1");
  CHECK(n == 0);
  CHECK(contracted("y[{0}] = a[{0}] * b[{0}]", &n) == "y[{0}] = a[{0}] * b[{0}]");
  CHECK(n == 0);
  CHECK(contracted("y[{0}] *= a[{0}] + b[{0}]", &n) == "y[{0}] *= a[{0}] + b[{0}]");
  CHECK(n == 0);
  const std::string sel = contracted("y[{0}] = a[{0}] * b[{0}] + c[{0}] < 0 ? a[{0}] : c[{0}]", &n);
  CHECK(sel.find("fma") == std::string::npos);
  CHECK(n == 0);
}

TEST_CASE("contract is idempotent and keeps every suite kernel's outputs within its rounding") {
  for (const char* name :
       {"matmul-256", "softmax", "layernorm", "rope", "conv2d-3x3", "attention"}) {
    CAPTURE(name);
    ir::Program p = load_kernel(name);
    int n = 0;
    ir::Program once = transforms::contract(p, &n);
    CHECK(ir::check_program(once).empty());
    int again = -1;
    ir::Program twice = transforms::contract(once, &again);
    CHECK(again == 0);
    CHECK(ir::print_program(twice) == ir::print_program(once));
  }
  // A dot product at small size: contracted and not, the same to a few roundings.
  ir::Program dot = load(
      "input x: f32[64]\ninput v: f32[64]\noutput s: f32[1] = 0\n\n64 s[0] += x[{0}] * v[{0}]\n");
  int n = 0;
  ir::Program fused = transforms::contract(dot, &n);
  CHECK(n == 1);
  CHECK(output_error(dot, fused, 7) < 1e-5);
}
