#include "util/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace perfdojo::util {
namespace {

std::string hint(const ArgSpec& spec) {
  return spec.usage.empty() ? "(" + spec.program + " --help)" : "(usage: " + spec.usage + ")";
}

bool is_bool_word(const std::string& w) {
  return w == "true" || w == "false" || w == "0" || w == "1";
}

bool parse_int(const std::string& text, int64_t* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return false;
  *out = x;
  return true;
}

std::string range_text(const std::string& what, const std::string& name, const std::string& lo,
                       const std::string& hi, const std::string& got) {
  return "--" + name + " must be " + what + " in [" + lo + ", " + hi + "], got '" + got + "'";
}

std::string number_text(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

}  // namespace

std::string Args::get_int(const std::string& name, int64_t lo, int64_t hi, int64_t* out) const {
  auto it = values.find(name);
  if (it == values.end()) return "";
  int64_t x = 0;
  if (parse_int(it->second, &x) && x >= lo && x <= hi) {
    *out = x;
    return "";
  }
  return range_text("an integer", name, std::to_string(lo), std::to_string(hi), it->second);
}

std::string Args::get_int(const std::string& name, int lo, int hi, int* out) const {
  int64_t x = *out;
  std::string e = get_int(name, int64_t{lo}, int64_t{hi}, &x);
  if (e.empty()) *out = static_cast<int>(x);
  return e;
}

std::string Args::get_double(const std::string& name, double lo, double hi, double* out) const {
  auto it = values.find(name);
  if (it == values.end()) return "";
  const std::string& v = it->second;
  if (!v.empty() && !std::isspace(static_cast<unsigned char>(v[0]))) {
    char* end = nullptr;
    errno = 0;
    double x = std::strtod(v.c_str(), &end);
    if (*end == '\0' && errno == 0 && std::isfinite(x) && x >= lo && x <= hi) {
      *out = x;
      return "";
    }
  }
  return range_text("a number", name, number_text(lo), number_text(hi), v);
}

std::string Args::get_int_list(const std::string& name, int64_t lo, int64_t hi,
                               std::vector<int>* out) const {
  auto it = values.find(name);
  if (it == values.end()) return "";
  std::vector<int> list;
  std::string item;
  std::stringstream ss(it->second);
  bool ok = !it->second.empty() && it->second.back() != ',';
  while (ok && std::getline(ss, item, ',')) {
    int64_t x = 0;
    ok = parse_int(item, &x) && x >= lo && x <= hi;
    list.push_back(static_cast<int>(x));
  }
  if (!ok)
    return "--" + name + " must be comma-separated integers in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "], got '" + it->second + "'";
  *out = list;
  return "";
}

std::string parse_args(const ArgSpec& spec, const std::vector<std::string>& words, Args* out) {
  *out = Args{};
  const bool json_switch = !spec.value_options.count("json");
  if (json_switch)
    for (const auto& w : words) out->json = out->json || w == "--json";
  bool options_end = false;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (options_end || w.size() < 2 || w[0] != '-' || (w[1] != '-' && w != "-h")) {
      // "-", "-1", "x.pdj": not an option.
      if (!spec.positional)
        return "unexpected argument '" + w + "' for '" + spec.program + "' " + hint(spec);
      out->positional.push_back(w);
      continue;
    }
    if (w == "--") {
      options_end = true;
      continue;
    }
    if (w == "-h" || w == "--help") {
      out->help = true;
      return "";
    }
    std::string name = w.substr(2), value;
    const bool has_inline = name.find('=') != std::string::npos;
    if (has_inline) {
      value = name.substr(name.find('=') + 1);
      name = name.substr(0, name.find('='));
    }
    if (auto a = spec.aliases.find(name); a != spec.aliases.end()) name = a->second;
    if (name == "json" && json_switch) {
      if (has_inline)
        return "option --json is a switch and takes no value, got '" + w + "' " + hint(spec);
      out->json = true;
    } else if (spec.value_options.count(name)) {
      if (!has_inline) {
        if (i + 1 >= words.size()) return "option --" + name + " needs a value " + hint(spec);
        value = words[++i];
        if (value.rfind("--", 0) == 0)
          return "option --" + name + " needs a value, found '" + value + "' " + hint(spec);
      }
      out->values[name] = value;
    } else if (spec.bool_options.count(name)) {
      if (!has_inline) {
        value = "true";
        if (i + 1 < words.size() && is_bool_word(words[i + 1])) value = words[++i];
      }
      out->values[name] = value;
    } else if (spec.switch_options.count(name)) {
      if (has_inline)
        return "option --" + name + " is a switch and takes no value, got '" + w + "' " +
               hint(spec);
      out->flags.insert(name);
    } else {
      return "unknown option --" + name + " for '" + spec.program + "' " + hint(spec);
    }
  }
  return "";
}

std::string parse_args(const ArgSpec& spec, int argc, const char* const* argv, Args* out) {
  std::vector<std::string> words;
  for (int k = 1; k < argc; ++k) words.emplace_back(argv[k]);
  return parse_args(spec, words, out);
}

}  // namespace perfdojo::util
