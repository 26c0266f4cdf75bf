// Bounded (non-rectangular) scopes: text form, canonical printing, hashing, the checker's
// rules and what the interpreter runs (docs/ir.md, "Bounded scopes"). The malformed forms have
// golden diagnostics in tests/data/errors/bound-*.pdj.
#include <cstdint>
#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "ir/check.h"
#include "ir/interp.h"
#include "ir/ir.h"
#include "ir/load.h"
#include "ir/print.h"
#include "support/test_files.h"

namespace {

using namespace perfdojo::ir;

const char* const kBoundsHeader =
    "N = 6\n"
    "input x: f32[N] in [1, 2]\n"
    "output y: f32[N] = 0\n"
    "\n";

// y after running `body` on x = 1, 2, ..., N.
std::vector<double> run_bounded(const std::string& body) {
  Program p = perfdojo::testing::must_load(std::string(kBoundsHeader) + body);
  TensorMap in;
  in["x"] = Tensor{DType::kF32, {6}, {1, 2, 3, 4, 5, 6}};
  auto r = interpret(p, in);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return r->at("y").data;
}

}  // namespace

TEST_CASE("a triangular scope runs up to its bound: prefix sums") {
  CHECK(run_bounded("N N(..{0}+1) y[{0}] += x[{1}]\n") == std::vector<double>{1, 3, 6, 10, 15, 21});
  // Strictly below the diagonal; row 0's scope is empty and its body never runs.
  CHECK(run_bounded("N N(..{0}) y[{0}] += x[{1}]\n") == std::vector<double>{0, 1, 3, 6, 10, 15});
  // A lower bound alone: suffix sums.
  CHECK(run_bounded("N N({0}..) y[{0}] += x[{1}]\n") == std::vector<double>{21, 20, 18, 15, 11, 6});
}

TEST_CASE("a band's bounds are clamped to the scope's extent") {
  // Window of 3 ending at i: below 0 the band is cut, as a padded kernel would read zeros.
  CHECK(run_bounded("N N({0}-2..{0}+1) y[{0}] += x[{1}]\n") ==
        std::vector<double>{1, 3, 6, 9, 12, 15});
  // Past the extent on the other side: {0}+3 is clamped to 6.
  CHECK(run_bounded("N N({0}+1..{0}+3) y[{0}] += x[{1}]\n") ==
        std::vector<double>{5, 7, 9, 11, 6, 0});
  // Bounds that cross: no iteration at all.
  CHECK(run_bounded("N N({0}+4..{0}+2) y[{0}] += x[{1}]\n") ==
        std::vector<double>{0, 0, 0, 0, 0, 0});
}

TEST_CASE("bounds print canonically, parse back, and hash apart from the rectangular scope") {
  const std::string body = "N N({0}-2..{0}+1) y[{0}] += x[{1}]\n";
  Program p = perfdojo::testing::must_load(std::string(kBoundsHeader) + body);
  const std::string text = print_program(p);
  CHECK(text.find("N N({0}-2..{0}+1) y[{0}] += x[{1}]") != std::string::npos);
  Program q = perfdojo::testing::must_load(text);
  CHECK(structurally_equal(p, q));
  CHECK(print_program(q) == text);
  CHECK(structural_hash(p) == structural_hash(q));
  Program rect =
      perfdojo::testing::must_load(std::string(kBoundsHeader) + "N N y[{0}] += x[{1}]\n");
  CHECK_FALSE(structurally_equal(p, rect));
  CHECK(structural_hash(p) != structural_hash(rect));
  // Either side alone, and an annotation after the bounds.
  for (const char* one : {"N N(..{0}+1):par y[{0}] += x[{1}]\n", "N N({0}..) y[{0}] += x[{1}]\n"}) {
    Program b = perfdojo::testing::must_load(std::string(kBoundsHeader) + one);
    CHECK(print_program(b).find(std::string(one)) != std::string::npos);
  }
  // A size in a bound is its value, as in an index.
  Program named =
      perfdojo::testing::must_load(std::string(kBoundsHeader) + "N N(..N-{0}) y[{0}] += x[{1}]\n");
  CHECK(print_program(named).find("N(..-{0}+6)") != std::string::npos);
}

TEST_CASE("the checker refuses a bound on an iterator that is not around the scope") {
  // Built as a transformation could build it: the parser would already refuse the text.
  Program p = perfdojo::testing::must_load(std::string(kBoundsHeader) + "N N y[{0}] += x[{1}]\n");
  const Node& outer = *p.body[0];
  ScopeBounds bad;
  bad.hi = Affine::iter(1);  // the scope's own iterator
  p.body[0] = Node::scope_like(outer, outer.annot,
                               {Node::scope(6, "N", Annot::kNone, outer.body[0]->body, {}, bad)});
  auto errors = check_program(p);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].message.find("upper bound of the scope at depth 1 uses {1}") !=
        std::string::npos);
}

TEST_CASE("a rectangular kernel's hash and text are what they were before bounds existed") {
  // The hash of a fixed program, recorded before bounded scopes were added to the IR.
  Program p = perfdojo::testing::must_load(std::string(kBoundsHeader) + "N N y[{0}] += x[{1}]\n");
  CHECK_FALSE(any_bounded(p.body));
  CHECK(structural_hash(p) == 6234518428100435434ULL);
  CHECK(print_program(p).find("N N y[{0}] += x[{1}]") != std::string::npos);
  // And three suite kernels' (perfdojo check --json, before the change).
  CHECK(structural_hash(perfdojo::testing::must_load(perfdojo::testing::read_text(
            std::string(PERFDOJO_KERNEL_DIR) + "/trsv-lower.pdj"))) == 9233279298683258423ULL);
  CHECK(structural_hash(perfdojo::testing::must_load(perfdojo::testing::read_text(
            std::string(PERFDOJO_KERNEL_DIR) + "/matmul-1024.pdj"))) == 11614503526014148862ULL);
  CHECK(structural_hash(perfdojo::testing::must_load(perfdojo::testing::read_text(
            std::string(PERFDOJO_KERNEL_DIR) + "/softmax.pdj"))) == 12229857148351735502ULL);
}
