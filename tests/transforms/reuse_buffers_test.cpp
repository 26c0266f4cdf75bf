// reuse_buffers: lets one temporary take the storage of another. Its golden cases, one refusal per
// legality reason (refused by check and by apply alike), and what it does when legal.
#include <string>
#include <vector>

#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

TEST_CASE("reuse_buffers replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("reuse_buffers");
}

TEST_CASE("reuse_buffers refuses a buffer that does not exist") {
  require_refused(kPipeline, "reuse_buffers t w", Reason::kNoSuchLocation, "w");
}

TEST_CASE("reuse_buffers refuses a buffer paired with itself") {
  require_refused(kPipeline, "reuse_buffers t t", Reason::kNothingToDo);
}

TEST_CASE("reuse_buffers refuses inputs and outputs") {
  require_refused(kPipeline, "reuse_buffers x v", Reason::kNotATemporary, "x");
  require_refused(kPipeline, "reuse_buffers t y", Reason::kNotATemporary, "y");
}

TEST_CASE("reuse_buffers refuses buffers of different shapes or types") {
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[N]
temp u: f32[4]

N t[{0}] = x[{0}] * 2
4 u[{0}] = t[{0}] + 1
N y[{0}] = x[{0}]
| y[{0}] += u[0]
)",
                  "reuse_buffers t u", Reason::kShapeMismatch);
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[N]
temp u: f64[N]

N t[{0}] = x[{0}] * 2
N u[{0}] = f64(t[{0}])
N y[{0}] = f32(u[{0}])
)",
                  "reuse_buffers t u", Reason::kShapeMismatch);
}

TEST_CASE("reuse_buffers refuses buffers that are live at the same time") {
  require_refused(kPipeline, "reuse_buffers t u", Reason::kLifetimesOverlap);
}

TEST_CASE("reuse_buffers refuses to lose an initial value") {
  // The removed buffer's initial value.
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[N]
temp v: f32[N] = 0

N t[{0}] = x[{0}] * 2
N y[{0}] = t[{0}]
N v[{0}] += x[{0}]
N y[{0}] += v[{0}]
)",
                  "reuse_buffers t v", Reason::kHasInitialValue, "v");
  // The kept buffer's, when it is used second: it would start from the other's leftovers.
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
temp s: f32[N] = 0
temp t: f32[N]

N t[{0}] = x[{0}] * 2
N y[{0}] = t[{0}]
N s[{0}] += x[{0}]
N y[{0}] += s[{0}]
)",
                  "reuse_buffers s t", Reason::kHasInitialValue, "s");
}

TEST_CASE("reuse_buffers lets the later buffer take the storage of an earlier one it follows") {
  // u is used second, t first and with an initial value that stays with t.
  const ir::Program p = load(R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[N] = 1
temp u: f32[N]

N t[{0}] += x[{0}]
N y[{0}] = t[{0}]
N u[{0}] = x[{0}] * 3
N y[{0}] += u[{0}]
)");
  const ir::Program q = apply_all(p, {"reuse_buffers t u"});
  CHECK(q.find_buffer("u") == nullptr);
  CHECK(temp_elements(q) == 8);
  require_same_outputs(p, q);
}
