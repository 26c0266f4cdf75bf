// clear_annotation: its refusals, and what it reopens. Golden cases:
// tests/data/golden/clear_annotation.
#include <doctest/doctest.h>

#include "ir/parse.h"
#include "transforms/registry.h"

using namespace perfdojo;
using transforms::Reason;

namespace {

ir::Program program(const char* text) {
  auto p = ir::parse_program(text);
  REQUIRE_MESSAGE(p.ok(), p.error_text());
  return p.value();
}

Reason verdict(const ir::Program& p, const char* action) {
  auto a = transforms::parse_action(action);
  REQUIRE(a.ok());
  return transforms::check(p, a.value(), transforms::Target{}).reason;
}

constexpr const char* kAnnotatedRows = R"(M = 16
N = 8
input a: f32[M, N]
output b: f32[M, N]

M:par N:vec b[{0},{1}] = a[{0},{1}] + 1
)";

}  // namespace

TEST_CASE("clear_annotation refuses a path that does not exist or names a statement") {
  const ir::Program p = program(kAnnotatedRows);
  CHECK(verdict(p, "clear_annotation 1") == Reason::kNoSuchLocation);
  CHECK(verdict(p, "clear_annotation 0.0.0") == Reason::kNotAScope);
}

TEST_CASE("clear_annotation refuses a plain scope: there is nothing to clear") {
  const ir::Program p = program(R"(N = 8
input a: f32[N]
output b: f32[N]

N b[{0}] = a[{0}]
)");
  CHECK(verdict(p, "clear_annotation 0") == Reason::kNothingToDo);
}

TEST_CASE("clear_annotation reopens a finalised scope to the moves that refuse annotations") {
  const ir::Program p = program(kAnnotatedRows);
  CHECK(verdict(p, "tile_scope 0 4") == Reason::kAnnotated);
  CHECK(verdict(p, "clear_annotation 0") == Reason::kOk);
  CHECK(verdict(p, "clear_annotation 0.0") == Reason::kOk);
  auto q = transforms::replay(
      p, transforms::parse_trace("clear_annotation 0\nclear_annotation 0.0\n").value(),
      transforms::Target{});
  REQUIRE(q.ok());
  CHECK(q->body[0]->annot == ir::Annot::kNone);
  CHECK(q->body[0]->body[0]->annot == ir::Annot::kNone);
  CHECK(verdict(q.value(), "tile_scope 0 4") == Reason::kOk);
  CHECK(verdict(p, "swap_scopes 0") == Reason::kAnnotated);
  CHECK(verdict(q.value(), "swap_scopes 0") == Reason::kOk);
}
