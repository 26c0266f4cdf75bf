// The dependence test the loop-structure transformations rely on: may_overlap, may_depend,
// find_dependence and direction lists.
#include <memory>
#include <span>

#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

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
