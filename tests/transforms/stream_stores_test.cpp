// stream_stores: its golden cases, every refusal with its reason, and the declaration's text.
#include <doctest/doctest.h>

#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "transforms/registry.h"
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using transforms::Reason;

namespace {

ir::Program program(const char* text) {
  auto p = ir::load_program(text);
  REQUIRE_MESSAGE(p.ok(), p.error_text());
  return p.value();
}

Reason verdict(const ir::Program& p, const char* action,
               const transforms::Target& t = transforms::Target{}) {
  auto a = transforms::parse_action(action);
  REQUIRE(a.ok());
  return transforms::check(p, a.value(), t).reason;
}

// y is written once and never read; s is a reduction's target; t is read back; u is declared
// and never written.
constexpr const char* kKinds = R"(N = 64
input a: f32[N]
output y: f32[N]
output s: f32[1] = 0
output u: f32[N] = 0
temp t: f32[N]

N t[{0}] = a[{0}] * 2
N:vec y[{0}] = t[{0}] + 1
N s[0] += a[{0}]
)";

}  // namespace

TEST_CASE("stream_stores replays its golden cases exactly and keeps every output" *
          doctest::test_suite("golden")) {
  transforms_test::check_golden_folder("stream_stores");
}

TEST_CASE(
    "stream_stores refuses what is not written, what is read back, and what already streams") {
  const ir::Program p = program(kKinds);
  CHECK(verdict(p, "stream_stores y") == Reason::kOk);
  CHECK(verdict(p, "stream_stores nope") == Reason::kNoSuchLocation);
  CHECK(verdict(p, "stream_stores a") == Reason::kNotWritten);  // an input
  CHECK(verdict(p, "stream_stores u") == Reason::kNotWritten);  // only its initial value
  CHECK(verdict(p, "stream_stores t") == Reason::kReadBack);    // loaded by y's statement
  CHECK(verdict(p, "stream_stores s") == Reason::kReadBack);    // += reads its target
  auto q = transforms::replay(p, transforms::parse_trace("stream_stores y\n").value(),
                              transforms::Target{});
  REQUIRE(q.ok());
  CHECK(q->find_buffer("y")->stream);
  CHECK(verdict(q.value(), "stream_stores y") == Reason::kNothingToDo);
}

TEST_CASE("stream_stores needs a target with non-temporal vector stores") {
  const ir::Program p = program(kKinds);
  for (const char* name : {"aarch64_neon", "aarch64_sve", "riscv64_rvv", "cuda", "x86_64"}) {
    INFO(name);
    CHECK(verdict(p, "stream_stores y", *transforms::target_by_name(name)) ==
          Reason::kUnsupportedByTarget);
  }
  for (const char* name : {"x86_avx512", "x86_avx2"}) {
    INFO(name);
    CHECK(verdict(p, "stream_stores y", *transforms::target_by_name(name)) == Reason::kOk);
  }
}

TEST_CASE(
    "`stream` prints last in a declaration, parses back, and takes part in equality and hash") {
  const ir::Program p = program(kKinds);
  auto q = transforms::apply(p, transforms::parse_action("stream_stores y").value(),
                             transforms::Target{});
  REQUIRE(q.ok());
  const std::string text = ir::print_program(q.value());
  CHECK(text.find("output y: f32[N] stream\n") != std::string::npos);
  auto back = ir::load_program(text);
  REQUIRE_MESSAGE(back.ok(), back.error_text());
  CHECK(ir::structurally_equal(back.value(), q.value()));
  CHECK_FALSE(ir::structurally_equal(p, q.value()));
  CHECK(ir::structural_hash(p) != ir::structural_hash(q.value()));
  // An input is never stored to: `stream` there is a parse error at the word.
  auto bad =
      ir::parse_program("N = 4\ninput a: f32[N] stream\noutput b: f32[N]\n\nN b[{0}] = a[{0}]\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.errors()[0].loc.line == 2);
  CHECK(bad.errors()[0].loc.col == 17);
  CHECK(bad.error_text().find("only outputs and temporaries") != std::string::npos);
}
