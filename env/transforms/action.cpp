#include "transforms/action.h"

#include <charconv>

namespace perfdojo::transforms {
namespace {

struct KindInfo {
  const char* name;
  LocKind loc;
  ParamKind param;
  Reads reads;
};

constexpr KindInfo kKinds[] = {
#define PERFDOJO_X(e, n, l, p, r) {#n, LocKind::l, ParamKind::p, Reads::r},
    PERFDOJO_TRANSFORM_KINDS(PERFDOJO_X)
#undef PERFDOJO_X
};

struct Word {
  std::string text;
  int col;
};

std::vector<Word> split_words(std::string_view s) {
  std::vector<Word> out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '#') break;
    if (s[i] == ' ' || s[i] == '\t' || s[i] == '\r') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t' && s[j] != '\r' && s[j] != '#') ++j;
    out.push_back({std::string(s.substr(i, j - i)), static_cast<int>(i) + 1});
    i = j;
  }
  return out;
}

bool parse_int(const std::string& s, int64_t& v) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool parse_path(const std::string& s, Path& p) {
  p.clear();
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find('.', i);
    if (j == std::string::npos) j = s.size();
    int64_t v = 0;
    if (!parse_int(s.substr(i, j - i), v) || v < 0 || v > 1'000'000) return false;
    p.push_back(static_cast<int>(v));
    i = j + 1;
    if (j == s.size()) break;
  }
  return !p.empty();
}

bool is_name(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

}  // namespace

const char* kind_name(Kind k) { return kKinds[static_cast<int>(k)].name; }
LocKind loc_kind(Kind k) { return kKinds[static_cast<int>(k)].loc; }
ParamKind param_kind(Kind k) { return kKinds[static_cast<int>(k)].param; }
Reads reads(Kind k) { return kKinds[static_cast<int>(k)].reads; }

const char* reason_name(Reason r) {
  switch (r) {
    case Reason::kOk:
      return "ok";
    case Reason::kNoSuchLocation:
      return "no_such_location";
    case Reason::kNotAScope:
      return "not_a_scope";
    case Reason::kBadParameter:
      return "bad_parameter";
    case Reason::kNotDivisible:
      return "not_divisible";
    case Reason::kAnnotated:
      return "annotated";
    case Reason::kNotPerfectlyNested:
      return "not_perfectly_nested";
    case Reason::kIndexNotMergeable:
      return "index_not_mergeable";
    case Reason::kNoNextSibling:
      return "no_next_sibling";
    case Reason::kExtentMismatch:
      return "extent_mismatch";
    case Reason::kDependence:
      return "dependence";
    case Reason::kNotInnermost:
      return "not_innermost";
    case Reason::kNonContiguous:
      return "non_contiguous";
    case Reason::kUnsupportedByTarget:
      return "unsupported_by_target";
    case Reason::kNestedParallel:
      return "nested_parallel";
    case Reason::kNotATemporary:
      return "not_a_temporary";
    case Reason::kLifetimesOverlap:
      return "lifetimes_overlap";
    case Reason::kShapeMismatch:
      return "shape_mismatch";
    case Reason::kHasInitialValue:
      return "has_initial_value";
    case Reason::kNotInvariant:
      return "not_invariant";
    case Reason::kIrregularAccess:
      return "irregular_access";
    case Reason::kNothingToDo:
      return "nothing_to_do";
    case Reason::kNotWritten:
      return "not_written";
    case Reason::kReadBack:
      return "read_back";
    case Reason::kNonRectangular:
      return "non_rectangular";
    case Reason::kIndirect:
      return "indirect";
  }
  return "?";
}

std::string explain(const Action& a, const Legality& l) {
  std::string what = print_action(a);
  std::string at = l.where.empty() ? "" : " (scope " + print_path(l.where) + ")";
  std::string buf = l.buffer.empty() ? "" : " on buffer '" + l.buffer + "'";
  switch (l.reason) {
    case Reason::kOk:
      return what + ": legal";
    case Reason::kNoSuchLocation:
      return what + ": no such location" + at + buf;
    case Reason::kNotAScope:
      return what + ": the location is a statement, a scope is needed" + at;
    case Reason::kBadParameter:
      return what + ": parameter " + std::to_string(a.param) + " is not allowed here" + at;
    case Reason::kNotDivisible:
      return what + ": " + std::to_string(a.param) + " does not divide the scope's extent" + at;
    case Reason::kAnnotated:
      return what + ": a scope involved is already annotated" + at;
    case Reason::kNotPerfectlyNested:
      return what + ": the scope must contain exactly one scope and nothing else" + at;
    case Reason::kIndexNotMergeable:
      return what + ": an index of" + buf.substr(0) + " does not combine the two iterators as one" +
             at;
    case Reason::kNoNextSibling:
      return what + ": nothing follows it in its scope" + at;
    case Reason::kExtentMismatch:
      return what + ": the two scopes have different extents" + at;
    case Reason::kDependence:
      return what + ": it would break a data dependence" + buf + at;
    case Reason::kNotInnermost:
      return what + ": only an innermost scope can be vectorised" + at;
    case Reason::kNonContiguous:
      return what + ": an access" + buf + " is neither unit-stride nor invariant in the scope" + at;
    case Reason::kUnsupportedByTarget:
      return what + ": the target does not support it" + at;
    case Reason::kNestedParallel:
      return what + ": an enclosing scope is already parallel" + at;
    case Reason::kNotATemporary:
      return what + ": '" + l.buffer + "' is not a temporary";
    case Reason::kLifetimesOverlap:
      return what + ": the buffers are live at the same time";
    case Reason::kShapeMismatch:
      return what + ": the buffers differ in type or shape";
    case Reason::kHasInitialValue:
      return what + ": '" + l.buffer + "' has an initial value that would be lost";
    case Reason::kNotInvariant:
      return what + ": the statement is not invariant in the enclosing scope" + at;
    case Reason::kIrregularAccess:
      return what + ": the accesses" + buf + " do not have the required form" + at;
    case Reason::kNothingToDo:
      return what + ": it would not change the program" + at;
    case Reason::kNotWritten:
      return what + ": no statement stores to '" + l.buffer + "'";
    case Reason::kReadBack:
      return what + ": '" + l.buffer +
             "' is read in the kernel; a streamed store would send it past the cache";
    case Reason::kNonRectangular:
      return what + ": a bounded (non-rectangular) scope is involved" + buf + at +
             ", which this move does not handle";
    case Reason::kIndirect:
      return what + ": the kernel reads through an indirect index" + buf + at +
             ", which this move does not handle yet";
  }
  return what;
}

std::optional<Target> target_by_name(std::string_view name) {
  if (name == "x86_avx512") return Target{"x86_avx512", {16, 8}, true};
  if (name == "x86_avx2") return Target{"x86_avx2", {8}, true};
  if (name == "x86_64") return Target{"x86_64", {}, true, 0, false, false};
  // Cross targets (backends/cross_backend.h): one modelled core, the width of its profile.
  if (name == "aarch64_neon") return Target{"aarch64_neon", {4}, false, 32, false};
  if (name == "aarch64_sve") return Target{"aarch64_sve", {8}, false, 32, false};
  if (name == "riscv64_rvv") return Target{"riscv64_rvv", {2}, false, 32, false};
  if (name == "cuda") return Target{"cuda", {}, true, 0, false};  // parallel scopes: threads
  return std::nullopt;
}

bool target_has_fma(std::string_view name) {
  const auto t = target_by_name(name);
  return !t || t->fma;
}

std::string print_path(const Path& p) {
  std::string s;
  for (size_t i = 0; i < p.size(); ++i) s += (i ? "." : "") + std::to_string(p[i]);
  return s;
}

std::string print_action(const Action& a) {
  std::string s = kind_name(a.kind);
  switch (loc_kind(a.kind)) {
    case LocKind::kScope:
    case LocKind::kNode:
      s += " " + print_path(a.path);
      break;
    case LocKind::kBuffer:
      s += " " + a.buffer;
      break;
    case LocKind::kBufferPair:
      s += " " + a.buffer + " " + a.buffer2;
      break;
    case LocKind::kScopeBuffer:
      s += " " + print_path(a.path) + " " + a.buffer;
      break;
  }
  if (param_kind(a.kind) != ParamKind::kNone) s += " " + std::to_string(a.param);
  return s;
}

ir::Result<Action> parse_action(std::string_view text, std::string_view file_v, int line) {
  std::string file(file_v);
  auto words = split_words(text);
  auto err = [&](int col, std::string msg) {
    return std::vector<ir::Diagnostic>{{{file, line, col}, std::move(msg)}};
  };
  if (words.empty()) return err(1, "expected an action name");
  Action a;
  int k = 0;
  for (; k < kNumKinds; ++k)
    if (words[0].text == kKinds[k].name) break;
  if (k == kNumKinds) {
    std::string names;
    for (const auto& info : kKinds) names += std::string(names.empty() ? "" : ", ") + info.name;
    return err(words[0].col, "unknown action '" + words[0].text + "'; expected one of " + names);
  }
  a.kind = static_cast<Kind>(k);
  size_t next = 1;
  auto need = [&](const char* what) -> const Word* {
    if (next >= words.size()) return nullptr;
    (void)what;
    return &words[next++];
  };
  int end_col = static_cast<int>(text.size()) + 1;
  auto want_path = [&]() -> std::vector<ir::Diagnostic> {
    const Word* w = need("path");
    if (!w) return err(end_col, "expected a location path like 0.1 after '" + words[0].text + "'");
    if (!parse_path(w->text, a.path))
      return err(w->col, "expected a location path like 0.1, found '" + w->text + "'");
    return {};
  };
  auto want_buffer = [&](std::string& out) -> std::vector<ir::Diagnostic> {
    const Word* w = need("buffer");
    if (!w) return err(end_col, "expected a buffer name after '" + words[0].text + "'");
    if (!is_name(w->text)) return err(w->col, "expected a buffer name, found '" + w->text + "'");
    out = w->text;
    return {};
  };
  std::vector<ir::Diagnostic> e;
  switch (loc_kind(a.kind)) {
    case LocKind::kScope:
    case LocKind::kNode:
      e = want_path();
      break;
    case LocKind::kBuffer:
      e = want_buffer(a.buffer);
      break;
    case LocKind::kBufferPair:
      e = want_buffer(a.buffer);
      if (e.empty()) e = want_buffer(a.buffer2);
      break;
    case LocKind::kScopeBuffer:
      e = want_path();
      if (e.empty()) e = want_buffer(a.buffer);
      break;
  }
  if (!e.empty()) return e;
  if (param_kind(a.kind) != ParamKind::kNone) {
    const Word* w = need("param");
    if (!w) return err(end_col, "expected an integer parameter for '" + words[0].text + "'");
    if (!parse_int(w->text, a.param))
      return err(w->col, "expected an integer parameter, found '" + w->text + "'");
  }
  if (next < words.size())
    return err(words[next].col, "unexpected '" + words[next].text + "' after the action");
  return a;
}

ir::Result<std::vector<Action>> parse_trace(std::string_view text, std::string_view file) {
  std::vector<Action> out;
  std::vector<ir::Diagnostic> errors;
  int line = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(start, end - start);
    ++line;
    if (!split_words(l).empty()) {
      auto r = parse_action(l, file, line);
      if (r.ok())
        out.push_back(r.value());
      else
        errors.insert(errors.end(), r.errors().begin(), r.errors().end());
    }
    if (end == text.size()) break;
    start = end + 1;
  }
  if (!errors.empty()) return errors;
  return out;
}

std::string print_trace(const std::vector<Action>& trace) {
  std::string s;
  for (const auto& a : trace) s += print_action(a) + "\n";
  return s;
}

}  // namespace perfdojo::transforms
