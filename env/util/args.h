// The one command-line parser of every program (the `perfdojo` subcommands, train_agent,
// evaluate_agent, the benchmarks): a program declares which options take a value and which are
// switches, and gets its words checked against that once, with numbers read by typed getters that
// name the option and the range they wanted.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace perfdojo::util {

/// What one program (or one `perfdojo` subcommand) accepts.
///
/// `--json` (a switch setting Args::json) and `--help`/`-h` (Args::help) come with every spec,
/// unless the program declares `json` a value option of its own (kernel_bench's `--json FILE`).
struct ArgSpec {
  std::string program;  ///< names it in errors: "train_agent", "perfdojo check"
  std::string usage;    ///< one line for errors; "" points at `program --help` instead
  std::set<std::string> value_options;   ///< --name VALUE or --name=VALUE
  std::set<std::string> switch_options;  ///< --name (and no value)
  /// Switches that may also be set explicitly: --name (true), --name=false, --name 0. A word
  /// after --name is taken as its value only when it is true, false, 0 or 1. Stored in `values`.
  std::set<std::string> bool_options;
  std::map<std::string, std::string> aliases;  ///< another name -> the option it stands for
  bool positional = false;                     ///< whether words that are not options are taken
};

/// A parsed command line: options under their names (aliases resolved), without the dashes.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  ///< value and bool options
  std::set<std::string> flags;                ///< switches given
  bool json = false;                          ///< --json: machine-readable output on stdout
  bool help = false;                          ///< --help or -h: parsing stopped there

  bool has(const std::string& name) const { return flags.count(name) || values.count(name); }
  std::string get(const std::string& name, const std::string& fallback = "") const {
    auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
  }

  /// `--name` as an integer in [lo, hi] into `out`, which is left as it is when the option is
  /// absent. Returns "" or the error: "--seeds must be an integer in [1, 1000], got 'x'".
  std::string get_int(const std::string& name, int64_t lo, int64_t hi, int64_t* out) const;
  std::string get_int(const std::string& name, int lo, int hi, int* out) const;
  /// `--name` as a finite number in [lo, hi], as get_int.
  std::string get_double(const std::string& name, double lo, double hi, double* out) const;
  /// `--name` as comma-separated integers, each in [lo, hi], none missing; as get_int.
  std::string get_int_list(const std::string& name, int64_t lo, int64_t hi,
                           std::vector<int>* out) const;
};

/// Parses `words` (the command line after the program's name) against `spec` into `out`.
/// Returns "" or the first problem, naming the program and the option: an unknown option, a
/// value option with no value (a following word starting with "--" is not one), a switch given
/// `=value`, a word that is not an option where the program takes none. `out->json` is set
/// even then when `--json` is among the words, so that the error can be reported as JSON. After
/// a lone "--" every word is positional.
std::string parse_args(const ArgSpec& spec, const std::vector<std::string>& words, Args* out);
/// The same on main's argc and argv (argv[0], the program's path, is skipped).
std::string parse_args(const ArgSpec& spec, int argc, const char* const* argv, Args* out);

}  // namespace perfdojo::util
