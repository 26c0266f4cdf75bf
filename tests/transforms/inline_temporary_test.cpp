// inline_temporary: replaces reads of a temporary by the expression stored in it. Its golden cases,
// one refusal per legality reason (refused by check and by apply alike), and what it does when
// legal.
#include <string>
#include <vector>

#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

TEST_CASE("inline_temporary replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("inline_temporary");
}

TEST_CASE("inline_temporary refuses a buffer that does not exist") {
  require_refused(kPipeline, "inline_temporary w", Reason::kNoSuchLocation, "w");
}

TEST_CASE("inline_temporary refuses inputs and outputs") {
  require_refused(kPipeline, "inline_temporary x", Reason::kNotATemporary, "x");
  require_refused(kPipeline, "inline_temporary y", Reason::kNotATemporary, "y");
}

TEST_CASE("inline_temporary refuses a buffer with an initial value") {
  require_refused(kFusedSoftmax, "inline_temporary a", Reason::kHasInitialValue, "a");
}

TEST_CASE("inline_temporary refuses an unused buffer") {
  require_refused(kUnusedTemp, "inline_temporary t", Reason::kNothingToDo, "t");
}

TEST_CASE("inline_temporary refuses reads that are not later siblings of the one store") {
  // The reader is in another scope.
  require_refused(kPipeline, "inline_temporary t", Reason::kIrregularAccess, "t");
  // The reader is nested deeper.
  require_refused(kFusedSoftmax, "inline_temporary i", Reason::kIrregularAccess, "i");
  // Two stores.
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[N]

N t[{0}] = x[{0}]
| t[{0}] = t[{0}] * 2
| y[{0}] = t[{0}]
)",
                  "inline_temporary t", Reason::kIrregularAccess, "t");
  // A read of another element.
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[9]

N t[{0}] = x[{0}]
| y[{0}] = t[0]
)",
                  "inline_temporary t", Reason::kIrregularAccess, "t");
  // A literal takes the type of where it is used: f32(1/3) inlined into f64 is not 1/3 in f32.
  require_refused(R"(N = 8
input x: f64[N]
output y: f64[N]
temp t: f32[1]

N t[0] = 1 / 3
| y[{0}] = x[{0}] + f64(t[0])
)",
                  "inline_temporary t", Reason::kIrregularAccess, "t");
  // A reduction, not a store.
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[N]

N t[{0}] = 1
| t[{0}] *= x[{0}]
| y[{0}] = t[{0}]
)",
                  "inline_temporary t", Reason::kIrregularAccess, "t");
}

TEST_CASE("inline_temporary refuses when the stored expression's inputs change before a read") {
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
output z: f32[N]
temp t: f32[N]

N y[{0}] = x[{0}]
| t[{0}] = y[{0}] * 2
| y[{0}] = 0
| z[{0}] = t[{0}]
)",
                  "inline_temporary t", Reason::kDependence, "y");
}

TEST_CASE("inline_temporary lets the last reader overwrite what the expression reads") {
  const ir::Program p = load(R"(N = 8
input x: f32[N]
output y: f32[N] = 1
temp t: f32[N]

N t[{0}] = y[{0}] * x[{0}]
| y[{0}] += t[{0}] * t[{0}]
)");
  const ir::Program q = apply_all(p, {"inline_temporary t"});
  CHECK(q.find_buffer("t") == nullptr);
  CHECK(q.body[0]->body.size() == 1);
  require_same_outputs(p, q);
}
