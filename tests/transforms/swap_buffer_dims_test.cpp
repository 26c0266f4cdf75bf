// swap_buffer_dims: swaps two dimensions of a buffer's layout. Its golden cases, one refusal per
// legality reason (refused by check and by apply alike), and what it does when legal.
#include <string>
#include <vector>

#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

TEST_CASE("swap_buffer_dims replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("swap_buffer_dims");
}

TEST_CASE("swap_buffer_dims refuses a buffer that does not exist") {
  require_refused(kMatmul, "swap_buffer_dims Z 0", Reason::kNoSuchLocation, "Z");
}

TEST_CASE("swap_buffer_dims refuses an output without an initial value") {
  // The write-back would copy every element of the staged copy, and nothing may have written
  // some of them: y's last column is never stored.
  require_refused(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[M, N]

M 7 y[{0},{1}] = x[{0},{1}]
)",
                  "swap_buffer_dims y 0", Reason::kDependence, "y");
}

TEST_CASE("swap_buffer_dims stages an output: the caller's layout, written back at the end") {
  const ir::Program q = apply_all(load(kMatmul), {"swap_buffer_dims C 0"});
  const ir::BufferDecl* c = q.find_buffer("C");
  const ir::BufferDecl* copy = q.find_buffer("C_p0");
  REQUIRE(c != nullptr);
  REQUIRE(copy != nullptr);
  CHECK(c->role == ir::Role::kOutput);
  CHECK(c->shape == std::vector<int64_t>{4, 8});  // the caller's layout is untouched
  CHECK(copy->role == ir::Role::kTemp);
  CHECK(copy->shape == std::vector<int64_t>{8, 4});
  CHECK(copy->init == c->init);  // the copy starts where the output would have
  // The last nest writes C from the copy; nothing else names C.
  REQUIRE(!q.body.empty());
  CHECK(transforms::uses_buffer(q.body.back(), "C"));
  for (size_t n = 0; n + 1 < q.body.size(); ++n) CHECK(!transforms::uses_buffer(q.body[n], "C"));
  require_same_outputs(load(kMatmul), q);
}

TEST_CASE("swap_buffer_dims refuses a dimension without a next one") {
  require_refused(kMatmul, "swap_buffer_dims B 1", Reason::kBadParameter, "B");
  require_refused(kPipeline, "swap_buffer_dims t 0", Reason::kBadParameter, "t");
}

TEST_CASE("swap_buffer_dims refuses an unused buffer") {
  require_refused(R"(M = 4
N = 8
input x: f32[M, N]
input z: f32[M, N]
output y: f32[M, N]

M N y[{0},{1}] = x[{0},{1}]
)",
                  "swap_buffer_dims z 0", Reason::kNothingToDo, "z");
}

TEST_CASE("swap_buffer_dims refuses to break a vectorised scope's unit stride") {
  const ir::Program p = apply_all(load(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[M, N]
temp t: f32[M, N]

M N t[{0},{1}] = x[{0},{1}] * 2
M N y[{0},{1}] = t[{0},{1}]
)"),
                                  {"vectorize 0.0 8"});
  require_refused(p, "swap_buffer_dims t 0", Reason::kAnnotated, "t");
  require_refused(p, "swap_buffer_dims x 0", Reason::kAnnotated, "x");
}
