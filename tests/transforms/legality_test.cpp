// The legality checks across the loop-structure transformations: the refusal cases of the
// <transformation>_test.cpp files (each runs its own) cover every reason, paths that lead nowhere
// are refused by all, and the suite kernels' classic first steps.
#include <set>
#include <utility>
#include <vector>

#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

namespace {

std::vector<Refusal> refusals() {
  std::vector<Refusal> all;
  for (auto part :
       {tile_scope_refusals, join_nested_refusals, swap_scopes_refusals, join_scopes_refusals,
        split_scope_refusals, move_statement_refusals, vectorize_refusals, unroll_refusals,
        parallelize_refusals, split_range_refusals})
    for (auto& r : part()) all.push_back(std::move(r));
  return all;
}

}  // namespace

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
      {Kind::kSplitRange,
       {Reason::kNoSuchLocation, Reason::kNotAScope, Reason::kAnnotated, Reason::kBadParameter,
        Reason::kNothingToDo}},
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
