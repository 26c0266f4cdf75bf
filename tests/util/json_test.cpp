// The one JSON module (util/json.h): what it writes reads back, and what it refuses it refuses
// with the position and the reason.
#include "util/json.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

using namespace perfdojo;
using util::json::Document;

namespace {

Document parsed(std::string_view text, const util::JsonParseOptions& o = {}) {
  Document d;
  auto e = util::parse_json(text, &d, o);
  REQUIRE_MESSAGE(!e, e->message());
  return d;
}

util::JsonError refused(std::string_view text, const util::JsonParseOptions& o = {}) {
  Document d;
  auto e = util::parse_json(text, &d, o);
  REQUIRE_MESSAGE(e.has_value(), text);
  CHECK(d.IsNull());  // nothing of the refused text is kept
  return *e;
}

}  // namespace

TEST_CASE("json: a written document reads back") {
  util::JsonWriter w;
  w.begin_object()
      .field("s", "text")
      .field("i", int64_t{-42})
      .field("u", uint64_t{18446744073709551615ULL})
      .field("d", 0.1)
      .field("f", 0.1f)
      .field("b", true);
  w.key("n").null().key("a").begin_array().value(1).begin_object().end_object().end_array();
  w.end_object();
  CHECK(w.str() ==
        "{\"s\":\"text\",\"i\":-42,\"u\":18446744073709551615,\"d\":0.1,\"f\":0.1,\"b\":true,"
        "\"n\":null,\"a\":[1,{}]}");
  Document d = parsed(w.str());
  CHECK(util::json_string(d["s"]) == "text");
  CHECK(d["i"].GetInt64() == -42);
  CHECK(d["u"].GetUint64() == 18446744073709551615ULL);
  CHECK(d["d"].GetDouble() == 0.1);
  CHECK(static_cast<float>(d["f"].GetDouble()) == 0.1f);
  CHECK(d["b"].GetBool());
  CHECK(util::json_member(d, "n") == nullptr);  // null reads as absent
  CHECK(util::json_member(d, "zz") == nullptr);
  REQUIRE(util::json_member(d, "a") != nullptr);
  CHECK(d["a"].Size() == 2);

  // The builders write the same text the writer does.
  util::JsonObject o;
  o.add("s", "text").add("i", int64_t{-42}).add("d", 0.1).add("b", true);
  o.raw("a", util::JsonArray().add(int64_t{1}).raw("{}").str());
  CHECK(o.str() == "{\"s\":\"text\",\"i\":-42,\"d\":0.1,\"b\":true,\"a\":[1,{}]}");
}

TEST_CASE("json: strings are escaped, unicode kept, invalid UTF-8 replaced") {
  CHECK(util::json_quote("a\"b\\c\n\r\t") == "\"a\\\"b\\\\c\\n\\r\\t\"");
  CHECK(util::json_quote(std::string_view("\x01\x1f\x7f", 3)) == "\"\\u0001\\u001f\\u007f\"");
  CHECK(util::json_quote("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") ==
        "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");  // é € 😀 kept as they are
  CHECK(util::json_quote("\xff") == "\"\\ufffd\"");
  CHECK(util::json_quote("\xc0\xaf") == "\"\\ufffd\\ufffd\"");             // overlong '/'
  CHECK(util::json_quote("\xed\xa0\x80") == "\"\\ufffd\\ufffd\\ufffd\"");  // a surrogate
  CHECK(util::json_quote("\xe2\x82") == "\"\\ufffd\\ufffd\"");             // cut short
  std::string nul("a\0b", 3);
  CHECK(util::json_quote(nul) == "\"a\\u0000b\"");

  // Every byte string survives a round trip once made valid UTF-8.
  std::string all;
  for (int c = 1; c < 128; ++c) all += static_cast<char>(c);
  all += "\xc3\xa9\xf0\x9f\x98\x80";
  Document d = parsed(util::json_quote(all));
  CHECK(util::json_string(d) == all);
  // Escapes in the input, surrogate pairs included, decode to UTF-8; embedded NULs are kept.
  d = parsed("\"\\u00e9\\ud83d\\ude00\\/\\u0000x\"");
  CHECK(util::json_string(d) == std::string("\xc3\xa9\xf0\x9f\x98\x80/\0x", 9));
}

TEST_CASE(
    "json: numbers are shortest-exact; NaN and infinity are written as null, refused on read") {
  CHECK(util::json_number(1.5) == "1.5");
  CHECK(util::json_number(1e300) == "1e+300");
  CHECK(util::json_number(-0.0) == "-0");
  CHECK(util::json_number(std::nan("")) == "null");
  CHECK(util::json_number(std::numeric_limits<double>::infinity()) == "null");
  util::JsonWriter w;
  w.begin_array().value(std::numeric_limits<double>::quiet_NaN());
  w.value(-std::numeric_limits<float>::infinity()).value(0.0f).value(-0.0f).end_array();
  CHECK(w.str() == "[null,null,0,-0]");
  for (double v : {0.1, 1.0 / 3, 2.5e-308, 1.7976931348623157e308, 123456789012345.0})
    CHECK(parsed(util::json_number(v)).GetDouble() == v);
  CHECK(parsed("-9223372036854775808").GetInt64() == std::numeric_limits<int64_t>::min());
  CHECK(refused("NaN").what.find("Invalid value") != std::string::npos);
  refused("Infinity");
  refused("-Infinity");
  refused("01");
  refused("1.");
  refused("1e");
  refused("+1");
  // Numbers kept as text, for readers with their own number rules.
  util::JsonParseOptions text;
  text.numbers_as_strings = true;
  Document d = parsed("{\"a\": 1e-4, \"b\": 32}", text);
  CHECK(util::json_string(d["a"]) == "1e-4");
  CHECK(util::json_string(d["b"]) == "32");
}

TEST_CASE("json: nesting is bounded and the bound is a precise error") {
  util::JsonParseOptions o;
  o.max_depth = 3;
  parsed("[[[1]]]", o);
  parsed("{\"a\":{\"b\":[]}}", o);
  util::JsonError e = refused("[[[[1]]]]", o);
  CHECK(e.too_deep);
  CHECK(e.offset == 3);  // the bracket that opens the fourth level
  CHECK(e.message() == "line 1, column 4 (byte 3): nesting deeper than 3 levels");
  // The default bound holds for a deep document without recursing or allocating per level.
  std::string deep(1000000, '[');
  e = refused(deep);
  CHECK(e.too_deep);
  std::string balanced = std::string(100000, '[') + std::string(100000, ']');
  CHECK(refused(balanced).too_deep);
  o.max_depth = 200000;
  parsed(balanced, o);  // iterative: a deep but allowed document needs no deep stack
}

TEST_CASE("json: truncated and garbled input gives the line, column and what was expected") {
  util::JsonError e = refused("{\n  \"a\": 1,\n  \"b\" 2\n}");
  CHECK(e.line == 3);
  CHECK(e.column == 7);
  CHECK(e.offset == 18);  // the '2' where the colon was expected
  CHECK(e.what == "Missing a colon after a name of object member.");
  CHECK(!e.too_deep);

  e = refused("{\"a\": [1, 2");
  CHECK(e.line == 1);
  CHECK(e.offset == 11);
  CHECK(e.what.find("Missing a comma or ']'") != std::string::npos);

  e = refused("{\"a\": \"unterminated");
  CHECK(e.what.find("Missing a closing quotation mark") != std::string::npos);

  e = refused("");
  CHECK(e.what == "The document is empty.");
  CHECK(e.offset == 0);

  e = refused("{} {}");
  CHECK(e.offset == 3);
  CHECK(e.what.find("not be followed by other values") != std::string::npos);

  refused("{\"a\":1,}");                        // trailing comma
  refused("// c\n{}");                          // comments
  refused("{'a':1}");                           // single quotes
  refused("\"\\x\"");                           // bad escape
  refused("\"\\ud800\"");                       // lone surrogate escape
  refused("\"\xff\"");                          // invalid UTF-8
  refused("\"a\nb\"");                          // raw control character in a string
  refused(std::string_view("{\"a\":1}\0", 8));  // a NUL after the value

  // Whatever bytes come in, the reader answers; it never crashes (a cheap fuzz).
  uint32_t x = 12345;
  const std::string alphabet = "{}[]\":,0123456789.eE+-tfnrul\\ \n\xc3\xa9\xff";
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const int len = static_cast<int>(x % 24);
    for (int k = 0; k < len; ++k) {
      x = x * 1664525u + 1013904223u;
      s += alphabet[(x >> 16) % alphabet.size()];
    }
    x = x * 1664525u + 1013904223u;
    Document d;
    auto err = util::parse_json(s, &d);
    if (err) CHECK(err->offset <= s.size());
  }
}

TEST_CASE("json: numbers are read exactly, including the ones rapidjson's own path mishandles") {
  Document d;
  REQUIRE_FALSE(
      util::parse_json("[0E76, 0e-5, -0.0, 1e-400, 0.1, 123456789012345678901234567890,"
                       " -5, 4294967295, 4294967296, -2147483649, 2.5e-308]",
                       &d));
  const auto& a = d.GetArray();
  CHECK(a[0].GetDouble() == 0.0);  // 0E76: undefined behaviour in rapidjson's full precision
  CHECK(a[1].GetDouble() == 0.0);
  CHECK(std::signbit(a[2].GetDouble()));
  CHECK(a[3].GetDouble() == 0.0);  // underflow reads as zero
  CHECK(a[4].GetDouble() == 0.1);  // correctly rounded
  CHECK(a[5].GetDouble() == 123456789012345678901234567890.0);
  CHECK(a[6].IsInt());
  CHECK(a[6].GetInt() == -5);
  CHECK(a[7].IsUint());
  CHECK(a[7].GetUint() == 4294967295u);
  CHECK(a[8].IsUint64());
  CHECK(a[9].IsInt64());
  CHECK(a[9].GetInt64() == -2147483649LL);
  CHECK(a[10].GetDouble() == 2.5e-308);
  auto e = util::parse_json("{\"x\": 1e400}", &d);
  REQUIRE(e);
  CHECK(e->what.find("Number too big") != std::string::npos);
  e = util::parse_json("{\"x\": 1" + std::string(400, '0') + "}", &d);
  REQUIRE(e);
  CHECK(e->what.find("Number too big") != std::string::npos);
  CHECK_FALSE(util::parse_json("0." + std::string(400, '0') + "1", &d));
  CHECK(d.GetDouble() == 0.0);
}
