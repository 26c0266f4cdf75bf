// create_temporary: caches a region of a buffer in a new temporary. Its golden cases, one refusal
// per legality reason (refused by check and by apply alike), and what it does when legal.
#include <string>
#include <vector>

#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

TEST_CASE("create_temporary replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("create_temporary");
}

namespace {

constexpr const char* kMatmul4x8x4 = R"(M = 4
N = 8
K = 4
input A: f32[M, K]
input B: f32[K, N]
output C: f32[M, N] = 0

M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]
)";

}  // namespace

TEST_CASE("create_temporary refuses a path or buffer that does not exist") {
  require_refused(kMatmul4x8x4, "create_temporary 0.5 C", Reason::kNoSuchLocation);
  require_refused(kMatmul4x8x4, "create_temporary 0.0 Z", Reason::kNoSuchLocation, "Z");
}

TEST_CASE("create_temporary refuses a statement as its location") {
  require_refused(kMatmul4x8x4, "create_temporary 0.0.0.0 C", Reason::kNotAScope);
}

TEST_CASE("create_temporary refuses a buffer the scope does not use") {
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
output z: f32[N]

N y[{0}] = x[{0}]
N z[{0}] = x[{0}] * 2
)",
                  "create_temporary 0 z", Reason::kNothingToDo, "z");
}

TEST_CASE("create_temporary refuses accesses with different indices") {
  // y[{0}] and y[{0}+1]: two elements per iteration whose overlap across iterations the copy
  // nests could not keep apart.
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[9] = 0

N y[{0}] += x[{0}]
| y[{0}+1] += x[{0}]
)",
                  "create_temporary 0 y", Reason::kIrregularAccess, "y");
}

TEST_CASE("create_temporary refuses a written buffer whose region does not map one to one") {
  // The diagonal: {1} in both dimensions.
  require_refused(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[N, N] = 0

M N y[{1},{1}] += x[{0},{1}]
)",
                  "create_temporary 0 y", Reason::kIrregularAccess, "y");
  // A written window: {1}+{2} in one dimension sends distinct iterations to one element, whose
  // copies in the temporary could not be written back.
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[7] = 0

N 4 4 y[{1}+{2}] += x[{0}]
)",
                  "create_temporary 0 y", Reason::kIrregularAccess, "y");
  // 2*{1}+{2} with {2} < 4: the terms overlap (not a mixed radix).
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[10] = 0

N 4 4 y[{1}*2+{2}] += x[{0}]
)",
                  "create_temporary 0 y", Reason::kIrregularAccess, "y");
}

TEST_CASE("create_temporary packs a tiled index in loop order, a BLIS panel") {
  // B[{k},{jo}*4+{ji}] under scopes jo, k, ji: the temporary is [jo][k][ji], each 4-column
  // panel contiguous over k.
  const ir::Program p = load(R"(M = 4
N = 8
K = 4
input A: f32[M, K]
input B: f32[K, N]
output C: f32[M, N] = 0

M 2 4 4 C[{0},{1}*4+{3}] += A[{0},{2}] * B[{2},{1}*4+{3}]
)");
  const ir::Program q = apply_all(p, {"create_temporary 0 B"});
  REQUIRE(q.find_buffer("B_t0") != nullptr);
  CHECK(q.find_buffer("B_t0")->shape == std::vector<int64_t>{2, 4, 4});
  require_same_outputs(p, q);
  // The written C with the same tiled index maps one to one: cached and written back.
  const ir::Program r = apply_all(p, {"create_temporary 0 C"});
  CHECK(r.find_buffer("C_t0")->shape == std::vector<int64_t>{2, 4});
  CHECK(r.body[0]->body.size() == 3);  // copy-in, body, copy-out
  require_same_outputs(p, r);
}

TEST_CASE("create_temporary copies a read-only window with its duplicates") {
  // x[{1}+{2}]: 16 reads of 7 elements; the copy holds all 16, each read finds its value.
  const ir::Program p = load(R"(N = 8
input x: f32[7]
output y: f32[N] = 0

N 4 4 y[{0}] += x[{1}+{2}] * x[{1}+{2}]
)");
  const ir::Program q = apply_all(p, {"create_temporary 0 x"});
  CHECK(q.find_buffer("x_t0")->shape == std::vector<int64_t>{4, 4});
  require_same_outputs(p, q);
}

TEST_CASE("create_temporary gives each index of a read-only buffer its own temporary") {
  // C = A A^T under the row scope: A[{0},{2}] is row i (K elements), A[{1},{2}] every row j.
  const ir::Program p = load(R"(M = 4
K = 8
input A: f32[M, K]
output C: f32[M, M] = 0

M M K C[{0},{1}] += A[{0},{2}] * A[{1},{2}]
)");
  const ir::Program q = apply_all(p, {"create_temporary 0 A"});
  REQUIRE(q.find_buffer("A_t0") != nullptr);
  REQUIRE(q.find_buffer("A_t1") != nullptr);
  CHECK(q.find_buffer("A_t0")->shape == std::vector<int64_t>{8});
  CHECK(q.find_buffer("A_t1")->shape == std::vector<int64_t>{4, 8});
  CHECK(q.body[0]->body.size() == 3);  // two copy-ins, the old body; nothing written back
  require_same_outputs(p, q);
  // A stencil's shifted reads of a temporary that holds every element it reads: one copy each.
  const ir::Program s = load(R"(N = 8
input x: f32[9]
temp t: f32[9]
output y: f32[N] = 0

9 t[{0}] = x[{0}] * 2
2 4 y[{0}*4+{1}] += t[{0}*4+{1}] + t[{0}*4+{1}+1]
)");
  const ir::Program r = apply_all(s, {"create_temporary 1 t"});
  CHECK(r.find_buffer("t_t0")->shape == std::vector<int64_t>{4});
  CHECK(r.find_buffer("t_t1")->shape == std::vector<int64_t>{4});
  require_same_outputs(s, r);
}

TEST_CASE("create_temporary refuses several indices of a buffer the scope writes") {
  // x[{0}] read and x[{0}+1] written: separate copies would lose the order in which one element
  // is stored through one index and loaded through the other.
  require_refused(R"(N = 8
input a: f32[9]
temp x: f32[9]
output y: f32[N]

9 x[{0}] = a[{0}]
N x[{0}+1] = x[{0}] * 2
N y[{0}] = x[{0}]
)",
                  "create_temporary 1 x", Reason::kIrregularAccess, "x");
}

TEST_CASE("create_temporary refuses scopes whose iterations may run concurrently") {
  const ir::Program par = apply_all(load(kMatmul4x8x4), {"parallelize 0"});
  // The temporary would be one storage shared by all threads of the parallel rows.
  require_refused(par, "create_temporary 0.0 C", Reason::kAnnotated, "C");
  require_refused(par, "create_temporary 0 C", Reason::kAnnotated, "C");
  const ir::Program vec = apply_all(load(kMatmul4x8x4), {"swap_scopes 0.0", "vectorize 0.0.0 8"});
  require_refused(vec, "create_temporary 0.0.0 C", Reason::kAnnotated, "C");
}

TEST_CASE("create_temporary caches an input row without writing it back") {
  const ir::Program p = load(kMatmul4x8x4);
  const ir::Program q = apply_all(p, {"create_temporary 0 A"});
  CHECK(q.find_buffer("A_t0") != nullptr);
  CHECK(q.find_buffer("A_t0")->shape == std::vector<int64_t>{4});
  // Copy-in nest, the old body: two children more would mean a copy-out.
  CHECK(q.body[0]->body.size() == 2);
  require_same_outputs(p, q);
}

TEST_CASE("create_temporary skips the copy-in only when one plain store covers the region") {
  // Write-only and the first nest stores the whole 4-wide region: no copy-in.
  const ir::Program p = load(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[M, N] = 3

M 4 y[{0},{1}] = x[{0},{1}]
| 2 y[{0},{1}] = x[{0},{1}] * 2
)");
  const ir::Program q = apply_all(p, {"create_temporary 0 y"});
  CHECK(q.find_buffer("y_t0")->shape == std::vector<int64_t>{4});
  CHECK(q.body[0]->body.size() == 3);  // two nests, copy-out
  require_same_outputs(p, q);
  // Neither nest stores the whole 4 x 4 region: element (3, 3) keeps its 3 through the copy-in.
  const ir::Program p2 = load(R"(M = 2
input x: f32[M, 4, 4]
output y: f32[M, 4, 4] = 3

M 4 2 y[{0},{1},{2}] = x[{0},{1},{2}]
| 2 4 y[{0},{1},{2}] = x[{0},{1},{2}] * 2
)");
  const ir::Program q2 = apply_all(p2, {"create_temporary 0 y"});
  CHECK(q2.find_buffer("y_t0")->shape == (std::vector<int64_t>{4, 4}));
  CHECK(q2.body[0]->body.size() == 4);  // copy-in, two nests, copy-out
  require_same_outputs(p2, q2);
}

TEST_CASE("create_temporary refuses a copy-in that would load elements nothing has written") {
  // t[6..7] is written before the scope, t[0..5] inside it before the read of all eight: the
  // copy-in would load t[0..5], which hold nothing yet (found by the random-trajectory guard on
  // transpose: generated code must not read memory it never wrote).
  constexpr const char* kPartlyWritten = R"(M = 8
input x: f32[M]
output y: f32[M]
temp t: f32[M]

2 t[{0}+6] = x[{0}+6]
2 6 t[{1}] = x[{1}]
| 8 y[{1}] = t[{1}] * {0}
)";
  require_refused(kPartlyWritten, "create_temporary 1 t", Reason::kDependence, "t");
  // The same with t declared with an initial value: every element holds one, the copy is exact.
  std::string with_init = kPartlyWritten;
  with_init.replace(with_init.find("temp t: f32[M]"), 14, "temp t: f32[M] = 0");
  const ir::Program p = load(with_init);
  require_same_outputs(p, apply_all(p, {"create_temporary 1 t"}));
  // A scope whose first use reads the whole region copies in what the program already read.
  const ir::Program r = load(R"(M = 8
input x: f32[M]
output y: f32[M]
temp t: f32[M]

8 t[{0}] = x[{0}]
2 8 y[{1}] = t[{1}] * 2
| 8 t[{1}] = t[{1}] + 1
)");
  require_same_outputs(r, apply_all(r, {"create_temporary 1 t"}));
  // Neither of two nests stores the whole region of an output without an initial value.
  require_refused(R"(M = 2
input x: f32[M, 4, 4]
output y: f32[M, 4, 4]

M 4 2 y[{0},{1},{2}] = x[{0},{1},{2}]
| 2 4 y[{0},{1},{2}] = x[{0},{1},{2}] * 2
)",
                  "create_temporary 0 y", Reason::kDependence, "y");
}
