// When a buffer's initial value can never be observed (ir/liveness.h): the fill the generated code
// leaves out. Each case is a program the checker accepts; the question is only what it implies.
#include "ir/liveness.h"

#include <string>

#include "doctest/doctest.h"
#include "ir/parse.h"

namespace {

using namespace perfdojo::ir;

// Whether the initial value of `buffer` in `text` is dead.
bool dead(const std::string& text, const std::string& buffer = "y") {
  auto p = load_program(text, "k.pdj");
  REQUIRE_MESSAGE(p.ok(), p.error_text());
  const BufferDecl* b = p->find_buffer(buffer);
  REQUIRE(b != nullptr);
  return initial_value_dead(*p, *b);
}

const std::string kHead = "input x: f32[8, 16]\noutput y: f32[8, 16] = 0\n\n";

}  // namespace

TEST_CASE("an initial value every element of which is overwritten before any read is dead") {
  CHECK(dead(kHead + "8 16 y[{0},{1}] = x[{0},{1}]\n"));
  // Tiled: 4*{1}+{2} over 4 x 4 is a mixed radix spanning 16.
  CHECK(dead(kHead + "8 4 4 y[{0},{1}*4+{2}] = x[{0},{1}*4+{2}]\n"));
  // Scopes the index does not use only repeat the stores.
  CHECK(dead(kHead + "3 8 16 y[{1},{2}] = x[{1},{2}]\n"));
  // A temporary too, and later stores may write it again.
  CHECK(dead("input x: f32[8]\noutput y: f32[8]\ntemp t: f32[8] = 1\n\n8 t[{0}] = x[{0}]\n"
             "8 t[{0}] = 2\n8 y[{0}] = x[{0}]\n",
             "t"));
}

TEST_CASE("an initial value some statement may observe stays") {
  // Read: a load, or a reduction into the buffer.
  CHECK_FALSE(dead(kHead + "8 16 y[{0},{1}] = x[{0},{1}]\n8 16 y[{0},{1}] = y[{0},{1}] * 2\n"));
  CHECK_FALSE(dead(kHead + "8 16 y[{0},{1}] += x[{0},{1}]\n"));
  // Part of the buffer written: the rest keeps the initial value.
  CHECK_FALSE(dead(kHead + "8 8 y[{0},{1}] = x[{0},{1}]\n"));
  CHECK_FALSE(dead(kHead + "8 8 y[{0},{1}+8] = x[{0},{1}]\n8 8 y[{0},{1}] = x[{0},{1}]\n"));
  // Every other column twice: 2*{1} over 16 misses the odd ones (and {1} is in bounds only
  // up to 7).
  CHECK_FALSE(dead(kHead + "8 8 y[{0},{1}*2] = x[{0},{1}]\n"));
  // Two iterators in one dimension that overlap (a sliding window) do not cover it once.
  CHECK_FALSE(dead(kHead + "8 8 9 y[{0},{1}+{2}] = x[{0},{1}+{2}]\n"));
  // Inputs have no fill, and a buffer without an initial value has nothing to leave out.
  CHECK_FALSE(dead(kHead + "8 16 y[{0},{1}] = x[{0},{1}]\n", "x"));
  CHECK_FALSE(dead("input x: f32[8]\noutput y: f32[8]\n\n8 y[{0}] = x[{0}]\n"));
}
