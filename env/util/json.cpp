#include "util/json.h"

#include <limits>
#include <system_error>

#if __has_include(<rapidjson/error/en.h>)
#include <rapidjson/error/en.h>
#else
#include <cereal/external/rapidjson/error/en.h>
#endif

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace perfdojo::util {

// ---------------------------------------------------------------- writing

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t len;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;  // overlong, beyond Unicode, or a surrogate
  return len;
}

template <class T>
void append_chars(std::string& out, T v) {
  std::array<char, 64> buf;
  auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  out.append(buf.data(), r.ptr);
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    if (size_t len = utf8_sequence(s, i)) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += "\\ufffd";  // keep the output valid JSON whatever bytes a user's kernel holds
      ++i;
    }
  }
  out += '"';
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_json_string(out, s);
  return out;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::string out;
  append_chars(out, v);
  return out;
}

void JsonWriter::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  separate();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  separate();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view k) {
  separate();
  append_json_string(out_, k);
  out_ += ':';
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
  separate();
  append_json_string(out_, s);
  return *this;
}

JsonWriter& JsonWriter::value(bool b) {
  separate();
  out_ += b ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::value(int64_t v) {
  separate();
  append_chars(out_, v);
  return *this;
}

JsonWriter& JsonWriter::value(uint64_t v) {
  separate();
  append_chars(out_, v);
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  separate();
  if (!std::isfinite(v)) {
    out_ += "null";
  } else {
    append_chars(out_, v);
  }
  return *this;
}

JsonWriter& JsonWriter::value(float v) {
  separate();
  if (v == 0 && !std::signbit(v)) {
    out_ += '0';  // most features are zero
    return *this;
  }
  if (!std::isfinite(v)) {
    out_ += "null";
    return *this;
  }
  // The float's shortest text is short, but a client reads it as a double and rounds to float;
  // when that double rounding would land elsewhere, write the exact double instead.
  std::array<char, 64> buf;
  auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  double back = 0;
  std::from_chars(buf.data(), r.ptr, back);
  if (static_cast<float>(back) == v) {
    out_.append(buf.data(), r.ptr);
  } else {
    append_chars(out_, static_cast<double>(v));
  }
  return *this;
}

JsonWriter& JsonWriter::null() {
  separate();
  out_ += "null";
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
  separate();
  out_ += json;
  return *this;
}

// ---------------------------------------------------------------- reading

namespace {

// Forwards SAX events to a document, refusing nesting deeper than `max_depth`: the reader's
// own stack then stays bounded too.
//
// Numbers arrive as their text (the reader runs with kParseNumbersAsStringsFlag) and are
// converted here: integers as rapidjson would store them, everything else by std::from_chars,
// which rounds correctly (full precision). rapidjson's own full-precision path has undefined
// behaviour on valid input such as 0E76 (clz of 0, then a negative shift): a client of the
// bridge could send it.
struct DepthLimited {
  json::Document& d;
  int max_depth;
  bool numbers_as_strings;
  int depth = 0;
  bool too_deep = false;
  bool too_big = false;

  bool Null() { return d.Null(); }
  bool Bool(bool b) { return d.Bool(b); }
  bool Int(int i) { return d.Int(i); }
  bool Uint(unsigned i) { return d.Uint(i); }
  bool Int64(int64_t i) { return d.Int64(i); }
  bool Uint64(uint64_t i) { return d.Uint64(i); }
  bool Double(double x) { return d.Double(x); }
  bool RawNumber(const char* s, json::SizeType n, bool copy) {
    if (numbers_as_strings) return d.RawNumber(s, n, copy);
    const std::string_view text(s, n);
    const bool minus = !text.empty() && text[0] == '-';
    if (text.find_first_of(".eE") == std::string_view::npos) {
      if (minus) {
        int64_t v = 0;
        auto r = std::from_chars(s, s + n, v);
        if (r.ec == std::errc() && r.ptr == s + n)
          return v >= std::numeric_limits<int>::min() ? d.Int(static_cast<int>(v)) : d.Int64(v);
      } else {
        uint64_t v = 0;
        auto r = std::from_chars(s, s + n, v);
        if (r.ec == std::errc() && r.ptr == s + n)
          return v <= std::numeric_limits<unsigned>::max() ? d.Uint(static_cast<unsigned>(v))
                                                           : d.Uint64(v);
      }
      // Beyond 64 bits: a double, as rapidjson reads it.
    }
    double x = 0;
    auto r = std::from_chars(s, s + n, x);
    if (r.ec == std::errc::result_out_of_range) {
      // Underflow reads as zero (of the right sign); overflow is an error, as in rapidjson.
      bool overflow;
      const auto e = text.find_first_of("eE");
      if (e != std::string_view::npos) {
        overflow = text[e + 1] != '-';
      } else {  // no exponent: too large only with a nonzero digit before the point
        const auto digits = text.substr(minus ? 1 : 0, text.find('.') - (minus ? 1 : 0));
        overflow = digits.find_first_not_of('0') != std::string_view::npos;
      }
      if (overflow) {
        too_big = true;
        return false;
      }
      return d.Double(minus ? -0.0 : 0.0);
    }
    if (r.ec != std::errc() || r.ptr != s + n) return false;
    return d.Double(x);
  }
  bool String(const char* s, json::SizeType n, bool copy) { return d.String(s, n, copy); }
  bool Key(const char* s, json::SizeType n, bool copy) { return d.Key(s, n, copy); }
  bool StartObject() { return enter() && d.StartObject(); }
  bool EndObject(json::SizeType n) {
    --depth;
    return d.EndObject(n);
  }
  bool StartArray() { return enter() && d.StartArray(); }
  bool EndArray(json::SizeType n) {
    --depth;
    return d.EndArray(n);
  }
  bool enter() {
    if (++depth <= max_depth) return true;
    too_deep = true;
    return false;
  }
};

template <unsigned kFlags>
json::ParseResult parse_with(std::string_view text, json::Document* doc, DepthLimited& h) {
  json::MemoryStream ms(text.data(), text.size());
  json::EncodedInputStream<json::UTF8<>, json::MemoryStream> is(ms);
  json::Reader reader;
  json::ParseResult result;
  auto generate = [&](json::Document&) {
    result = reader.Parse<kFlags>(is, h);
    // The reader takes a NUL byte for the end of the text: refuse what follows one.
    if (!result.IsError() && is.Tell() < text.size())
      result.Set(json::kParseErrorDocumentRootNotSingular, is.Tell());
    return !result.IsError();
  };
  doc->Populate(generate);
  return result;
}

}  // namespace

std::string JsonError::message() const {
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + " (byte " +
         std::to_string(offset) + "): " + what;
}

std::optional<JsonError> parse_json(std::string_view text, json::Document* doc,
                                    const JsonParseOptions& options) {
  // Full precision: a double written shortest-exact reads back to the same double (rapidjson's
  // default fast path can be one ulp off); DepthLimited converts the numbers' text itself.
  constexpr unsigned kStrict = json::kParseIterativeFlag | json::kParseValidateEncodingFlag;
  DepthLimited h{*doc, options.max_depth, options.numbers_as_strings};
  doc->SetNull();
  json::ParseResult r = parse_with<kStrict | json::kParseNumbersAsStringsFlag>(text, doc, h);
  if (!r.IsError()) return std::nullopt;
  doc->SetNull();
  JsonError e;
  e.offset = std::min(r.Offset(), text.size());
  for (size_t i = 0; i < e.offset; ++i) {
    if (text[i] == '\n') {
      ++e.line;
      e.column = 1;
    } else {
      ++e.column;
    }
  }
  e.too_deep = h.too_deep;
  if (h.too_deep) {
    e.what = "nesting deeper than " + std::to_string(options.max_depth) + " levels";
  } else if (h.too_big) {
    e.what = json::GetParseError_En(json::kParseErrorNumberTooBig);
  } else {
    e.what = json::GetParseError_En(r.Code());
  }
  return e;
}

const json::Value* json_member(const json::Value& obj, std::string_view name) {
  if (!obj.IsObject()) return nullptr;
  for (const auto& m : obj.GetObject()) {
    if (json_string(m.name) == name) return m.value.IsNull() ? nullptr : &m.value;
  }
  return nullptr;
}

}  // namespace perfdojo::util
