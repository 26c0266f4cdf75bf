// A minimal JSON writer for CLI and report output (no parsing: the bridge brings its own).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "ir/print.h"

namespace perfdojo::util {

/// Escapes `s` as a JSON string literal, quotes included.
inline std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

/// A JSON number; non-finite values become null (JSON has no NaN or infinity).
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  return ir::print_number(v);
}

/// Builds one JSON object or array incrementally: `JsonObject o; o.add("k", ...); o.str()`.
class JsonObject {
 public:
  /// Adds a pre-rendered JSON value under `key`.
  JsonObject& raw(std::string_view key, std::string_view json) {
    body_ += (body_.empty() ? "" : ",") + json_quote(key) + ":" + std::string(json);
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
    body_ += (body_.empty() ? "" : ",") + std::string(json);
    return *this;
  }
  JsonArray& add(std::string_view s) { return raw(json_quote(s)); }
  JsonArray& add(int64_t v) { return raw(std::to_string(v)); }
  std::string str() const { return "[" + body_ + "]"; }

 private:
  std::string body_;
};

}  // namespace perfdojo::util
