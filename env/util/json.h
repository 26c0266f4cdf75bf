// The one JSON module: every reader and writer of JSON text in the project goes through it (the
// bridge protocol, the CLI's --json output, the agents' config/metrics/summaries, the machine
// profile, the benchmarks).
//
// Writing: JsonWriter streams a document onto a string (the bridge's replies, the hot path);
// JsonObject/JsonArray build small objects from pre-rendered values (reports). Both escape
// strings the same way (control characters as \u00XX, invalid UTF-8 as U+FFFD, so the output is
// always valid JSON) and write numbers shortest-exact. Policy for non-finite numbers: JSON has no
// NaN or infinity, so they are written as null.
//
// Reading: parse_json() fills a rapidjson document (the rapidjson that cereal already depends
// on: Debian's libcereal-dev uses the system rapidjson-dev, upstream cereal bundles a copy, so no
// new dependency). It is compiled into a namespace of its own, with assertions that throw, so
// its templates never clash with cereal's instantiations and a missed type check cannot abort
// the program. Do not include cereal/archives/json.hpp in the same translation unit. The reader
// is strict: NaN, Infinity, comments and trailing commas are refused; invalid UTF-8 is refused;
// numbers are read at full precision (what JsonWriter wrote reads back to the same double);
// nesting is bounded; the parse is iterative (no recursion on hostile input) and allocates in
// proportion to the text. Errors give the byte offset, line and column, and what was expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#define RAPIDJSON_HAS_STDSTRING 1
#define RAPIDJSON_ASSERT_THROWS 1
#define RAPIDJSON_ASSERT(x) \
  if (!(x)) throw std::logic_error("rapidjson assertion failed: " #x)

#if __has_include(<rapidjson/document.h>)
#define RAPIDJSON_NAMESPACE perfdojo_rapidjson
#define RAPIDJSON_NAMESPACE_BEGIN namespace perfdojo_rapidjson {
#define RAPIDJSON_NAMESPACE_END }
#include <rapidjson/document.h>
#else
#define CEREAL_RAPIDJSON_NAMESPACE perfdojo_rapidjson
#define CEREAL_RAPIDJSON_NAMESPACE_BEGIN namespace perfdojo_rapidjson {
#define CEREAL_RAPIDJSON_NAMESPACE_END }
#define CEREAL_RAPIDJSON_ASSERT(x) RAPIDJSON_ASSERT(x)
#include <cereal/external/rapidjson/document.h>
#endif

namespace perfdojo::util {

/// The parsed-document types (json::Document, json::Value, json::kObjectType, ...).
namespace json = ::perfdojo_rapidjson;

// ---------------------------------------------------------------- writing

/// Writes `s` as a JSON string literal (quotes included) onto `out`.
void append_json_string(std::string& out, std::string_view s);
/// `s` as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);
/// A JSON number, shortest text that reads back exactly; non-finite values become null.
std::string json_number(double v);

/// Appends JSON text: numbers shortest-exact, strings escaped (invalid UTF-8 becomes U+FFFD).
class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  /// An object key; the next call writes its value.
  JsonWriter& key(std::string_view k);
  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b);
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(int64_t v);
  JsonWriter& value(uint64_t v);
  /// Non-finite doubles become null (JSON has no NaN or infinity).
  JsonWriter& value(double v);
  /// The shortest text that reads back (as a double, then rounded) to exactly `v`.
  JsonWriter& value(float v);
  JsonWriter& null();
  /// Inserts pre-rendered JSON as one value.
  JsonWriter& raw(std::string_view json);
  /// Shorthand for key(k).value(v).
  template <class T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }
  /// Reserves room for `n` bytes of output.
  JsonWriter& reserve(size_t n) {
    out_.reserve(n);
    return *this;
  }
  /// The text written so far.
  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void separate();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

/// Builds one JSON object from pre-rendered values: `JsonObject o; o.add("k", ...); o.str()`.
class JsonObject {
 public:
  /// Adds a pre-rendered JSON value under `key`.
  JsonObject& raw(std::string_view key, std::string_view json) {
    if (!body_.empty()) body_ += ',';
    append_json_string(body_, key);
    body_ += ':';
    body_ += json;
    return *this;
  }
  JsonObject& add(std::string_view key, std::string_view s) { return raw(key, json_quote(s)); }
  JsonObject& add(std::string_view key, const char* s) { return raw(key, json_quote(s)); }
  JsonObject& add(std::string_view key, const std::string& s) { return raw(key, json_quote(s)); }
  JsonObject& add(std::string_view key, bool b) { return raw(key, b ? "true" : "false"); }
  JsonObject& add(std::string_view key, int64_t v) { return raw(key, std::to_string(v)); }
  JsonObject& add(std::string_view key, int v) { return raw(key, std::to_string(v)); }
  JsonObject& add(std::string_view key, uint64_t v) { return raw(key, std::to_string(v)); }
  JsonObject& add(std::string_view key, double v) { return raw(key, json_number(v)); }
  /// The object's text.
  std::string str() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

/// Builds a JSON array from pre-rendered values.
class JsonArray {
 public:
  JsonArray& raw(std::string_view json) {
    if (!body_.empty()) body_ += ',';
    body_ += json;
    return *this;
  }
  JsonArray& add(std::string_view s) { return raw(json_quote(s)); }
  JsonArray& add(int64_t v) { return raw(std::to_string(v)); }
  std::string str() const { return "[" + body_ + "]"; }

 private:
  std::string body_;
};

// ---------------------------------------------------------------- reading

/// How parse_json reads.
struct JsonParseOptions {
  /// Objects and arrays nested deeper than this are refused (the text is not read further).
  int max_depth = 128;
  /// Numbers are kept as their text (json::Value strings) instead of int/double: for readers
  /// that pass the literal on to their own number parsing.
  bool numbers_as_strings = false;
};

/// Where and why a text is not acceptable JSON.
struct JsonError {
  size_t offset = 0;      ///< byte offset of the problem
  size_t line = 1;        ///< 1-based line of `offset`
  size_t column = 1;      ///< 1-based byte column of `offset`
  std::string what;       ///< what is wrong or was expected ("Missing a comma or '}' ...")
  bool too_deep = false;  ///< the text nests deeper than JsonParseOptions::max_depth
  /// "line L, column C (byte N): what"
  std::string message() const;
};

/// Parses `text` (one JSON value, nothing after it but whitespace) into `*doc`. On failure
/// returns where and why, and `*doc` holds no part of the text.
std::optional<JsonError> parse_json(std::string_view text, json::Document* doc,
                                    const JsonParseOptions& options = {});

/// The member `name` of `obj`, or nullptr when `obj` is not an object, lacks it, or it is null.
const json::Value* json_member(const json::Value& obj, std::string_view name);

/// A string value's bytes (embedded NULs included). `v` must be a string.
inline std::string_view json_string(const json::Value& v) {
  return std::string_view(v.GetString(), v.GetStringLength());
}

}  // namespace perfdojo::util
