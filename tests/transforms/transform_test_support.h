// Shared helpers of the transformation tests (tests/transforms/<transformation>_test.cpp and
// the tests across transformations): programs from text, actions, comparing outputs, the
// refusal and acceptance tables, and the one golden runner.
//
// Golden files: tests/data/golden/<transformation>/<case>.before.pdj, <case>.trace (one action
// per line, as print_action prints it) and <case>.after.pdj (the exact canonical text replaying
// the trace must print). check_golden_folder() replays every case of one folder; each
// <transformation>_test.cpp runs its own folder (label "golden"), and golden_test.cpp checks
// that the folders are exactly the transformations. Set PERFDOJO_UPDATE_GOLDEN=1 to rewrite the
// .after.pdj files from the current implementation (then review the diff). The loop-structure
// cases' .after.pdj were written by hand from the transformation's documented effect and only
// then compared with what the code produces.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ir/check.h"
#include "ir/interp.h"
#include "ir/ir.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "transforms/action.h"
#include "transforms/analysis.h"
#include "transforms/registry.h"

namespace perfdojo::transforms_test {

namespace fs = std::filesystem;
using transforms::Action;
using transforms::Dir;
using transforms::Kind;
using transforms::Legality;
using transforms::Reason;
using transforms::Target;

// The loop-structure transformations, in registry order.
inline const std::vector<std::string> kScopeTransforms = {
    "tile_scope",     "join_nested", "swap_scopes", "join_scopes", "split_scope",
    "move_statement", "vectorize",   "unroll",      "parallelize"};

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline fs::path golden_dir() { return fs::path(PERFDOJO_TEST_DATA_DIR) / "golden"; }

inline bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

inline std::vector<fs::path> sorted_entries(const fs::path& dir, bool directories) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() == directories) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

/// Case names (file names without ".before.pdj") of one golden folder.
inline std::vector<std::string> golden_cases(const fs::path& folder) {
  std::vector<std::string> out;
  constexpr std::string_view kBefore = ".before.pdj";
  for (const auto& f : sorted_entries(folder, false)) {
    std::string name = f.filename().string();
    if (ends_with(name, kBefore)) out.push_back(name.substr(0, name.size() - kBefore.size()));
  }
  return out;
}

inline ir::Program load(std::string_view text, std::string_view file = "<test>") {
  auto r = ir::load_program(text, file);
  REQUIRE_MESSAGE(r.ok(), r.error_text() << "\nin:\n" << text);
  return r.value();
}

inline ir::Program load_kernel(const std::string& name) {
  auto r = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/" + name + ".pdj");
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return r.value();
}

inline Action action(std::string_view text) {
  auto r = transforms::parse_action(text);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return r.value();
}

inline Target no_threads() {
  Target t;
  t.parallel = false;
  return t;
}

inline bool subtree_has_reduction(const ir::Node& n) {
  if (!n.is_scope) return n.stmt.op != ir::Reduce::kNone;
  return std::any_of(n.body.begin(), n.body.end(),
                     [](const ir::NodePtr& c) { return subtree_has_reduction(*c); });
}

/// Whether applying `a` to `p` vectorises a scope holding a reduction (which reassociates it).
inline bool vectorizes_a_reduction(const ir::Program& p, const Action& a) {
  if (a.kind != Kind::kVectorize) return false;
  const ir::Node* n = transforms::node_at(p, a.path);
  return n && subtree_has_reduction(*n);
}

/// Largest error over the outputs of `before` between running `before` and `after` on the
/// same generated inputs.
inline double output_error(const ir::Program& before, const ir::Program& after, uint64_t seed) {
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
inline ir::Program without_annotation(const ir::Program& p, const transforms::Path& path) {
  const ir::Node* n = transforms::node_at(p, path);
  REQUIRE(n);
  REQUIRE(n->is_scope);
  return transforms::replace_node(p, path, {ir::Node::scope_like(*n, ir::Annot::kNone, n->body)});
}

// Applies the actions in order; each must be legal.
inline ir::Program apply_all(const ir::Program& p, const std::vector<std::string>& actions) {
  ir::Program cur = p;
  for (const auto& text : actions) {
    auto r = transforms::apply(cur, action(text), transforms::Target{});
    REQUIRE_MESSAGE(r.ok(), text << ": " << r.error_text() << "\n" << ir::print_program(cur));
    cur = std::move(r).value();
  }
  return cur;
}

// Every output of `after` equals `before`'s bit for bit, on several input seeds.
inline void require_same_outputs(const ir::Program& before, const ir::Program& after) {
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
inline int64_t temp_elements(const ir::Program& p) {
  int64_t n = 0;
  for (const auto& b : p.buffers)
    if (b.role == ir::Role::kTemp) n += b.elements();
  return n;
}

// The action is refused for `reason` (on `buffer` when given), by check and by apply.
inline void require_refused(const ir::Program& p, const std::string& text, Reason reason,
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

inline void require_refused(std::string_view program, const std::string& text, Reason reason,
                            const std::string& buffer = "") {
  require_refused(load(program), text, reason, buffer);
}

/// Replays every golden case of one transformation's folder: the trace turns the before file
/// into exactly the text of the after file, which reads back as the same program; applying the
/// actions one at a time gives the same program; the result checks; and every output equals the
/// before program's on several seeds (bit for bit, or within 1e-5 where a vectorised reduction
/// reassociates a sum). An incomplete case fails, but the remaining cases still run.
inline void check_golden_folder(const std::string& transformation) {
  const fs::path folder = golden_dir() / transformation;
  REQUIRE_MESSAGE(fs::is_directory(folder), "no golden folder " << folder.string());
  const auto cases = golden_cases(folder);
  REQUIRE_MESSAGE(!cases.empty(), "no golden cases in " << folder.string());
  const bool update = std::getenv("PERFDOJO_UPDATE_GOLDEN") != nullptr;
  for (const auto& name : cases) {
    const fs::path base = folder / name;
    INFO("golden case ", transformation, "/", name);
    const fs::path trace_path = base.string() + ".trace";
    const fs::path after_path = base.string() + ".after.pdj";
    const bool complete = fs::exists(trace_path) && (update || fs::exists(after_path));
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
    const std::string printed = ir::print_program(*result);
    if (update) std::ofstream(after_path, std::ios::binary) << printed;
    CHECK(printed == read_text(after_path));
    CHECK_FALSE(ir::structurally_equal(*result, *before));

    auto after = ir::load_file(after_path.string());
    REQUIRE_MESSAGE(after.ok(), after.error_text());
    CHECK(ir::structurally_equal(*after, *result));
    // The printed text is itself a valid program equal to the replayed one.
    CHECK(ir::structurally_equal(load(printed), *result));
    const auto errors = ir::check_program(*result);
    REQUIRE_MESSAGE(errors.empty(), errors[0].str() << "\n" << printed);

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

    for (uint64_t seed : {1u, 2u, 7u, 1234u}) {
      INFO("seed ", seed);
      const double err = output_error(*before, *result, seed);
      if (reassociates) {
        CHECK(err <= 1e-5);
      } else {
        CHECK(err == 0);
      }
    }
  }
}

// Programs the loop-structure tables and tests share (their bodies follow).
inline const std::string kOneD =
    "N = 8\n"
    "input x: f32[N]\n"
    "output y: f32[N]\n"
    "output z: f32[N]\n\n";
inline const std::string kTwoD =
    "input x: f32[4, 8]\n"
    "output y: f32[4, 8]\n"
    "output z: f32[4]\n\n";
inline const std::string kSquare =
    "input x: f32[8, 8]\n"
    "output y: f32[8, 8]\n\n";
inline const std::string kFlat =
    "input x: f32[32]\n"
    "output y: f32[32]\n"
    "output z: f32[4]\n\n";
inline const std::string kMatmul =
    "M = 4\n"
    "N = 8\n"
    "K = 6\n"
    "input A: f32[M, K]\n"
    "input B: f32[K, N]\n"
    "output C: f32[M, N] = 0\n\n"
    "M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n";
inline const std::string kSixteen =
    "input x: f32[16]\n"
    "input x2: f32[32]\n"
    "input m: f32[16, 4]\n"
    "output y: f32[16]\n"
    "output a: f32[17] = 0\n"
    "output s: f32[1] = 0\n\n";
inline const std::string kRows =
    "B = 4\n"
    "N = 8\n"
    "input s: f32[B, N]\n"
    "output m: f32[B] = -inf\n"
    "output t: f32[B]\n\n";

inline const std::string kOneScope = kOneD + "N y[{0}] = x[{0}]\n";
inline const std::string kTwoScopes = kOneD + "N y[{0}] = x[{0}]\nN z[{0}] = x[{0}]\n";
inline const std::string kTwoChildren = kOneD + "N y[{0}] = x[{0}]\n| z[{0}] = x[{0}]\n";
inline const std::string kTiledFlat = kFlat + "4 8 y[{0}*8+{1}] = x[{0}*8+{1}]\n";

// Programs the buffer transformations' tests share.
/// A temporary no statement uses.
inline constexpr const char* kUnusedTemp = R"(N = 8
input x: f32[N]
output y: f32[N]
temp t: f32[N]

N y[{0}] = x[{0}]
)";

inline constexpr const char* kPipeline = R"(N = 8
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

inline constexpr const char* kFusedSoftmax = R"(B = 4
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

/// An action a loop-structure transformation must refuse, and the reason it must give (each
/// <transformation>_test.cpp lists and runs its own; legality_test.cpp checks they cover every
/// reason).
struct Refusal {
  const char* why;
  std::string program;
  const char* action;
  Reason reason;
  const char* buffer = "";  ///< the buffer the verdict must name, if any
  Target target = {};
  std::optional<int64_t> param = std::nullopt;  ///< forced parameter (text cannot carry it)
};

/// A legal counterpart: accepted, and the result computes what the original computed.
struct Acceptance {
  const char* why;
  std::string program;
  const char* action;
};

/// Each refused action names its reason, is refused by apply and leaves the program untouched.
inline void check_refusals(const std::vector<Refusal>& cases) {
  CHECK_FALSE(cases.empty());
  for (const auto& c : cases) {
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

/// Each legal counterpart is accepted, and its result computes what the original computed
/// (exactly, or within 1e-5 where vectorising a reduction reassociates it).
inline void check_acceptances(const std::vector<Acceptance>& cases) {
  CHECK_FALSE(cases.empty());
  for (const auto& c : cases) {
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

// Defined in <transformation>_test.cpp.
std::vector<Refusal> tile_scope_refusals();
std::vector<Refusal> join_nested_refusals();
std::vector<Refusal> swap_scopes_refusals();
std::vector<Refusal> join_scopes_refusals();
std::vector<Refusal> split_scope_refusals();
std::vector<Refusal> move_statement_refusals();
std::vector<Refusal> vectorize_refusals();
std::vector<Refusal> unroll_refusals();
std::vector<Refusal> parallelize_refusals();
std::vector<Refusal> split_range_refusals();
std::vector<Acceptance> tile_scope_acceptances();
std::vector<Acceptance> join_nested_acceptances();
std::vector<Acceptance> swap_scopes_acceptances();
std::vector<Acceptance> join_scopes_acceptances();
std::vector<Acceptance> split_scope_acceptances();
std::vector<Acceptance> move_statement_acceptances();
std::vector<Acceptance> vectorize_acceptances();
std::vector<Acceptance> unroll_acceptances();
std::vector<Acceptance> parallelize_acceptances();
std::vector<Acceptance> split_range_acceptances();

}  // namespace perfdojo::transforms_test
