// hoist: moves a statement whose value does not change out of its scope. Its golden cases, one
// refusal per legality reason (refused by check and by apply alike), and what it does when legal.
#include <string>
#include <vector>

#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

TEST_CASE("hoist replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  check_golden_folder("hoist");
}

namespace {

constexpr const char* kRowScale = R"(M = 4
N = 8
input x: f32[M, N]
input a: f32[M] in [1, 2]
output y: f32[M, N]
output f: f32[M]
temp r: f32[M]

M N r[{0}] = 1 / a[{0}]
| | y[{0},{1}] = x[{0},{1}] * r[{0}]
| | f[{0}] = x[{0},0] * 2
)";

}  // namespace

TEST_CASE("hoist refuses a path that does not exist") {
  require_refused(kRowScale, "hoist 0.0.7", Reason::kNoSuchLocation);
}

TEST_CASE("hoist refuses scopes, top-level statements and middle children") {
  require_refused(kRowScale, "hoist 0.0", Reason::kBadParameter);
  require_refused(kRowScale, "hoist 0.0.1", Reason::kBadParameter);
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]

N y[{0}] = x[{0}]
y[0] = x[1]
)",
                  "hoist 1", Reason::kBadParameter);
}

TEST_CASE("hoist refuses a statement that uses the scope's iterator or accumulates") {
  require_refused(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[M, N]

M N y[{0},{1}] = x[{0},{1}]
)",
                  "hoist 0.0.0", Reason::kNotInvariant, "y");
  require_refused(R"(M = 4
N = 8
input x: f32[M]
output y: f32[M] = 0

M N y[{0}] += x[{0}]
)",
                  "hoist 0.0.0", Reason::kNotInvariant, "y");
  // An iterator read as a value is a use of the scope: the value changes every iteration.
  require_refused(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[M]

M N y[{0}] = {1} * 2
)",
                  "hoist 0.0.0", Reason::kNotInvariant, "y");
}

TEST_CASE("hoist refuses a statement whose value can change between iterations") {
  // It reads its own target.
  require_refused(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[M, N]
temp t: f32[M] = 1

M N t[{0}] = t[{0}] * 2
| | y[{0},{1}] = x[{0},{1}] * t[{0}]
)",
                  "hoist 0.0.0", Reason::kDependence, "t");
  // Another statement of the scope writes what it reads.
  require_refused(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[M, N]
temp t: f32[M]
temp u: f32[M] = 1

M N t[{0}] = u[{0}] * 2
| | u[{0}] = x[{0},{1}]
| | y[{0},{1}] = t[{0}]
)",
                  "hoist 0.0.0", Reason::kDependence, "u");
  // Another statement of the scope writes its target.
  require_refused(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[M, N]
temp t: f32[M]

M N t[{0}] = x[{0},0]
| | y[{0},{1}] = t[{0}]
| | t[{0}] = x[{0},{1}]
)",
                  "hoist 0.0.0", Reason::kDependence, "t");
  // Last child whose target the rest of the scope reads: later iterations saw its store.
  require_refused(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[M, N]
temp t: f32[M] = 0

M N y[{0},{1}] = x[{0},{1}] + t[{0}]
| | t[{0}] = x[{0},0]
)",
                  "hoist 0.0.1", Reason::kDependence, "t");
}

TEST_CASE("hoist of a scope's only statement replaces the scope") {
  const ir::Program p = load(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[M]

M N y[{0}] = x[{0},0] * 3
)");
  const ir::Program q = apply_all(p, {"hoist 0.0.0"});
  CHECK(ir::print_program(q).find("M y[{0}] = x[{0},0] * 3") != std::string::npos);
  require_same_outputs(p, q);
}
