#include <doctest/doctest.h>

#include "ir/parse.h"
#include "ir/print.h"

using namespace perfdojo::ir;

TEST_CASE("the brief's matmul line parses") {
  auto r = load_program("M = 4\nN = 3\nK = 2\ninput A: f32[M, K]\ninput B: f32[K, N]\noutput C: f32[M, N] = 0\n\nM N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n");
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  CHECK(print_program(*r).find("M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]") != std::string::npos);
}
