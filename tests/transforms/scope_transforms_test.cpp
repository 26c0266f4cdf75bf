// The nine loop-structure transformations (tile_scope, join_nested, swap_scopes, join_scopes,
// split_scope, move_statement, vectorize, unroll, parallelize): golden before/after files, one
// refusal per legality reason, the dependence test they rely on, and the action text.
//
// Golden files: tests/data/golden/<transformation>/<case>.before.pdj, <case>.trace (one action
// per line, as print_action prints it) and <case>.after.pdj (the exact canonical text replaying
// the trace must print). The golden test walks every folder there, the buffer
// transformations' included. Each .after.pdj was written by hand from the transformation's
// documented effect and only then compared with what the code produces.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "doctest/doctest.h"
#include "ir/interp.h"
#include "ir/ir.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "transforms/action.h"
#include "transforms/analysis.h"
#include "transforms/registry.h"

namespace {

namespace fs = std::filesystem;
using namespace perfdojo;
using transforms::Action;
using transforms::Dir;
using transforms::Kind;
using transforms::Legality;
using transforms::Reason;
using transforms::Target;

// The transformations this file covers, in registry order.
const std::vector<std::string> kScopeTransforms = {"tile_scope",  "join_nested", "swap_scopes",
                                                   "join_scopes", "split_scope", "move_statement",
                                                   "vectorize",   "unroll",      "parallelize"};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path golden_dir() { return fs::path(PERFDOJO_TEST_DATA_DIR) / "golden"; }

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<fs::path> sorted_entries(const fs::path& dir, bool directories) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() == directories) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

/// Case names (file names without ".before.pdj") of one golden folder.
std::vector<std::string> golden_cases(const fs::path& folder) {
  std::vector<std::string> out;
  constexpr std::string_view kBefore = ".before.pdj";
  for (const auto& f : sorted_entries(folder, false)) {
    std::string name = f.filename().string();
    if (ends_with(name, kBefore)) out.push_back(name.substr(0, name.size() - kBefore.size()));
  }
  return out;
}

ir::Program load(const std::string& text) {
  auto r = ir::load_program(text, "<test>");
  REQUIRE_MESSAGE(r.ok(), r.error_text() << "\nin:\n" << text);
  return r.value();
}

ir::Program load_kernel(const std::string& name) {
  auto r = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/" + name + ".pdj");
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return r.value();
}

Action action(std::string_view text) {
  auto r = transforms::parse_action(text);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return r.value();
}

Target no_threads() {
  Target t;
  t.parallel = false;
  return t;
}

bool subtree_has_reduction(const ir::Node& n) {
  if (!n.is_scope) return n.stmt.op != ir::Reduce::kNone;
  return std::any_of(n.body.begin(), n.body.end(),
                     [](const ir::NodePtr& c) { return subtree_has_reduction(*c); });
}

/// Whether applying `a` to `p` vectorises a scope holding a reduction (which reassociates it).
bool vectorizes_a_reduction(const ir::Program& p, const Action& a) {
  if (a.kind != Kind::kVectorize) return false;
  const ir::Node* n = transforms::node_at(p, a.path);
  return n && subtree_has_reduction(*n);
}

/// Largest error over the outputs of `before` between running `before` and `after` on the
/// same generated inputs.
double output_error(const ir::Program& before, const ir::Program& after, uint64_t seed) {
  const ir::TensorMap inputs = ir::make_inputs(before, seed);
  auto want = ir::interpret(before, inputs);
  REQUIRE_MESSAGE(want.ok(), want.error_text());
  auto got = ir::interpret(after, inputs);
  REQUIRE_MESSAGE(got.ok(), got.error_text());
  double worst = 0;
  int outputs = 0;
  for (const auto& b : before.buffers) {
    if (b.role != ir::Role::kOutput) continue;
    ++outputs;
    REQUIRE_MESSAGE(got->count(b.name) == 1, "output " << b.name << " is gone");
    worst = std::max(worst, ir::max_relative_error(want->at(b.name), got->at(b.name)));
  }
  REQUIRE(outputs > 0);
  return worst;
}

/// The same scope with its annotation removed.
ir::Program without_annotation(const ir::Program& p, const transforms::Path& path) {
  const ir::Node* n = transforms::node_at(p, path);
  REQUIRE(n);
  REQUIRE(n->is_scope);
  return transforms::replace_node(
      p, path, {ir::Node::scope(n->extent, n->extent_name, ir::Annot::kNone, n->body, n->loc)});
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Golden files.

TEST_CASE("every golden trace replays its before file into exactly its after file") {
  REQUIRE(fs::is_directory(golden_dir()));
  int cases = 0;
  for (const auto& folder : sorted_entries(golden_dir(), true)) {
    for (const auto& name : golden_cases(folder)) {
      const fs::path base = folder / name;
      const std::string where = folder.filename().string() + "/" + name;
      INFO("golden case ", where);
      const fs::path trace_path = base.string() + ".trace";
      const fs::path after_path = base.string() + ".after.pdj";
      // An incomplete case fails, but the remaining cases still run.
      const bool complete = fs::exists(trace_path) && fs::exists(after_path);
      CHECK_MESSAGE(complete, "missing " << trace_path.filename().string() << " or "
                                         << after_path.filename().string());
      if (!complete) continue;

      auto before = ir::load_file(base.string() + ".before.pdj");
      REQUIRE_MESSAGE(before.ok(), before.error_text());
      auto trace = transforms::parse_trace(read_text(trace_path), trace_path.string());
      REQUIRE_MESSAGE(trace.ok(), trace.error_text());
      REQUIRE_FALSE(trace->empty());

      auto result = transforms::replay(*before, *trace, Target{});
      REQUIRE_MESSAGE(result.ok(), result.error_text());
      CHECK(ir::print_program(*result) == read_text(after_path));
      CHECK_FALSE(ir::structurally_equal(*result, *before));

      auto after = ir::load_file(after_path.string());
      REQUIRE_MESSAGE(after.ok(), after.error_text());
      CHECK(ir::structurally_equal(*after, *result));

      // Applying the actions one at a time gives the same program, and tells whether any of
      // them reassociates a reduction (the one case where results may differ in rounding).
      ir::Program step = *before;
      bool reassociates = false;
      for (const auto& a : *trace) {
        reassociates = reassociates || vectorizes_a_reduction(step, a);
        auto r = transforms::apply(step, a, Target{});
        REQUIRE_MESSAGE(r.ok(), r.error_text());
        step = std::move(r).value();
      }
      CHECK(ir::structurally_equal(step, *result));

      for (uint64_t seed : {1u, 2u}) {
        INFO("seed ", seed);
        const double err = output_error(*before, *result, seed);
        if (reassociates) {
          CHECK(err <= 1e-5);
        } else {
          CHECK(err == 0);
        }
      }
      ++cases;
    }
  }
  // At least the loop-structure cases exist; other folders may still be empty.
  CHECK(cases >= static_cast<int>(kScopeTransforms.size()));
}

TEST_CASE("every loop-structure transformation has golden cases that use it") {
  for (const auto& t : kScopeTransforms) {
    INFO("folder ", t);
    const fs::path folder = golden_dir() / t;
    REQUIRE(fs::is_directory(folder));
    const auto cases = golden_cases(folder);
    CHECK_FALSE(cases.empty());
    for (const auto& name : cases) {
      INFO("case ", name);
      auto trace = transforms::parse_trace(read_text(folder / (name + ".trace")));
      REQUIRE_MESSAGE(trace.ok(), trace.error_text());
      CHECK(std::any_of(trace->begin(), trace->end(),
                        [&](const Action& a) { return transforms::kind_name(a.kind) == t; }));
    }
    // No stray files: everything in the folder belongs to a complete case.
    for (const auto& f : sorted_entries(folder, false)) {
      const std::string file = f.filename().string();
      INFO("file ", file);
      bool belongs = false;
      for (const auto& name : cases)
        for (const char* ext : {".before.pdj", ".trace", ".after.pdj"})
          belongs = belongs || file == name + ext;
      CHECK(belongs);
    }
  }
}

TEST_CASE(
    "vectorize and unroll have golden cases both for extent equal to the width and for tiling "
    "first") {
  for (const char* t : {"vectorize", "unroll"}) {
    INFO("folder ", t);
    bool marks_only = false, tiles = false;
    for (const auto& name : golden_cases(golden_dir() / t)) {
      auto before = ir::load_file((golden_dir() / t / (name + ".before.pdj")).string());
      REQUIRE(before.ok());
      auto trace = transforms::parse_trace(read_text(golden_dir() / t / (name + ".trace")));
      REQUIRE(trace.ok());
      ir::Program p = *before;
      for (const auto& a : *trace) {
        if (transforms::kind_name(a.kind) == std::string(t)) {
          const ir::Node* s = transforms::node_at(p, a.path);
          REQUIRE(s);
          (s->extent == a.param ? marks_only : tiles) = true;
        }
        auto r = transforms::apply(p, a, Target{});
        REQUIRE(r.ok());
        p = std::move(r).value();
      }
    }
    CHECK(marks_only);
    CHECK(tiles);
  }
}

// ---------------------------------------------------------------------------------------------
// Refusals: one case per legality reason each transformation can return.

namespace {

const std::string kOneD =
    "N = 8\n"
    "input x: f32[N]\n"
    "output y: f32[N]\n"
    "output z: f32[N]\n\n";
const std::string kTwoD =
    "input x: f32[4, 8]\n"
    "output y: f32[4, 8]\n"
    "output z: f32[4]\n\n";
const std::string kSquare =
    "input x: f32[8, 8]\n"
    "output y: f32[8, 8]\n\n";
const std::string kFlat =
    "input x: f32[32]\n"
    "output y: f32[32]\n"
    "output z: f32[4]\n\n";
const std::string kMatmul =
    "M = 4\n"
    "N = 8\n"
    "K = 6\n"
    "input A: f32[M, K]\n"
    "input B: f32[K, N]\n"
    "output C: f32[M, N] = 0\n\n"
    "M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n";
const std::string kSixteen =
    "input x: f32[16]\n"
    "input x2: f32[32]\n"
    "input m: f32[16, 4]\n"
    "output y: f32[16]\n"
    "output a: f32[17] = 0\n"
    "output s: f32[1] = 0\n\n";
const std::string kRows =
    "B = 4\n"
    "N = 8\n"
    "input s: f32[B, N]\n"
    "output m: f32[B] = -inf\n"
    "output t: f32[B]\n\n";

struct Refusal {
  const char* why;
  std::string program;
  const char* action;
  Reason reason;
  const char* buffer = "";  ///< the buffer the verdict must name, if any
  Target target = {};
  std::optional<int64_t> param = std::nullopt;  ///< forced parameter (text cannot carry it)
};

std::vector<Refusal> refusals() {
  const std::string one_scope = kOneD + "N y[{0}] = x[{0}]\n";
  const std::string two_scopes = kOneD + "N y[{0}] = x[{0}]\nN z[{0}] = x[{0}]\n";
  const std::string two_children = kOneD + "N y[{0}] = x[{0}]\n| z[{0}] = x[{0}]\n";
  const std::string tiled_flat = kFlat + "4 8 y[{0}*8+{1}] = x[{0}*8+{1}]\n";
  return {
      // tile_scope
      {"tile_scope: the path leads nowhere", one_scope, "tile_scope 1 4", Reason::kNoSuchLocation},
      {"tile_scope: the path names a statement", one_scope, "tile_scope 0.0 4", Reason::kNotAScope},
      {"tile_scope: the scope is parallel", kOneD + "N:par y[{0}] = x[{0}]\n", "tile_scope 0 4",
       Reason::kAnnotated},
      {"tile_scope: a factor equal to the extent", one_scope, "tile_scope 0 8",
       Reason::kBadParameter},
      {"tile_scope: a factor of 1", one_scope, "tile_scope 0 1", Reason::kBadParameter},
      {"tile_scope: 3 does not divide 8", one_scope, "tile_scope 0 3", Reason::kNotDivisible},
      // join_nested
      {"join_nested: the path leads nowhere", tiled_flat, "join_nested 1", Reason::kNoSuchLocation},
      {"join_nested: the path names a statement", tiled_flat, "join_nested 0.0.0",
       Reason::kNotAScope},
      {"join_nested: the only child is a statement", one_scope, "join_nested 0",
       Reason::kNotPerfectlyNested},
      {"join_nested: a statement next to the inner scope",
       kFlat + "4 8 y[{0}*8+{1}] = x[{0}*8+{1}]\n| z[{0}] = x[{0}]\n", "join_nested 0",
       Reason::kNotPerfectlyNested},
      {"join_nested: the inner scope is unrolled",
       kFlat + "4 8:unroll y[{0}*8+{1}] = x[{0}*8+{1}]\n", "join_nested 0", Reason::kAnnotated},
      {"join_nested: the iterators index different dimensions",
       kTwoD + "4 8 y[{0},{1}] = x[{0},{1}]\n", "join_nested 0", Reason::kIndexNotMergeable, "y"},
      {"join_nested: the outer stride is not the inner extent", kFlat + "4 8 z[0] = x[{0}*4+{1}]\n",
       "join_nested 0", Reason::kIndexNotMergeable, "x"},
      {"join_nested takes no parameter",
       tiled_flat,
       "join_nested 0",
       Reason::kBadParameter,
       "",
       {},
       2},
      // swap_scopes
      {"swap_scopes: the path leads nowhere", kMatmul, "swap_scopes 0.1", Reason::kNoSuchLocation},
      {"swap_scopes: the path names a statement", kMatmul, "swap_scopes 0.0.0.0",
       Reason::kNotAScope},
      {"swap_scopes: the only child is a statement", kMatmul, "swap_scopes 0.0.0",
       Reason::kNotPerfectlyNested},
      {"swap_scopes: a statement next to the inner scope",
       kFlat + "4 8 y[{0}*8+{1}] = x[{0}*8+{1}]\n| z[{0}] = x[{0}]\n", "swap_scopes 0",
       Reason::kNotPerfectlyNested},
      {"swap_scopes: a vector scope must stay innermost",
       kTwoD + "4 8:vec y[{0},{1}] = x[{0},{1}]\n", "swap_scopes 0", Reason::kAnnotated},
      {"swap_scopes: a stencil recurrence with direction (<,>)",
       "output a: f32[5, 7] = 1\n\n4 6 a[{0}+1,{1}] = a[{0},{1}+1] + 1\n", "swap_scopes 0",
       Reason::kDependence, "a"},
      {"swap_scopes: it would reorder a floating-point sum into one scalar",
       "input x: f32[4, 8]\noutput s: f32[1] = 0\n\n4 8 s[0] += x[{0},{1}]\n", "swap_scopes 0",
       Reason::kDependence, "s"},
      {"swap_scopes takes no parameter",
       kMatmul,
       "swap_scopes 0.0",
       Reason::kBadParameter,
       "",
       {},
       2},
      // join_scopes
      {"join_scopes: the path leads nowhere", two_scopes, "join_scopes 2", Reason::kNoSuchLocation},
      {"join_scopes: the path names a statement", two_scopes, "join_scopes 0.0",
       Reason::kNotAScope},
      {"join_scopes: the last scope has no next sibling", two_scopes, "join_scopes 1",
       Reason::kNoNextSibling},
      {"join_scopes: the next sibling is a statement",
       kTwoD + "4 8 y[{0},{1}] = x[{0},{1}]\n| z[{0}] = x[{0},0]\n", "join_scopes 0.0",
       Reason::kNoNextSibling},
      {"join_scopes: extents 8 and 4", kOneD + "N y[{0}] = x[{0}]\n4 z[{0}] = x[{0}]\n",
       "join_scopes 0", Reason::kExtentMismatch},
      {"join_scopes: only one of the scopes is parallel",
       kOneD + "N:par y[{0}] = x[{0}]\nN z[{0}] = x[{0}]\n", "join_scopes 0", Reason::kAnnotated},
      {"join_scopes: the consumer reads what a later producer iteration writes",
       "N = 8\ninput x: f32[N]\ntemp b: f32[N]\noutput c: f32[N]\n\n"
       "N b[{0}] = x[{0}]\nN c[{0}] = b[7-{0}]\n",
       "join_scopes 0", Reason::kDependence, "b"},
      {"join_scopes: the second scope overwrites what a later iteration of the first reads",
       "N = 8\ninput x: f32[N]\noutput y: f32[N]\noutput a: f32[9] = 0\n\n"
       "N y[{0}] = a[{0}]\nN a[{0}+1] = x[{0}]\n",
       "join_scopes 0", Reason::kDependence, "a"},
      {"join_scopes takes no parameter",
       two_scopes,
       "join_scopes 0",
       Reason::kBadParameter,
       "",
       {},
       2},
      // split_scope
      {"split_scope: the path leads nowhere", two_children, "split_scope 3 1",
       Reason::kNoSuchLocation},
      {"split_scope: the path names a statement", two_children, "split_scope 0.0 1",
       Reason::kNotAScope},
      {"split_scope: a scope with one child", one_scope, "split_scope 0 1", Reason::kNothingToDo},
      {"split_scope: index 0 leaves the first scope empty", two_children, "split_scope 0 0",
       Reason::kBadParameter},
      {"split_scope: index n leaves the second scope empty", two_children, "split_scope 0 2",
       Reason::kBadParameter},
      {"split_scope: fission would reverse a dependence from the tail to a later head",
       "N = 8\ninput x: f32[N]\noutput a: f32[9] = 0\noutput y: f32[N]\n\n"
       "N y[{0}] = a[{0}] + x[{0}]\n| a[{0}+1] = x[{0}] * 2\n",
       "split_scope 0 1", Reason::kDependence, "a"},
      // move_statement
      {"move_statement: the path leads nowhere", two_children, "move_statement 0.2",
       Reason::kNoSuchLocation},
      {"move_statement: the last child has no next sibling", two_children, "move_statement 0.1",
       Reason::kNoNextSibling},
      {"move_statement: the next statement reads what this one writes",
       kOneD + "N y[{0}] = x[{0}] * 2\n| z[{0}] = y[{0}] + 1\n", "move_statement 0.0",
       Reason::kDependence, "y"},
      {"move_statement: a scope over the statement that reads its result",
       kRows + "B N m[{0}] = max(s[{0},{1}])\n| t[{0}] = m[{0}] * 2\n", "move_statement 0.0",
       Reason::kDependence, "m"},
      {"move_statement takes no parameter",
       two_children,
       "move_statement 0.0",
       Reason::kBadParameter,
       "",
       {},
       2},
      // vectorize
      {"vectorize: the path leads nowhere", one_scope, "vectorize 1 8", Reason::kNoSuchLocation},
      {"vectorize: the path names a statement", one_scope, "vectorize 0.0 8", Reason::kNotAScope},
      {"vectorize: the target has no 4-lane vectors", one_scope, "vectorize 0 4",
       Reason::kUnsupportedByTarget},
      {"vectorize: the scope is unrolled", kOneD + "N:unroll y[{0}] = x[{0}]\n", "vectorize 0 8",
       Reason::kAnnotated},
      {"vectorize: the scope holds a scope", kSquare + "8 8 y[{0},{1}] = x[{0},{1}]\n",
       "vectorize 0 8", Reason::kNotInnermost},
      {"vectorize: 8 does not divide 12",
       "input x: f32[12]\noutput y: f32[12]\n\n12 y[{0}] = x[{0}]\n", "vectorize 0 8",
       Reason::kNotDivisible},
      {"vectorize: a stride-2 access", kSixteen + "16 y[{0}] = x2[{0}*2]\n", "vectorize 0 16",
       Reason::kNonContiguous, "x2"},
      {"vectorize: the lanes walk an outer dimension", kSixteen + "16 y[{0}] = m[{0},0]\n",
       "vectorize 0 16", Reason::kNonContiguous, "m"},
      {"vectorize: a recurrence carried by the scope", kSixteen + "16 a[{0}+1] = a[{0}] + x[{0}]\n",
       "vectorize 0 16", Reason::kDependence, "a"},
      {"vectorize: a partial sum read in the same scope",
       kSixteen + "16 s[0] += x[{0}]\n| y[{0}] = s[0]\n", "vectorize 0 16", Reason::kDependence,
       "s"},
      {"vectorize: a reduction that also reads its own target",
       kSixteen + "16 s[0] += s[0] * x[{0}]\n", "vectorize 0 16", Reason::kDependence, "s"},
      {"vectorize: every lane stores to one element", kSixteen + "16 s[0] = x[{0}]\n",
       "vectorize 0 16", Reason::kDependence, "s"},
      // unroll
      {"unroll: the path leads nowhere", one_scope, "unroll 1 2", Reason::kNoSuchLocation},
      {"unroll: the path names a statement", one_scope, "unroll 0.0 2", Reason::kNotAScope},
      {"unroll: the scope is parallel", kOneD + "N:par y[{0}] = x[{0}]\n", "unroll 0 2",
       Reason::kAnnotated},
      {"unroll: a factor of 1", one_scope, "unroll 0 1", Reason::kBadParameter},
      {"unroll: a factor above the extent", one_scope, "unroll 0 16", Reason::kBadParameter},
      {"unroll: a factor above 64",
       "input x: f32[128]\noutput y: f32[128]\n\n128 y[{0}] = x[{0}]\n", "unroll 0 128",
       Reason::kBadParameter},
      {"unroll: 3 does not divide 8", one_scope, "unroll 0 3", Reason::kNotDivisible},
      // parallelize
      {"parallelize: the path leads nowhere", one_scope, "parallelize 1", Reason::kNoSuchLocation},
      {"parallelize: the path names a statement", one_scope, "parallelize 0.0", Reason::kNotAScope},
      {"parallelize: the target has no threads", one_scope, "parallelize 0",
       Reason::kUnsupportedByTarget, "", no_threads()},
      {"parallelize: the scope is unrolled", kOneD + "N:unroll y[{0}] = x[{0}]\n", "parallelize 0",
       Reason::kAnnotated},
      {"parallelize: a single iteration",
       "input x: f32[1, 8]\noutput y: f32[1, 8]\n\n1 8 y[{0},{1}] = x[{0},{1}]\n", "parallelize 0",
       Reason::kNothingToDo},
      {"parallelize: an enclosing scope is parallel", kTwoD + "4:par 8 y[{0},{1}] = x[{0},{1}]\n",
       "parallelize 0.0", Reason::kNestedParallel},
      {"parallelize: an inner scope is parallel", kTwoD + "4 8:par y[{0},{1}] = x[{0},{1}]\n",
       "parallelize 0", Reason::kNestedParallel},
      {"parallelize: the reduction scope K of a matmul", kMatmul, "parallelize 0.0.0",
       Reason::kDependence, "C"},
      {"parallelize: a scalar accumulator", kSixteen + "16 s[0] += x[{0}]\n", "parallelize 0",
       Reason::kDependence, "s"},
      {"parallelize: a recurrence", kSixteen + "16 a[{0}+1] = a[{0}] + x[{0}]\n", "parallelize 0",
       Reason::kDependence, "a"},
      {"parallelize takes no parameter",
       one_scope,
       "parallelize 0",
       Reason::kBadParameter,
       "",
       {},
       2},
  };
}

}  // namespace

TEST_CASE(
    "each refused action names its reason, is refused by apply and leaves the program untouched") {
  for (const auto& c : refusals()) {
    INFO(c.why, "\naction: ", c.action, "\nprogram:\n", c.program);
    const ir::Program original = load(c.program);
    const ir::Program p = load(c.program);
    Action a = action(c.action);
    if (c.param) a.param = *c.param;

    const Legality l = transforms::check(p, a, c.target);
    CHECK(transforms::reason_name(l.reason) == std::string(transforms::reason_name(c.reason)));
    CHECK(l.buffer == c.buffer);

    auto r = transforms::apply(p, a, c.target);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_text().find(transforms::reason_name(c.reason)) != std::string::npos);

    CHECK(ir::structurally_equal(p, original));
    CHECK(ir::structural_hash(p) == ir::structural_hash(original));
    CHECK(ir::print_program(p) == ir::print_program(original));
  }
}

TEST_CASE("the refusal cases cover every reason each loop-structure transformation can give") {
  // Read off the check_* functions (and the registry's parameter check for parameterless kinds).
  const std::vector<std::pair<Kind, std::vector<Reason>>> expected = {
      {Kind::kTileScope,
       {Reason::kNoSuchLocation, Reason::kNotAScope, Reason::kAnnotated, Reason::kBadParameter,
        Reason::kNotDivisible}},
      {Kind::kJoinNested,
       {Reason::kNoSuchLocation, Reason::kNotAScope, Reason::kNotPerfectlyNested,
        Reason::kAnnotated, Reason::kIndexNotMergeable, Reason::kBadParameter}},
      {Kind::kSwapScopes,
       {Reason::kNoSuchLocation, Reason::kNotAScope, Reason::kNotPerfectlyNested,
        Reason::kAnnotated, Reason::kDependence, Reason::kBadParameter}},
      {Kind::kJoinScopes,
       {Reason::kNoSuchLocation, Reason::kNotAScope, Reason::kNoNextSibling,
        Reason::kExtentMismatch, Reason::kAnnotated, Reason::kDependence, Reason::kBadParameter}},
      {Kind::kSplitScope,
       {Reason::kNoSuchLocation, Reason::kNotAScope, Reason::kNothingToDo, Reason::kBadParameter,
        Reason::kDependence}},
      {Kind::kMoveStatement,
       {Reason::kNoSuchLocation, Reason::kNoNextSibling, Reason::kDependence,
        Reason::kBadParameter}},
      {Kind::kVectorize,
       {Reason::kNoSuchLocation, Reason::kNotAScope, Reason::kUnsupportedByTarget,
        Reason::kAnnotated, Reason::kNotInnermost, Reason::kNotDivisible, Reason::kNonContiguous,
        Reason::kDependence}},
      {Kind::kUnroll,
       {Reason::kNoSuchLocation, Reason::kNotAScope, Reason::kAnnotated, Reason::kBadParameter,
        Reason::kNotDivisible}},
      {Kind::kParallelize,
       {Reason::kNoSuchLocation, Reason::kNotAScope, Reason::kUnsupportedByTarget,
        Reason::kAnnotated, Reason::kNothingToDo, Reason::kNestedParallel, Reason::kDependence,
        Reason::kBadParameter}},
  };
  std::set<std::pair<Kind, Reason>> covered;
  for (const auto& c : refusals()) covered.insert({action(c.action).kind, c.reason});
  for (const auto& entry : expected) {
    const Kind kind = entry.first;
    for (Reason r : entry.second) {
      INFO(transforms::kind_name(kind), " / ", transforms::reason_name(r));
      CHECK(covered.count({kind, r}) == 1);
    }
  }
}

TEST_CASE(
    "paths that lead nowhere are refused by every loop-structure transformation without a crash") {
  const ir::Program p = load(kTwoD + "4 8 y[{0},{1}] = x[{0},{1}]\n");
  const std::vector<transforms::Path> nowhere = {{}, {-1}, {1}, {0, 1}, {0, 0, 0, 0}, {1'000'000}};
  for (int k = 0; k <= static_cast<int>(Kind::kParallelize); ++k) {
    for (const auto& path : nowhere) {
      Action a{static_cast<Kind>(k), path, "", "", 0};
      const auto kind = transforms::param_kind(a.kind);
      if (kind != transforms::ParamKind::kNone)
        a.param = kind == transforms::ParamKind::kIndex ? 1 : 8;
      INFO(transforms::print_action(a));
      CHECK(transforms::check(p, a, Target{}).reason == Reason::kNoSuchLocation);
      CHECK_FALSE(transforms::apply(p, a, Target{}).ok());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Accepted actions: the counterparts showing the checks do not simply refuse everything.

namespace {

struct Acceptance {
  const char* why;
  std::string program;
  const char* action;
};

std::vector<Acceptance> acceptances() {
  return {
      {"tile_scope 16 by 4", kSixteen + "16 y[{0}] = x[{0}] * 2\n", "tile_scope 0 4"},
      {"join_nested of a tiled flat copy", kFlat + "4 8 y[{0}*8+{1}] = x[{0}*8+{1}]\n",
       "join_nested 0"},
      {"swap_scopes of matmul's N and K", kMatmul, "swap_scopes 0.0"},
      {"swap_scopes of matmul's M and N", kMatmul, "swap_scopes 0"},
      {"swap_scopes of a stencil with direction (<,<)",
       "output a: f32[5, 7] = 1\n\n4 6 a[{0}+1,{1}+1] = a[{0},{1}] + 1\n", "swap_scopes 0"},
      {"swap_scopes of a row sum: each row still sums in the same order",
       "input x: f32[4, 8]\noutput s: f32[4] = 0\n\n4 8 s[{0}] += x[{0},{1}]\n", "swap_scopes 0"},
      {"join_scopes of softmax-style producer and consumer of a row maximum",
       kRows + "output d: f32[B, N]\n\nB N m[{0}] = max(s[{0},{1}])\nB N d[{0},{1}] = s[{0},{1}] - "
               "m[{0}]\n",
       "join_scopes 0"},
      {"join_scopes when the consumer reads what an earlier producer iteration wrote",
       "N = 8\ninput x: f32[N]\ntemp b: f32[9] = 0\noutput c: f32[N]\n\n"
       "N b[{0}+1] = x[{0}]\nN c[{0}] = b[{0}]\n",
       "join_scopes 0"},
      {"split_scope of a forward dependence",
       kOneD + "N y[{0}] = x[{0}] * 2\n| z[{0}] = y[{0}] + 1\n", "split_scope 0 1"},
      {"split_scope when the head writes ahead of the tail",
       "N = 8\ninput x: f32[N]\noutput a: f32[9] = 0\noutput y: f32[N]\n\n"
       "N a[{0}+1] = x[{0}]\n| y[{0}] = a[{0}]\n",
       "split_scope 0 1"},
      {"move_statement of independent statements",
       kOneD + "N y[{0}] = x[{0}] * 2\n| z[{0}] = x[{0}] + 1\n", "move_statement 0.0"},
      {"move_statement over a dependence carried only across iterations",
       "N = 8\ninput x: f32[N]\noutput a: f32[9] = 0\noutput y: f32[N]\n\n"
       "N a[{0}+1] = x[{0}]\n| y[{0}] = a[{0}]\n",
       "move_statement 0.0"},
      {"vectorize a row sum over the inner scope",
       "input x: f32[4, 32]\noutput s: f32[4] = 0\n\n4 32 s[{0}] += x[{0},{1}]\n",
       "vectorize 0.0 16"},
      {"vectorize a global sum into a scalar", kSixteen + "16 s[0] += x[{0}]\n", "vectorize 0 16"},
      {"vectorize with an invariant operand and an offset read",
       kSixteen + "16 y[{0}] = x2[{0}+1] * m[3,2]\n", "vectorize 0 8"},
      {"unroll 8 by 2", kOneD + "N y[{0}] = x[{0}]\n", "unroll 0 2"},
      {"parallelize matmul's M scope", kMatmul, "parallelize 0"},
      {"parallelize matmul's N scope", kMatmul, "parallelize 0.0"},
      {"parallelize the inner scope of a recurrence over rows",
       "input x: f32[4, 8]\noutput a: f32[5, 8] = 0\n\n4 8 a[{0}+1,{1}] = a[{0},{1}] + "
       "x[{0},{1}]\n",
       "parallelize 0.0"},
  };
}

}  // namespace

TEST_CASE("the legal counterparts are accepted and compute what the original computed") {
  for (const auto& c : acceptances()) {
    INFO(c.why, "\naction: ", c.action, "\nprogram:\n", c.program);
    const ir::Program p = load(c.program);
    const Action a = action(c.action);
    const Legality l = transforms::check(p, a, Target{});
    CHECK_MESSAGE(l.ok(), transforms::explain(a, l));
    auto r = transforms::apply(p, a, Target{});
    REQUIRE_MESSAGE(r.ok(), r.error_text());
    CHECK_FALSE(ir::structurally_equal(*r, p));
    const bool reassociates = vectorizes_a_reduction(p, a);
    for (uint64_t seed : {1u, 2u}) {
      const double err = output_error(p, *r, seed);
      if (reassociates) {
        CHECK(err <= 1e-5);
      } else {
        CHECK(err == 0);
      }
    }
  }
}

TEST_CASE("the suite kernels accept the classic first steps and refuse the classic mistakes") {
  const ir::Program matmul = load_kernel("matmul-256");
  CHECK(transforms::check(matmul, action("parallelize 0"), Target{}).ok());
  CHECK(transforms::check(matmul, action("swap_scopes 0.0"), Target{}).ok());
  CHECK(transforms::check(matmul, action("parallelize 0.0.0"), Target{}).reason ==
        Reason::kDependence);
  // K is innermost but B[{2},{1}] walks B's outer dimension.
  CHECK(transforms::check(matmul, action("vectorize 0.0.0 16"), Target{}).reason ==
        Reason::kNonContiguous);

  const ir::Program softmax = load_kernel("softmax");
  CHECK(transforms::check(softmax, action("join_scopes 0"), Target{}).ok());
  CHECK(transforms::check(softmax, action("vectorize 0.0 16"), Target{}).ok());  // row maximum
  CHECK(transforms::check(softmax, action("move_statement 0.0"), Target{}).reason ==
        Reason::kDependence);  // the max must come before its use

  const ir::Program rowsum = load_kernel("rowsum");
  CHECK(transforms::check(rowsum, action("vectorize 0.0 16"), Target{}).ok());
  CHECK(transforms::check(rowsum, action("parallelize 0"), Target{}).ok());
  CHECK(transforms::check(rowsum, action("parallelize 0.0"), Target{}).reason ==
        Reason::kDependence);
}

// ---------------------------------------------------------------------------------------------
// Annotations must stay valid after the scopes carrying them move.

TEST_CASE(
    "swap_scopes refuses to move a parallel scope outward over a dependence it would then carry") {
  // Row i+1 depends on row i and column j+1 on column j: direction (<,<). Each row's columns
  // are independent, so the inner scope may be parallel; the swap itself is legal for a plain
  // nest. Moving the parallel scope outward, however, makes it carry the dependence.
  const std::string header = "output a: f32[5, 9] = 1\n\n";
  const ir::Program plain = load(header + "4 8 a[{0}+1,{1}+1] = a[{0},{1}] * 0.5\n");
  REQUIRE(transforms::check(plain, action("parallelize 0.0"), Target{}).ok());
  REQUIRE(transforms::check(plain, action("swap_scopes 0"), Target{}).ok());
  // After the interchange the outer scope carries the dependence, so it may not be parallel.
  const ir::Program swapped = load(header + "8 4 a[{1}+1,{0}+1] = a[{1},{0}] * 0.5\n");
  REQUIRE(transforms::check(swapped, action("parallelize 0"), Target{}).reason ==
          Reason::kDependence);

  const ir::Program p = load(header + "4 8:par a[{0}+1,{1}+1] = a[{0},{1}] * 0.5\n");
  const Action swap = action("swap_scopes 0");
  const Legality l = transforms::check(p, swap, Target{});
  if (l.ok()) {
    auto r = transforms::apply(p, swap, Target{});
    REQUIRE(r.ok());
    const ir::Program stripped = without_annotation(*r, {0});
    FAIL_CHECK("swap_scopes 0 was accepted and made a parallel scope carry a dependence:\n"
               << ir::print_program(*r) << "parallelize on that scope says: "
               << std::string(transforms::reason_name(
                      transforms::check(stripped, action("parallelize 0"), Target{}).reason)));
  }
}

TEST_CASE(
    "join_scopes refuses to fuse parallel scopes when the fused scope would carry a dependence") {
  // Iteration y of the consumer reads b[y], written by iteration y-1 of the producer. Fusing is
  // legal for plain scopes, but a parallel fused scope would race on b.
  const std::string header = "input x: f32[8]\noutput b: f32[9] = 0\noutput c: f32[8]\n\n";
  const ir::Program plain = load(header + "8 b[{0}+1] = x[{0}]\n8 c[{0}] = b[{0}] * 2\n");
  REQUIRE(transforms::check(plain, action("parallelize 0"), Target{}).ok());
  REQUIRE(transforms::check(plain, action("parallelize 1"), Target{}).ok());
  const ir::Program fused = load(header + "8 b[{0}+1] = x[{0}]\n| c[{0}] = b[{0}] * 2\n");
  REQUIRE(transforms::check(fused, action("parallelize 0"), Target{}).reason ==
          Reason::kDependence);

  const ir::Program p = load(header + "8:par b[{0}+1] = x[{0}]\n8:par c[{0}] = b[{0}] * 2\n");
  const Action join = action("join_scopes 0");
  const Legality l = transforms::check(p, join, Target{});
  if (l.ok()) {
    auto r = transforms::apply(p, join, Target{});
    REQUIRE(r.ok());
    FAIL_CHECK("join_scopes 0 was accepted and made a parallel scope carry a dependence:\n"
               << ir::print_program(*r));
  }
}

TEST_CASE("moving a parallel scope inward and fusing independent parallel scopes stay legal") {
  const ir::Program transpose =
      load("input x: f32[4, 8]\noutput y: f32[8, 4]\n\n4:par 8 y[{1},{0}] = x[{0},{1}]\n");
  CHECK(transforms::check(transpose, action("swap_scopes 0"), Target{}).ok());
  const ir::Program two = load(kOneD + "N:par y[{0}] = x[{0}]\nN:par z[{0}] = y[{0}] * 2\n");
  auto r = transforms::apply(two, action("join_scopes 0"), Target{});
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  CHECK(ir::print_program(*r) == kOneD + "N:par y[{0}] = x[{0}]\n| z[{0}] = y[{0}] * 2\n");
}

// ---------------------------------------------------------------------------------------------
// The dependence test.

namespace {

ir::Affine affine(std::vector<int64_t> coeffs, int64_t constant = 0) {
  ir::Affine a;
  a.coeffs = std::move(coeffs);
  a.constant = constant;
  a.normalise();
  return a;
}

/// Owns the accesses AccessSite points at.
struct Sites {
  ir::Stmt stmt;
  std::vector<std::unique_ptr<ir::Access>> accesses;
  std::vector<std::unique_ptr<std::vector<int64_t>>> extents_storage;

  transforms::AccessSite site(const std::string& buffer, std::vector<ir::Affine> index,
                              std::vector<int64_t> extents, bool write = true) {
    accesses.push_back(std::make_unique<ir::Access>(ir::Access{buffer, std::move(index), {}}));
    extents_storage.push_back(std::make_unique<std::vector<int64_t>>(std::move(extents)));
    const auto& e = *extents_storage.back();
    return {accesses.back().get(), write, false, &stmt, e.data(), static_cast<int>(e.size())};
  }
};

}  // namespace

TEST_CASE("may_overlap proves tiled iterations disjoint when the tile iterator differs") {
  Sites s;
  const auto tiled = affine({32, 1});  // {0}*32+{1}
  const auto a = s.site("x", {tiled}, {4, 32});
  const auto b = s.site("x", {tiled}, {4, 32});
  CHECK_FALSE(transforms::may_overlap(a, b, {Dir::kLt}));
  CHECK_FALSE(transforms::may_overlap(a, b, {Dir::kGt}));
  CHECK(transforms::may_overlap(a, b, {Dir::kEq}));
  CHECK(transforms::may_overlap(a, b, {}));
  // A tile of 33 elements would overlap the next tile.
  const auto c = s.site("x", {tiled}, {4, 33});
  const auto d = s.site("x", {tiled}, {4, 33});
  CHECK(transforms::may_overlap(c, d, {Dir::kLt}));
}

TEST_CASE(
    "may_overlap follows the direction: a writes x[i+1] that b reads as x[j] only when i < j") {
  Sites s;
  const auto ahead = s.site("x", {affine({1}, 1)}, {8});     // {0}+1
  const auto here = s.site("x", {affine({1})}, {8}, false);  // {0}
  CHECK(transforms::may_overlap(ahead, here, {Dir::kLt}));
  CHECK_FALSE(transforms::may_overlap(ahead, here, {Dir::kGt}));
  CHECK_FALSE(transforms::may_overlap(ahead, here, {Dir::kEq}));
  CHECK(transforms::may_overlap(ahead, here, {Dir::kAny}));
  // The same pair seen from the other side.
  CHECK_FALSE(transforms::may_overlap(here, ahead, {Dir::kLt}));
  CHECK(transforms::may_overlap(here, ahead, {Dir::kGt}));
}

TEST_CASE("may_overlap rules out distances no pair of iterations can reach") {
  Sites s;
  // x[i+3] against x[j], i < j: needs j = i + 3, possible with 4 iterations, not with 3.
  CHECK_FALSE(transforms::may_overlap(s.site("x", {affine({1}, 3)}, {3}),
                                      s.site("x", {affine({1})}, {3}), {Dir::kLt}));
  CHECK(transforms::may_overlap(s.site("x", {affine({1}, 3)}, {4}), s.site("x", {affine({1})}, {4}),
                                {Dir::kLt}));
  // 2i = j: reachable for i < j (i=1, j=2), never for i > j.
  CHECK(transforms::may_overlap(s.site("x", {affine({2})}, {8}), s.site("x", {affine({1})}, {8}),
                                {Dir::kLt}));
  CHECK_FALSE(transforms::may_overlap(s.site("x", {affine({2})}, {8}),
                                      s.site("x", {affine({1})}, {8}), {Dir::kGt}));
  // One iteration has no distinct pair at all.
  CHECK_FALSE(transforms::may_overlap(s.site("x", {affine({0})}, {1}),
                                      s.site("x", {affine({0})}, {1}), {Dir::kLt}));
}

TEST_CASE("may_overlap uses the gcd: even and odd elements never meet") {
  Sites s;
  const auto even = s.site("x", {affine({2})}, {8});
  const auto odd = s.site("x", {affine({2}, 1)}, {8});
  for (const std::vector<Dir>& dirs :
       {std::vector<Dir>{}, {Dir::kAny}, {Dir::kLt}, {Dir::kEq}, {Dir::kGt}}) {
    INFO("directions given: ", dirs.size());
    CHECK_FALSE(transforms::may_overlap(even, odd, dirs));
    CHECK_FALSE(transforms::may_overlap(odd, even, dirs));
  }
  CHECK(transforms::may_overlap(even, even, {}));
}

TEST_CASE("direction lists deeper than their inline storage test like short ones") {
  // eq_dirs keeps up to 64 levels inline and the rest on the heap; a nest can be deeper.
  for (int d : {3, 63, 64, 70}) {
    const transforms::DirList dirs = transforms::eq_dirs(d, {Dir::kLt});
    REQUIRE(dirs.size() == static_cast<size_t>(d + 1));
    const std::span<const Dir> view = dirs;
    CHECK(std::count(view.begin(), view.end(), Dir::kEq) == d);
    CHECK(view.back() == Dir::kLt);
    const transforms::DirList copy = dirs;  // a copy keeps its own storage
    CHECK(std::equal(view.begin(), view.end(), std::span<const Dir>(copy).begin()));
    // x[{d}] at depth d+1: iteration i < i' of the innermost level touches other elements, equal
    // iterations the same one.
    Sites s;
    std::vector<int64_t> coeffs(d + 1, 0), extents(d + 1, 2);
    coeffs[d] = 1;
    ir::Affine f;
    f.coeffs = coeffs;
    const auto a = s.site("x", {f}, extents);
    CHECK_FALSE(transforms::may_overlap(a, a, dirs));
    CHECK(transforms::may_overlap(a, a, transforms::eq_dirs(d + 1)));
  }
}

TEST_CASE("may_overlap lets unpaired levels range freely and checks every dimension") {
  Sites s;
  // x[{1}] inside a scope pair: different outer iterations touch the same elements.
  const auto inner = s.site("x", {affine({0, 1})}, {4, 8});
  CHECK(transforms::may_overlap(inner, inner, {Dir::kLt}));
  CHECK_FALSE(transforms::may_overlap(inner, inner, {Dir::kEq, Dir::kLt}));
  // a[i+1, j] against a[i', j'+1] with (<, >): the stencil swap_scopes refuses.
  const auto w = s.site("a", {affine({1}, 1), affine({0, 1})}, {4, 6});
  const auto r = s.site("a", {affine({1}), affine({0, 1}, 1)}, {4, 6}, false);
  CHECK(transforms::may_overlap(w, r, {Dir::kLt, Dir::kGt}));
  CHECK_FALSE(transforms::may_overlap(w, r, {Dir::kLt, Dir::kLt}));
  CHECK_FALSE(transforms::may_overlap(w, r, {Dir::kEq, Dir::kAny}));
}

TEST_CASE("may_depend and find_dependence need one write to the same buffer") {
  Sites s;
  const auto write_x = s.site("x", {affine({1})}, {8}, true);
  const auto read_x = s.site("x", {affine({1})}, {8}, false);
  const auto read_x2 = s.site("x", {affine({1})}, {8}, false);
  const auto write_y = s.site("y", {affine({1})}, {8}, true);
  CHECK(transforms::may_depend(write_x, read_x, {Dir::kEq}));
  CHECK(transforms::may_depend(read_x, write_x, {Dir::kEq}));
  CHECK_FALSE(transforms::may_depend(read_x, read_x2, {Dir::kEq}));
  CHECK_FALSE(transforms::may_depend(write_x, write_y, {Dir::kEq}));
  CHECK_FALSE(transforms::may_depend(write_x, read_x, {Dir::kLt}));

  CHECK(transforms::find_dependence({read_x, write_y}, {write_x}, {Dir::kEq}) ==
        std::optional<std::string>("x"));
  CHECK(transforms::find_dependence({read_x}, {read_x2, write_y}, {Dir::kEq}) == std::nullopt);
  CHECK(transforms::find_dependence({write_x}, {read_x}, {Dir::kLt}) == std::nullopt);
}

// ---------------------------------------------------------------------------------------------
// Action text.

TEST_CASE("every enumerated action on suite kernels reads back as itself") {
  for (const char* kernel : {"matmul-256", "softmax", "conv2d-3x3"}) {
    INFO("kernel ", kernel);
    const ir::Program p = load_kernel(kernel);
    const auto candidates = transforms::enumerate(p, Target{});
    std::set<Kind> kinds;
    std::vector<Action> all;
    for (const auto& c : candidates) {
      const std::string text = transforms::print_action(c.action);
      INFO("action ", text);
      auto r = transforms::parse_action(text);
      REQUIRE_MESSAGE(r.ok(), r.error_text());
      CHECK(*r == c.action);
      kinds.insert(c.action.kind);
      all.push_back(c.action);
    }
    CHECK(static_cast<int>(kinds.size()) == transforms::kNumKinds);
    auto trace = transforms::parse_trace(transforms::print_trace(all));
    REQUIRE_MESSAGE(trace.ok(), trace.error_text());
    CHECK(*trace == all);
  }
}

TEST_CASE("malformed action text is a diagnostic naming the column of the offending token") {
  struct Bad {
    const char* text;
    int col;
    const char* says;
  };
  const Bad cases[] = {
      {"tile_scope x.1 4", 12, "location path"},
      {"frobnicate 0", 1, "unknown action 'frobnicate'"},
      {"tile_scope 0.1", 15, "integer parameter"},
      {"", 1, "action name"},
      {"   # only a comment", 1, "action name"},
      {"tile_scope", 11, "location path"},
      {"tile_scope 0..1 4", 12, "location path"},
      {"tile_scope 1. 4", 12, "location path"},
      {"vectorize -1 8", 11, "location path"},
      {"tile_scope 0.1 four", 16, "integer parameter"},
      {"tile_scope 0.1 99999999999999999999", 16, "integer parameter"},
      {"tile_scope 0.1 4 5", 18, "unexpected '5'"},
      {"parallelize 0 4", 15, "unexpected '4'"},
      {"  unroll 0", 11, "integer parameter"},
      {"split_scope\t0.1\tx", 17, "integer parameter"},
  };
  for (const auto& c : cases) {
    INFO("text '", c.text, "'");
    auto r = transforms::parse_action(c.text, "t.trace", 7);
    REQUIRE_FALSE(r.ok());
    REQUIRE(r.errors().size() == 1);
    const auto& d = r.errors()[0];
    CHECK(d.loc.col == c.col);
    CHECK(d.loc.line == 7);
    CHECK(d.loc.file == "t.trace");
    CHECK(d.message.find(c.says) != std::string::npos);
  }
}

TEST_CASE("a trace skips comments and blank lines and names the line of a bad action") {
  auto ok = transforms::parse_trace("# schedule\n\ntile_scope 0 4   # strip-mine\nunroll 0.0 2\n");
  REQUIRE_MESSAGE(ok.ok(), ok.error_text());
  CHECK(*ok == std::vector<Action>{action("tile_scope 0 4"), action("unroll 0.0 2")});

  auto bad = transforms::parse_trace("tile_scope 0 4\nswap_scopes 0 1\n", "s.trace");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.errors()[0].loc.file == "s.trace");
  CHECK(bad.errors()[0].loc.line == 2);
  CHECK(bad.errors()[0].loc.col == 15);
}

TEST_CASE("replay stops at the first illegal action and names its line and reason") {
  const ir::Program p = load(kOneD + "N y[{0}] = x[{0}]\n");
  auto r = transforms::replay(p, {action("tile_scope 0 4"), action("vectorize 0.0 8")}, Target{});
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors()[0].loc.line == 2);
  CHECK(r.error_text().find("not_divisible") != std::string::npos);
}
