// Action text: printing and parsing actions and traces, their diagnostics, and replay.
#include <set>

#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

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
