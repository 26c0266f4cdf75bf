// shrink_buffer: drops a temporary's dimension that one scope's iteration owns. Its golden cases,
// one refusal per legality reason (refused by check and by apply alike), and what it does when
// legal.
#include <string>
#include <vector>

#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

TEST_CASE("shrink_buffer replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("shrink_buffer");
}

TEST_CASE("shrink_buffer refuses a buffer that does not exist") {
  require_refused(kFusedSoftmax, "shrink_buffer q 0", Reason::kNoSuchLocation, "q");
}

TEST_CASE("shrink_buffer refuses inputs and outputs") {
  require_refused(kFusedSoftmax, "shrink_buffer d 0", Reason::kNotATemporary, "d");
  require_refused(kFusedSoftmax, "shrink_buffer s 0", Reason::kNotATemporary, "s");
}

TEST_CASE("shrink_buffer refuses a dimension the buffer does not have") {
  require_refused(kFusedSoftmax, "shrink_buffer e 2", Reason::kBadParameter, "e");
  require_refused(kFusedSoftmax, "shrink_buffer a 1", Reason::kBadParameter, "a");
}

TEST_CASE("shrink_buffer refuses an unused buffer") {
  require_refused(kUnusedTemp, "shrink_buffer t 0", Reason::kNothingToDo, "t");
}

TEST_CASE("shrink_buffer refuses a dimension that is not one scope's own iterator") {
  // e's columns are written in one N scope and read in another: no single scope owns them.
  require_refused(kFusedSoftmax, "shrink_buffer e 1", Reason::kIrregularAccess, "e");
  // An index that is not exactly {k}.
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[9]

N t[{0}+1] = x[{0}]
| y[{0}] = t[{0}+1]
)",
                  "shrink_buffer t 0", Reason::kIrregularAccess, "t");
  // The iterator also in another dimension.
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[N, N]

N t[{0},{0}] = x[{0}]
| y[{0}] = t[{0},{0}]
)",
                  "shrink_buffer t 0", Reason::kIrregularAccess, "t");
}

TEST_CASE("shrink_buffer refuses a slice shared by concurrent iterations") {
  const ir::Program p = apply_all(load(kFusedSoftmax), {"parallelize 0"});
  require_refused(p, "shrink_buffer i 0", Reason::kAnnotated, "i");
}

TEST_CASE("shrink_buffer refuses when a value flows from one run of the scope to the next") {
  // t[j] accumulates over the rows: each run of the N scope reads the previous run's sums.
  require_refused(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[M, N]
temp t: f32[N] = 0

M N t[{1}] += x[{0},{1}]
| | y[{0},{1}] = t[{1}]
)",
                  "shrink_buffer t 0", Reason::kDependence, "t");
}

TEST_CASE("shrink_buffer turns the row buffers of fused softmax into scalars") {
  const ir::Program p = load(kFusedSoftmax);
  const ir::Program q = apply_all(
      p, {"shrink_buffer m 0", "shrink_buffer a 0", "shrink_buffer i 0", "shrink_buffer e 0"});
  CHECK(q.find_buffer("m")->shape == std::vector<int64_t>{1});
  CHECK_FALSE(q.find_buffer("m")->init.has_value());
  CHECK(q.find_buffer("e")->shape == std::vector<int64_t>{8});
  CHECK(temp_elements(q) == 11);
  require_same_outputs(p, q);
}
