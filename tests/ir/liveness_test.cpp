// When a buffer's initial value can never be observed (ir/liveness.h): the fill the generated code
// leaves out. Each case is a program the checker accepts; the question is only what it implies.
#include "ir/liveness.h"

#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "ir/load.h"
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
  CHECK(
      dead("input x: f32[8]\noutput y: f32[8]\ntemp t: f32[8] = 1\n\n8 t[{0}] = x[{0}]\n"
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

namespace {

// The temporaries private to each iteration of the outermost scope of `text`'s first nest.
std::vector<std::string> private_to_first(const std::string& text) {
  auto p = load_program(text, "k.pdj");
  REQUIRE_MESSAGE(p.ok(), p.error_text());
  return iteration_private_buffers(*p, {0});
}

const std::string kTemps = "input x: f32[8, 16]\noutput y: f32[8, 16]\ntemp t: f32[16]\n\n";

}  // namespace

TEST_CASE("a temporary wholly written before it is read in each iteration is private to it") {
  using V = std::vector<std::string>;
  // A row copied into t, then read back: each iteration's own row.
  CHECK(private_to_first(kTemps + "8 16 t[{1}] = x[{0},{1}]\n| 16 y[{0},{1}] = t[{1}] * 2\n") ==
        V{"t"});
  // The cover may be inside a scope around the read (a packed block per k block), and tiled.
  CHECK(private_to_first(
            kTemps +
            "8 2 4 4 t[{2}*4+{3}] = x[{0},{2}*4+{3}]\n| | 16 y[{0},{2}] += t[{2}] * {1}\n") ==
        V{"t"});
  // A one-element temporary: written at once.
  CHECK(private_to_first("input x: f32[8, 16]\noutput y: f32[8]\ntemp s: f32[1]\n\n"
                         "8 s[0] = 0\n| 16 s[0] += x[{0},{1}]\n| y[{0}] = s[0]\n") == V{"s"});
}

TEST_CASE("a temporary whose value may cross iterations is not private") {
  // Read before it is written in the iteration: the previous iteration's row.
  const std::string zeroed = "input x: f32[8, 16]\noutput y: f32[8, 16]\ntemp t: f32[16] = 0\n\n";
  CHECK(private_to_first(zeroed + "8 16 y[{0},{1}] = t[{1}]\n| 16 t[{1}] = x[{0},{1}]\n").empty());
  // Read inside the nest that is still writing it: element 15 - j before the copy reaches it.
  CHECK(
      private_to_first(kTemps + "8 16 t[{1}] = x[{0},{1}]\n| | y[{0},{1}] = t[15-{1}]\n").empty());
  // Only half written: the other half comes from an earlier iteration (or its initial value).
  CHECK(private_to_first(zeroed + "8 8 t[{1}] = x[{0},{1}]\n| 16 y[{0},{1}] = t[{1}]\n").empty());
  // Written through the scope's own iterator: each iteration writes its own element, the
  // reads see the others'.
  CHECK(private_to_first("input x: f32[8]\noutput y: f32[8, 8]\ntemp t: f32[8]\n\n"
                         "8 t[{0}] = x[{0}]\n| 8 y[{0},{1}] = t[{1}]\n")
            .empty());
  // Read after the scope it is still private: the last iteration wrote all of it, and
  // parallelize copies that iteration's out (the check reads the scope's subtree only).
  CHECK(private_to_first(kTemps + "8 16 t[{1}] = x[{0},{1}]\n16 y[0,{0}] = t[{0}]\n") ==
        std::vector<std::string>{"t"});
  // Part of it written in each iteration, nothing read: not all of it is an iteration's own.
  CHECK(private_to_first("input x: f32[8, 16]\noutput y: f32[8, 16]\ntemp t: f32[16] = 0\n\n"
                         "8 8 t[{1}] = x[{0},{1}]\n16 y[0,{0}] = t[{0}]\n")
            .empty());
  // A reduction into it reads it.
  CHECK(private_to_first(zeroed + "8 16 t[{1}] += x[{0},{1}]\n| 16 y[{0},{1}] = t[{1}]\n").empty());
}

TEST_CASE(
    "an iteration's own slice of a temporary, written before it is read, may be kept once per "
    "thread") {
  auto slices = [](const std::string& text) {
    auto p = load_program(text, "k.pdj");
    REQUIRE_MESSAGE(p.ok(), p.error_text());
    return iteration_slices(*p, {0});
  };
  const std::string head = "input x: f32[8, 16]\noutput y: f32[8, 16]\ntemp t: f32[8, 16]\n\n";
  // What parallelize makes of a private row: t's first index is the scope's iterator.
  CHECK(slices(head + "8:par 16 t[{0},{1}] = x[{0},{1}]\n| 16 y[{0},{1}] = t[{0},15-{1}]\n") ==
        std::vector<std::string>{"t"});
  // A slice read before the iteration writes it keeps what an earlier execution left there.
  CHECK(slices("input x: f32[8, 16]\noutput y: f32[8, 16]\ntemp t: f32[8, 16] = 0\n\n"
               "8:par 16 y[{0},{1}] = t[{0},{1}]\n| 16 t[{0},{1}] = x[{0},{1}]\n")
            .empty());
  // Another iteration's slice, or the iterator elsewhere in the index: not the iteration's own.
  CHECK(
      slices(head + "8:par 16 t[{0},{1}] = x[{0},{1}]\n| 16 y[{0},{1}] = t[7-{0},{1}]\n").empty());
  CHECK(slices("input x: f32[8, 16]\noutput y: f32[8, 16]\ntemp t: f32[8, 24]\n\n"
               "8:par 16 t[{0},{1}+{0}] = x[{0},{1}]\n| 16 y[{0},{1}] = t[{0},{1}+{0}]\n")
            .empty());
}
