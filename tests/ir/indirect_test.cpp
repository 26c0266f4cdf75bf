// Indirect indices (docs/ir.md, "Indirect indices"): an index term read from an i32 input whose
// declaration bounds its values. Text form, canonical printing, hashing, the checker's rules,
// what the interpreter runs, and the clear error for index data outside the declared range.
#include <algorithm>
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

// Bags of L = 2 rows of a V = 4 x D = 3 table.
const char* const kBagHeader =
    "B = 2\n"
    "L = 2\n"
    "D = 3\n"
    "V = 4\n"
    "input W: f32[V, D]\n"
    "input idx: i32[B, L] in [0, V)\n"
    "output out: f32[B, D] = 0\n"
    "\n";

const char* const kBagBody = "B L D out[{0},{2}] += W[idx[{0},{1}],{2}]\n";

// The table's row r is r*10 + (0, 1, 2).
TensorMap bag_inputs(std::vector<double> idx) {
  TensorMap in;
  in["W"] = Tensor{DType::kF32, {4, 3}, {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}};
  in["idx"] = Tensor{DType::kI32, {2, 2}, std::move(idx)};
  return in;
}

std::string first_error(const std::string& text) {
  auto r = load_program(text, "k.pdj");
  REQUIRE_FALSE(r.ok());
  return r.error_text();
}

}  // namespace

TEST_CASE("an indirect index parses, prints canonically and hashes its index buffer") {
  const Program p = perfdojo::testing::must_load(std::string(kBagHeader) + kBagBody);
  const std::string text = print_program(p);
  CHECK(text.find("input idx: i32[B, L] in [0, V]\n") != std::string::npos);
  CHECK(text.find("B L D out[{0},{2}] += W[idx[{0},{1}],{2}]") != std::string::npos);
  // The printed text parses back to the same program.
  const Program q = perfdojo::testing::must_load(text);
  CHECK(structurally_equal(p, q));
  CHECK(structural_hash(p) == structural_hash(q));
  // An affine rest after the indirect term; the term may come second; a sign is its own.
  const Program r = perfdojo::testing::must_load(
      std::string(kBagHeader) + "B L 2 out[{0},{2}] += W[{1}*0+idx[{0},{1}],{2}+1]\n");
  CHECK(print_program(r).find("W[idx[{0},{1}],{2}+1]") != std::string::npos);
  const Program s = perfdojo::testing::must_load(
      "V = 8\ninput W: f32[V]\ninput idx: i32[4] in [0, 6)\n"
      "output y: f32[4]\n\n4 y[{0}] = W[idx[{0}]+2]\n");
  CHECK(print_program(s).find("W[idx[{0}]+2]") != std::string::npos);
  // Another index buffer (or another element of it) is another program.
  const Program t = perfdojo::testing::must_load(std::string(kBagHeader) +
                                                 "B L D out[{0},{2}] += W[idx[{0},0],{2}]\n");
  CHECK_FALSE(structurally_equal(p, t));
  CHECK(structural_hash(p) != structural_hash(t));
  CHECK(any_indirect(p.body));
  CHECK_FALSE(any_indirect(perfdojo::testing::must_load(
                               "N = 4\ninput x: f32[N]\noutput y: f32[N]\n\nN y[{0}] = x[{0}]\n")
                               .body));
}

TEST_CASE("malformed indirect indices are refused at their line and column") {
  const std::string h = kBagHeader;
  CHECK(first_error(h + "B L D out[{0},{2}] += W[-idx[{0},{1}],{2}]\n")
            .find("k.pdj:9:25: error: an indirect index term is added as it is") !=
        std::string::npos);
  CHECK(
      first_error(h + "B L D out[{0},{2}] += W[2*idx[{0},{1}],{2}]\n").find("no sign or factor") !=
      std::string::npos);
  CHECK(
      first_error(h + "B L D out[{0},{2}] += W[{1}-idx[{0},{1}],{2}]\n").find("never subtracted") !=
      std::string::npos);
  CHECK(first_error(h + "B L D out[{0},{2}] += W[idx[{0},{1}]+idx[{0},0],{2}]\n")
            .find("at most one indirect term") != std::string::npos);
  CHECK(first_error(h + "B L D out[{0},{2}] += W[idx[idx[{0},{1}],0],{2}]\n")
            .find("may stand only in a buffer access's index or a scope's bound") !=
        std::string::npos);
  CHECK(first_error(h + "B L D out[{0},{2}] += W[(idx[{0},{1}]),{2}]\n")
            .find("may stand only in a buffer access's index or a scope's bound") !=
        std::string::npos);
}

TEST_CASE("the checker proves an indirect access in bounds from the declared range") {
  const std::string body = kBagBody;
  // The range must be declared, integral, on an i32 input.
  CHECK(first_error(std::string("B = 2\nL = 2\nD = 3\nV = 4\ninput W: f32[V, D]\n"
                                "input idx: i32[B, L]\noutput out: f32[B, D] = 0\n\n") +
                    body)
            .find("must declare the integer range of its values") != std::string::npos);
  CHECK(first_error(std::string("B = 2\nL = 2\nD = 3\nV = 4\ninput W: f32[V, D]\n"
                                "input idx: f32[B, L] in [0, V)\noutput out: f32[B, D] = 0\n\n") +
                    body)
            .find("must read an i32 input") != std::string::npos);
  // A range past the table: the access could leave it.
  CHECK(first_error(std::string("B = 2\nL = 2\nD = 3\nV = 4\ninput W: f32[V, D]\n"
                                "input idx: i32[B, L] in [0, 5)\noutput out: f32[B, D] = 0\n\n") +
                    body)
            .find("ranges over [0, 4] but the dimension has extent 4") != std::string::npos);
  // The index buffer's own index is checked as any access's.
  CHECK(first_error(std::string(kBagHeader) + "B L D out[{0},{2}] += W[idx[{0},{1}+1],{2}]\n")
            .find("index 1 of 'idx[{0},{1}+1]' ranges over [1, 2]") != std::string::npos);
  // Reads only, and of inputs only: a scatter and a gather from a temporary are refused.
  CHECK(first_error(std::string(kBagHeader) + "B L D out[idx[{0},{1}],{2}] += W[{0},{2}]\n")
            .find("a scatter") != std::string::npos);
  CHECK(first_error(std::string("B = 2\nL = 2\nD = 3\nV = 4\ninput W: f32[V, D]\n"
                                "input idx: i32[B, L] in [0, V)\ntemp t: f32[V, D] = 1\n"
                                "output out: f32[B, D] = 0\n\n") +
                    "B L D out[{0},{2}] += t[idx[{0},{1}],{2}]\n")
            .find("only inputs may be read that way") != std::string::npos);
}

TEST_CASE("the interpreter reads through the index, and refuses data outside its range") {
  const Program p = perfdojo::testing::must_load(std::string(kBagHeader) + kBagBody);
  auto r = interpret(p, bag_inputs({3, 0, 1, 1}));
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  CHECK(r->at("out").data == std::vector<double>{30, 32, 34, 20, 22, 24});
  // Out of range (V = 4) and negative values: a clear error naming the buffer, the element
  // and the value, before anything runs.
  for (double bad : {4.0, -1.0}) {
    auto e = interpret(p, bag_inputs({0, 1, bad, 2}));
    REQUIRE_FALSE(e.ok());
    CHECK(e.error_text().find("index buffer 'idx' holds " + std::to_string(static_cast<int>(bad)) +
                              " at [1,0], outside the range [0, 4) it declares") !=
          std::string::npos);
  }
  CHECK_FALSE(check_index_data(p, bag_inputs({0, 1, 2, 3})).size());
  CHECK(check_index_data(p, bag_inputs({0, 1, 2, 7})).size() == 1);
  // Generated inputs respect the range.
  const Tensor idx = make_input(*p.find_buffer("idx"), 7);
  for (double v : idx.data) CHECK((v >= 0 && v < 4 && v == static_cast<int>(v)));
}

TEST_CASE("a scope's bounds read from a buffer: a CSR matrix's rows") {
  // A = [[1 0 2], [0 0 0], [0 3 0]] in CSR: row pointers 0 2 2 3, columns 0 2 1.
  const std::string csr =
      "M = 3\nN = 3\nNNZ = 3\nM1 = 4\nNNZ1 = 4\n"
      "input rowptr: i32[M1] in [0, NNZ1) sorted\ninput col: i32[NNZ] in [0, N)\n"
      "input val: f32[NNZ]\ninput x: f32[N]\noutput y: f32[M] = 0\n\n"
      "M NNZ(rowptr[{0}]..rowptr[{0}+1]) y[{0}] += val[{1}] * x[col[{1}]]\n";
  const Program p = perfdojo::testing::must_load(csr);
  CHECK(print_program(p).find("input rowptr: i32[M1] in [0, NNZ1] sorted\n") != std::string::npos);
  CHECK(print_program(p).find("M NNZ(rowptr[{0}]..rowptr[{0}+1]) y[{0}]") != std::string::npos);
  CHECK(structural_hash(perfdojo::testing::must_load(print_program(p))) == structural_hash(p));
  CHECK(any_indirect(p.body));
  TensorMap in;
  in["rowptr"] = Tensor{DType::kI32, {4}, {0, 2, 2, 3}};
  in["col"] = Tensor{DType::kI32, {3}, {0, 2, 1}};
  in["val"] = Tensor{DType::kF32, {3}, {1, 2, 3}};
  in["x"] = Tensor{DType::kF32, {3}, {10, 20, 30}};
  auto r = interpret(p, in);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  CHECK(r->at("y").data == std::vector<double>{70, 0, 60});
  // Row pointers out of order where `sorted` is declared, and a column out of range: each a
  // clear error before anything runs.
  in["rowptr"].data = {0, 2, 1, 3};
  auto unsorted = interpret(p, in);
  REQUIRE_FALSE(unsorted.ok());
  CHECK(unsorted.error_text().find("index buffer 'rowptr' is declared sorted but holds 1 at [2] "
                                   "is below 2 at [1]") != std::string::npos);
  in["rowptr"].data = {0, 2, 2, 3};
  in["col"].data = {0, 3, 1};
  auto wide = interpret(p, in);
  REQUIRE_FALSE(wide.ok());
  CHECK(wide.error_text().find("index buffer 'col' holds 3 at [1], outside the range [0, 3)") !=
        std::string::npos);
  // Generated row pointers are sorted.
  const Tensor rp = make_input(*p.find_buffer("rowptr"), 3);
  CHECK(std::is_sorted(rp.data.begin(), rp.data.end()));
  // `sorted` is for i32 inputs; a bound's term reads an i32 input with a range.
  CHECK(first_error("input x: f32[4] sorted\noutput y: f32[4]\n\n4 y[{0}] = x[{0}]\n")
            .find("only i32 inputs can be declared 'sorted'") != std::string::npos);
  CHECK(first_error("input p: i32[4]\ninput x: f32[4]\noutput y: f32[4] = 0\n\n"
                    "4 4(p[{0}]..) y[{0}] += x[{1}]\n")
            .find("must declare the integer range of its values") != std::string::npos);
}

TEST_CASE("an index range past any index is refused, not converted") {
  CHECK(first_error("input W: f32[4]\ninput idx: i32[2] in [0, 1e30)\noutput y: f32[2]\n\n"
                    "2 y[{0}] = W[idx[{0}]]\n")
            .find("reaches past 2^40 in magnitude") != std::string::npos);
}
