// The buffer transformations: create_temporary, reuse_buffers, shrink_buffer, inline_temporary,
// hoist and swap_buffer_dims.
//
// Golden files: tests/data/golden/<transform>/<case>.before.pdj is replayed through <case>.trace
// and must print exactly as <case>.after.pdj, and compute exactly what the before program
// computes (every output bit-identical on several seeds). Set PERFDOJO_UPDATE_GOLDEN=1 to
// rewrite the .after.pdj files from the current implementation (then review the diff).
// Negative tests: one per legality reason each transformation can give, refused by both check
// and apply. Two pipelines show the transformations working together on softmax and matmul.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ir/check.h"
#include "ir/interp.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "support/scaled_kernels.h"
#include "transforms/registry.h"

namespace {

namespace fs = std::filesystem;
using namespace perfdojo;
using transforms::Action;
using transforms::Reason;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ir::Program load(std::string_view text, std::string_view file = "<test>") {
  auto r = ir::load_program(text, file);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return r.value();
}

Action action(std::string_view text) {
  auto r = transforms::parse_action(text);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return r.value();
}

// Applies the actions in order; each must be legal.
ir::Program apply_all(const ir::Program& p, const std::vector<std::string>& actions) {
  ir::Program cur = p;
  for (const auto& text : actions) {
    auto r = transforms::apply(cur, action(text), transforms::Target{});
    REQUIRE_MESSAGE(r.ok(), text << ": " << r.error_text() << "\n" << ir::print_program(cur));
    cur = std::move(r).value();
  }
  return cur;
}

// Every output of `after` equals `before`'s bit for bit, on several input seeds.
void require_same_outputs(const ir::Program& before, const ir::Program& after) {
  auto errors = ir::check_program(after);
  REQUIRE_MESSAGE(errors.empty(), errors[0].str() << "\n" << ir::print_program(after));
  for (uint64_t seed : {1u, 7u, 1234u}) {
    auto inputs = ir::make_inputs(before, seed);
    auto want = ir::interpret(before, inputs);
    auto got = ir::interpret(after, inputs);
    REQUIRE_MESSAGE(want.ok(), want.error_text());
    REQUIRE_MESSAGE(got.ok(), got.error_text());
    for (const auto& b : before.buffers) {
      if (b.role != ir::Role::kOutput) continue;
      INFO("output ", b.name, ", seed ", seed, "\n", ir::print_program(after));
      CHECK(ir::max_relative_error(want->at(b.name), got->at(b.name)) == 0);
    }
  }
}

// Total number of temporary elements: what shrinking and reuse should reduce.
int64_t temp_elements(const ir::Program& p) {
  int64_t n = 0;
  for (const auto& b : p.buffers)
    if (b.role == ir::Role::kTemp) n += b.elements();
  return n;
}

// Replays every golden case of `transform` and compares text and outputs.
void check_golden_cases(const std::string& transform) {
  const fs::path dir = fs::path(PERFDOJO_TEST_DATA_DIR) / "golden" / transform;
  std::vector<fs::path> traces;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".trace") traces.push_back(e.path());
  std::sort(traces.begin(), traces.end());
  REQUIRE_MESSAGE(!traces.empty(), "no golden cases in " << dir.string());
  const bool update = std::getenv("PERFDOJO_UPDATE_GOLDEN") != nullptr;
  for (const auto& trace_path : traces) {
    const std::string stem = (dir / trace_path.stem()).string();
    SUBCASE(trace_path.stem().string().c_str()) {
      const ir::Program before = load(read_text(stem + ".before.pdj"), stem + ".before.pdj");
      auto trace = transforms::parse_trace(read_text(trace_path), trace_path.string());
      REQUIRE_MESSAGE(trace.ok(), trace.error_text());
      auto after = transforms::replay(before, trace.value(), transforms::Target{});
      REQUIRE_MESSAGE(after.ok(), after.error_text());
      const std::string printed = ir::print_program(after.value());
      if (update) {
        std::ofstream(stem + ".after.pdj", std::ios::binary) << printed;
      }
      CHECK(printed == read_text(stem + ".after.pdj"));
      // The golden text is itself a valid program equal to the replayed one.
      CHECK(ir::structurally_equal(load(printed), after.value()));
      require_same_outputs(before, after.value());
    }
  }
}

// The action is refused for `reason` (on `buffer` when given), by check and by apply.
void require_refused(const ir::Program& p, const std::string& text, Reason reason,
                     const std::string& buffer = "") {
  INFO(text, "\n", ir::print_program(p));
  const std::string printed_before = ir::print_program(p);
  const Action a = action(text);
  const auto verdict = transforms::check(p, a, transforms::Target{});
  CHECK_MESSAGE(verdict.reason == reason, "got " << transforms::reason_name(verdict.reason)
                                                 << ", expected "
                                                 << transforms::reason_name(reason));
  if (!buffer.empty()) CHECK(verdict.buffer == buffer);
  CHECK_FALSE(transforms::explain(a, verdict).empty());
  auto applied = transforms::apply(p, a, transforms::Target{});
  CHECK_FALSE(applied.ok());
  CHECK(ir::print_program(p) == printed_before);
}

void require_refused(std::string_view program, const std::string& text, Reason reason,
                     const std::string& buffer = "") {
  require_refused(load(program), text, reason, buffer);
}

constexpr const char* kMatmul = R"(M = 4
N = 8
K = 4
input A: f32[M, K]
input B: f32[K, N]
output C: f32[M, N] = 0

M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]
)";

constexpr const char* kPipeline = R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[N]
temp u: f32[N]
temp v: f32[N]

N t[{0}] = x[{0}] * 2
N u[{0}] = t[{0}] + 1
N v[{0}] = exp(u[{0}])
N y[{0}] = v[{0}] - x[{0}]
)";

}  // namespace

// ---------------------------------------------------------------------------------------------
// Golden files.

TEST_CASE("create_temporary replays its golden cases exactly and keeps every output") {
  check_golden_cases("create_temporary");
}
TEST_CASE("reuse_buffers replays its golden cases exactly and keeps every output") {
  check_golden_cases("reuse_buffers");
}
TEST_CASE("shrink_buffer replays its golden cases exactly and keeps every output") {
  check_golden_cases("shrink_buffer");
}
TEST_CASE("inline_temporary replays its golden cases exactly and keeps every output") {
  check_golden_cases("inline_temporary");
}
TEST_CASE("hoist replays its golden cases exactly and keeps every output") {
  check_golden_cases("hoist");
}
TEST_CASE("swap_buffer_dims replays its golden cases exactly and keeps every output") {
  check_golden_cases("swap_buffer_dims");
}

// ---------------------------------------------------------------------------------------------
// create_temporary: one refusal per reason.

TEST_CASE("create_temporary refuses a path or buffer that does not exist") {
  require_refused(kMatmul, "create_temporary 0.5 C", Reason::kNoSuchLocation);
  require_refused(kMatmul, "create_temporary 0.0 Z", Reason::kNoSuchLocation, "Z");
}

TEST_CASE("create_temporary refuses a statement as its location") {
  require_refused(kMatmul, "create_temporary 0.0.0.0 C", Reason::kNotAScope);
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

TEST_CASE("create_temporary refuses an inner iterator in two dimensions or two in one") {
  // The diagonal: {1} in both dimensions.
  require_refused(R"(M = 4
N = 8
input x: f32[M, N]
output y: f32[N, N] = 0

M N y[{1},{1}] += x[{0},{1}]
)",
                  "create_temporary 0 y", Reason::kIrregularAccess, "y");
  // A window: {1}+{2} in one dimension maps distinct iterations to one element.
  require_refused(R"(N = 8
input x: f32[7]
output y: f32[N] = 0

N 4 4 y[{0}] += x[{1}+{2}]
)",
                  "create_temporary 0 x", Reason::kIrregularAccess, "x");
}

TEST_CASE("create_temporary refuses scopes whose iterations may run concurrently") {
  const ir::Program par = apply_all(load(kMatmul), {"parallelize 0"});
  // The temporary would be one storage shared by all threads of the parallel rows.
  require_refused(par, "create_temporary 0.0 C", Reason::kAnnotated, "C");
  require_refused(par, "create_temporary 0 C", Reason::kAnnotated, "C");
  const ir::Program vec = apply_all(load(kMatmul), {"swap_scopes 0.0", "vectorize 0.0.0 8"});
  require_refused(vec, "create_temporary 0.0.0 C", Reason::kAnnotated, "C");
}

TEST_CASE("create_temporary caches an input row without writing it back") {
  const ir::Program p = load(kMatmul);
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

// ---------------------------------------------------------------------------------------------
// reuse_buffers.

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

// ---------------------------------------------------------------------------------------------
// shrink_buffer.

constexpr const char* kFusedSoftmax = R"(B = 4
N = 8
input s: f32[B, N]
output d: f32[B, N]
temp m: f32[B] = -inf
temp e: f32[B, N]
temp a: f32[B] = 0
temp i: f32[B]

B N m[{0}] = max(s[{0},{1}])
| N e[{0},{1}] = exp(s[{0},{1}] - m[{0}])
| | a[{0}] += e[{0},{1}]
| i[{0}] = 1 / a[{0}]
| N d[{0},{1}] = e[{0},{1}] * i[{0}]
)";

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
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[N]

N y[{0}] = x[{0}]
)",
                  "shrink_buffer t 0", Reason::kNothingToDo, "t");
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

// ---------------------------------------------------------------------------------------------
// inline_temporary.

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
  require_refused(R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[N]

N y[{0}] = x[{0}]
)",
                  "inline_temporary t", Reason::kNothingToDo, "t");
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

N t[{0}] *= x[{0}]
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

// ---------------------------------------------------------------------------------------------
// hoist.

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

// ---------------------------------------------------------------------------------------------
// swap_buffer_dims.

TEST_CASE("swap_buffer_dims refuses a buffer that does not exist") {
  require_refused(kMatmul, "swap_buffer_dims Z 0", Reason::kNoSuchLocation, "Z");
}

TEST_CASE("swap_buffer_dims refuses an output, whose layout the caller sees") {
  require_refused(kMatmul, "swap_buffer_dims C 0", Reason::kNotATemporary, "C");
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

// ---------------------------------------------------------------------------------------------
// Pipelines.

TEST_CASE("softmax ends with scalar row temporaries and the same outputs") {
  std::ifstream in(std::string(PERFDOJO_KERNEL_DIR) + "/softmax.pdj");
  REQUIRE(in.good());
  std::string text, line;
  bool b = false, n = false;
  while (std::getline(in, line)) {
    if (line == "B = 256") line = "B = 4", b = true;
    if (line == "N = 1024") line = "N = 16", n = true;
    text += line + "\n";
  }
  REQUIRE((b && n));
  const ir::Program p = load(text, "softmax.pdj");
  const ir::Program q = apply_all(p, {
                                         "inline_temporary x",  // e = exp(s - m)
                                         "join_scopes 0",       // one row loop
                                         "shrink_buffer m 0",   // -inf re-set per row
                                         "shrink_buffer a 0",   // 0 re-set per row
                                         "shrink_buffer i 0",
                                         "shrink_buffer e 0",  // one row of e
                                     });
  CHECK(q.find_buffer("x") == nullptr);
  CHECK(temp_elements(p) == 4 + 64 + 64 + 4 + 4);
  CHECK(temp_elements(q) == 1 + 16 + 1 + 1);
  require_same_outputs(p, q);
}

TEST_CASE("matmul with a 16-wide register tile of C computes the same product") {
  const ir::Program p = load(R"(M = 8
N = 32
K = 8
input A: f32[M, K]
input B: f32[K, N]
output C: f32[M, N] = 0

M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]
)");
  // N -> 2 x 16, K outside the 16, cache the strip, vectorise the strip's K loop.
  const ir::Program q = apply_all(p, {"tile_scope 0.0 16", "swap_scopes 0.0.0",
                                      "create_temporary 0.0 C", "vectorize 0.0.1.0 16"});
  const auto* c = q.find_buffer("C_t0");
  REQUIRE(c != nullptr);
  CHECK(c->shape == std::vector<int64_t>{16});
  require_same_outputs(p, q);
  // And a scalar accumulator per element, with the B matrix packed transposed.
  const ir::Program s = apply_all(p, {"swap_buffer_dims B 0", "create_temporary 1.0 C"});
  CHECK(s.find_buffer("C_t0")->shape == std::vector<int64_t>{1});
  CHECK(s.find_buffer("B_p0")->shape == (std::vector<int64_t>{32, 8}));
  require_same_outputs(p, s);
}

// ---------------------------------------------------------------------------------------------
// Random trajectories that favour the buffer transformations.

TEST_CASE("random trajectories rich in buffer transformations keep every suite kernel's outputs") {
  const transforms::Target target;
  const std::vector<transforms::Kind> mine = {
      transforms::Kind::kCreateTemporary, transforms::Kind::kReuseBuffers,
      transforms::Kind::kShrinkBuffer,    transforms::Kind::kInlineTemporary,
      transforms::Kind::kHoist,           transforms::Kind::kSwapBufferDims};
  std::map<transforms::Kind, int> applied;
  for (const auto& name : testing::suite_kernel_names()) {
    auto loaded = testing::load_scaled_kernel(name);
    REQUIRE_MESSAGE(loaded.ok(), loaded.error_text());
    const ir::Program& original = loaded.value();
    for (int t = 0; t < 6; ++t) {
      std::mt19937_64 rng(std::hash<std::string>{}(name)*31 + t);
      ir::Program cur = original;
      std::vector<Action> trace;
      for (int step = 0; step < 16; ++step) {
        // Half the steps pick one of the six kinds (uniformly among those with a legal action),
        // the others any legal action, so the buffer transformations meet tiled and fused code.
        std::map<transforms::Kind, std::vector<Action>> by_kind;
        std::vector<Action> all = transforms::legal_actions(cur, target);
        if (all.empty()) break;
        for (const auto& a : all)
          if (std::find(mine.begin(), mine.end(), a.kind) != mine.end())
            by_kind[a.kind].push_back(a);
        const std::vector<Action>* pool = &all;
        if (!by_kind.empty() && rng() % 2 == 0) {
          auto it = by_kind.begin();
          std::advance(it, static_cast<long>(rng() % by_kind.size()));
          pool = &it->second;
        }
        const Action a = (*pool)[rng() % pool->size()];
        auto next = transforms::apply(cur, a, target);
        REQUIRE_MESSAGE(next.ok(), next.error_text());
        cur = std::move(next).value();
        trace.push_back(a);
        ++applied[a.kind];
      }
      INFO("kernel ", name, ", trace:\n", transforms::print_trace(trace));
      require_same_outputs(original, cur);
    }
  }
  for (auto k : mine) CHECK_MESSAGE(applied[k] > 0, transforms::kind_name(k) << " never ran");
}
