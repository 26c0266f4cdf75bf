// Diagnostics the user's input causes: each carries a location and renders as file:line:col.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "ir/ir.h"

namespace perfdojo::ir {

/// One error the caller can fix: where, and what was found versus expected.
struct Diagnostic {
  SourceLoc loc;
  std::string message;
  /// "file:line:col: error: message" (file omitted when empty).
  std::string str() const;
};

/// Either a value or the diagnostics explaining why there is none. Failures are data.
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(std::vector<Diagnostic> errors) : v_(std::move(errors)) {}  // NOLINT
  /// True when a value is held.
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  /// The value; only when ok().
  const T& value() const& { return std::get<0>(v_); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T* operator->() const { return &std::get<0>(v_); }
  const T& operator*() const { return std::get<0>(v_); }
  /// The diagnostics; empty when ok().
  const std::vector<Diagnostic>& errors() const {
    static const std::vector<Diagnostic> kNone;
    return ok() ? kNone : std::get<1>(v_);
  }
  /// All diagnostics joined by newlines.
  std::string error_text() const;

 private:
  std::variant<T, std::vector<Diagnostic>> v_;
};

template <class T>
std::string Result<T>::error_text() const {
  std::string s;
  for (const auto& d : errors()) {
    if (!s.empty()) s += '\n';
    s += d.str();
  }
  return s;
}

}  // namespace perfdojo::ir
