// The golden files as a whole (tests/data/golden): one folder per transformation, each run by
// its <transformation>_test.cpp, and what the loop-structure folders must contain.
#include <set>

#include "ir/load.h"
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

TEST_CASE("the golden folders are exactly the transformations" * doctest::test_suite("golden")) {
  REQUIRE(fs::is_directory(golden_dir()));
  std::set<std::string> folders, kinds;
  for (const auto& f : sorted_entries(golden_dir(), true)) folders.insert(f.filename().string());
  for (int k = 0; k < transforms::kNumKinds; ++k)
    kinds.insert(transforms::kind_name(static_cast<Kind>(k)));
  CHECK(folders == kinds);
}

TEST_CASE("every loop-structure transformation has golden cases that use it" *
          doctest::test_suite("golden")) {
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
    "first" *
    doctest::test_suite("golden")) {
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
