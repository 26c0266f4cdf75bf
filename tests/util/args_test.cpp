// The one command-line parser (util/args.h): which words are options, values and switches, what
// it refuses and how it says so, and the typed getters' range errors.
#include "util/args.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

using namespace perfdojo;

namespace {

util::ArgSpec demo_spec() {
  util::ArgSpec spec;
  spec.program = "demo";
  spec.value_options = {"seeds", "out", "rate", "budgets"};
  spec.switch_options = {"quick"};
  spec.bool_options = {"curriculum"};
  spec.aliases = {{"steps", "seeds"}};
  return spec;
}

std::string parse(const std::vector<std::string>& words, util::Args* out,
                  util::ArgSpec spec = demo_spec()) {
  return util::parse_args(spec, words, out);
}

}  // namespace

TEST_CASE("args: --name value and --name=value give the same value; switches and aliases") {
  util::Args a;
  REQUIRE(parse({"--seeds", "3", "--out=runs/x", "--quick"}, &a) == "");
  CHECK(a.get("seeds") == "3");
  CHECK(a.get("out") == "runs/x");
  CHECK(a.flags.count("quick") == 1);
  CHECK(a.has("quick"));
  CHECK_FALSE(a.has("rate"));
  CHECK(a.get("rate", "0.5") == "0.5");
  CHECK_FALSE(a.json);
  CHECK_FALSE(a.help);

  // A value may hold '=' and start with one dash; an alias lands under the option's name.
  REQUIRE(parse({"--out=a=b", "--rate", "-1", "--steps=7"}, &a) == "");
  CHECK(a.get("out") == "a=b");
  CHECK(a.get("rate") == "-1");
  CHECK(a.get("seeds") == "7");
  CHECK_FALSE(a.values.count("steps"));

  // The last of a repeated option wins.
  REQUIRE(parse({"--seeds", "1", "--seeds=2"}, &a) == "");
  CHECK(a.get("seeds") == "2");
}

TEST_CASE("args: unknown options, missing values and stray words are refused by name") {
  util::Args a;
  std::string e = parse({"--seeds", "3", "--frobnicate"}, &a);
  CHECK(e.find("unknown option --frobnicate") != std::string::npos);
  CHECK(e.find("'demo'") != std::string::npos);
  CHECK(e.find("(demo --help)") != std::string::npos);  // no usage line: point at --help

  e = parse({"--seeds"}, &a);
  CHECK(e.find("option --seeds needs a value") != std::string::npos);

  // A following option is not taken as the value.
  e = parse({"--out", "--quick"}, &a);
  CHECK(e.find("option --out needs a value, found '--quick'") != std::string::npos);

  // A switch given a value is refused, not ignored.
  e = parse({"--quick=yes"}, &a);
  CHECK(e.find("option --quick is a switch") != std::string::npos);
  CHECK(e.find("--quick=yes") != std::string::npos);
  e = parse({"--json=1"}, &a);
  CHECK(e.find("option --json is a switch") != std::string::npos);

  // Words that are not options, where the program takes none.
  e = parse({"stray"}, &a);
  CHECK(e.find("unexpected argument 'stray'") != std::string::npos);

  // With a usage line, errors quote it.
  util::ArgSpec spec = demo_spec();
  spec.usage = "demo [--seeds N]";
  e = parse({"--nope"}, &a, spec);
  CHECK(e.find("(usage: demo [--seeds N])") != std::string::npos);
}

TEST_CASE("args: positional words, '--', --json anywhere and --help") {
  util::ArgSpec spec = demo_spec();
  spec.positional = true;
  util::Args a;
  REQUIRE(parse({"a.pdj", "-", "--quick", "-3", "--", "--seeds", "b"}, &a, spec) == "");
  CHECK(a.positional == std::vector<std::string>{"a.pdj", "-", "-3", "--seeds", "b"});
  CHECK(a.flags.count("quick") == 1);
  CHECK_FALSE(a.values.count("seeds"));

  // --json is known even when the command line is refused, so the error can be JSON.
  std::string e = parse({"--frobnicate", "--json"}, &a);
  CHECK_FALSE(e.empty());
  CHECK(a.json);

  REQUIRE(parse({"--seeds", "3", "-h", "--frobnicate"}, &a) == "");
  CHECK(a.help);  // parsing stops at --help
  REQUIRE(parse({"--help"}, &a) == "");
  CHECK(a.help);

  // A program with a --json FILE option of its own gets no --json switch.
  spec = demo_spec();
  spec.value_options.insert("json");
  REQUIRE(parse({"--json", "out.json"}, &a, spec) == "");
  CHECK_FALSE(a.json);
  CHECK(a.get("json") == "out.json");
  CHECK(parse({"--json"}, &a, spec).find("option --json needs a value") != std::string::npos);
}

TEST_CASE("args: bool options take true/false/0/1 after them, or nothing") {
  util::Args a;
  REQUIRE(parse({"--curriculum"}, &a) == "");
  CHECK(a.get("curriculum") == "true");
  REQUIRE(parse({"--curriculum", "false", "--quick"}, &a) == "");
  CHECK(a.get("curriculum") == "false");
  REQUIRE(parse({"--curriculum=0"}, &a) == "");
  CHECK(a.get("curriculum") == "0");
  // Any other word after it is not its value.
  CHECK(parse({"--curriculum", "maybe"}, &a).find("unexpected argument 'maybe'") !=
        std::string::npos);
}

TEST_CASE("args: typed getters read a number once, in range, or say which option and why") {
  util::Args a;
  REQUIRE(parse({"--seeds", "12", "--rate", "0.25", "--budgets", "10,100,1000"}, &a) == "");
  int seeds = 3;
  CHECK(a.get_int("seeds", 1, 100, &seeds) == "");
  CHECK(seeds == 12);
  double rate = 1;
  CHECK(a.get_double("rate", 0, 1, &rate) == "");
  CHECK(rate == 0.25);
  std::vector<int> budgets;
  CHECK(a.get_int_list("budgets", 1, 1000000, &budgets) == "");
  CHECK(budgets == std::vector<int>{10, 100, 1000});

  // Absent: the default stays.
  int64_t absent = 42;
  CHECK(a.get_int("out", 0, 100, &absent) == "");
  CHECK(absent == 42);

  // Out of range, not a number, trailing text: refused with the option, the range and the text.
  CHECK(a.get_int("seeds", 1, 10, &seeds) == "--seeds must be an integer in [1, 10], got '12'");
  CHECK(seeds == 12);  // left as it was
  for (const char* bad : {"12x", "", " 3", "1.5", "99999999999999999999"}) {
    REQUIRE(parse({"--seeds", bad}, &a) == "");
    CHECK(a.get_int("seeds", 1, 100, &seeds) ==
          "--seeds must be an integer in [1, 100], got '" + std::string(bad) + "'");
  }
  for (const char* bad : {"-0.5", "many", "nan", "inf", "0.5s"}) {
    REQUIRE(parse({"--rate", bad}, &a) == "");
    CHECK(a.get_double("rate", 0, 1, &rate) ==
          "--rate must be a number in [0, 1], got '" + std::string(bad) + "'");
  }
  CHECK(rate == 0.25);
  for (const char* bad : {"10,,100", "10,", "10,x", "0,10", ""}) {
    REQUIRE(parse({"--budgets=" + std::string(bad)}, &a) == "");
    CHECK(a.get_int_list("budgets", 1, 1000, &budgets) ==
          "--budgets must be comma-separated integers in [1, 1000], got '" + std::string(bad) +
              "'");
  }
  CHECK(budgets == std::vector<int>{10, 100, 1000});
}
