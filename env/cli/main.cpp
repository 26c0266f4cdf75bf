// `perfdojo`: the command line. Each subcommand lives with its module; this file dispatches.
#include <cstdlib>
#include <iostream>

#include "cli/cli.h"
#include "util/json.h"

namespace perfdojo::cli {

std::string diagnostics_json(const std::vector<ir::Diagnostic>& errors) {
  util::JsonArray arr;
  for (const auto& d : errors) {
    arr.raw(util::JsonObject()
                .add("file", d.loc.file.str())
                .add("line", d.loc.line)
                .add("col", d.loc.col)
                .add("message", d.message)
                .add("text", d.str())
                .str());
  }
  return arr.str();
}

int report_errors(const std::vector<ir::Diagnostic>& errors, bool json, const std::string& file) {
  if (json) {
    std::cout << util::JsonObject()
                     .add("ok", false)
                     .add("file", file)
                     .raw("errors", diagnostics_json(errors))
                     .str()
              << "\n";
  } else {
    for (const auto& d : errors) std::cerr << d.str() << "\n";
  }
  return kExitInvalid;
}

int usage_error(const std::string& message, bool json) {
  if (json) {
    std::cout << util::JsonObject().add("ok", false).add("error", message).str() << "\n";
  } else {
    std::cerr << "perfdojo: " << message << "\n";
  }
  return kExitUsage;
}

std::string profile_dir() {
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + "/.cache/perfdojo" : "";
}

bool int_option(const Args& a, const std::string& name, int64_t lo, int64_t hi, int64_t* out,
                int* rc) {
  const std::string e = a.get_int(name, lo, hi, out);
  if (!e.empty()) *rc = usage_error(e, a.json);
  return e.empty();
}

namespace {

std::vector<Command> all_commands() {
  std::vector<Command> cmds = ir_commands();
  for (auto& c : transform_commands()) cmds.push_back(std::move(c));
  for (auto& c : backend_commands()) cmds.push_back(std::move(c));
  for (auto& c : cost_commands()) cmds.push_back(std::move(c));
  for (auto& c : optimize_commands()) cmds.push_back(std::move(c));
  for (auto& c : farm_commands()) cmds.push_back(std::move(c));
  for (auto& c : model_commands()) cmds.push_back(std::move(c));
  for (auto& c : bridge_commands()) cmds.push_back(std::move(c));
  return cmds;
}

void print_usage(const std::vector<Command>& cmds) {
  std::cout << "usage: perfdojo COMMAND [ARGS] [--json]\n\ncommands:\n";
  for (const auto& c : cmds) {
    std::cout << "  " << c.usage << "\n      " << c.summary << "\n";
  }
  std::cout << "\nEvery command accepts --json (machine-readable output on stdout).\n"
               "Exit codes: 0 ok, 1 invalid input, 2 usage error.\n";
}

}  // namespace
}  // namespace perfdojo::cli

int main(int argc, char** argv) {
  using namespace perfdojo::cli;
  auto cmds = all_commands();
  std::vector<std::string> argv_s(argv + 1, argv + argc);
  bool json = false;
  for (const auto& s : argv_s) json = json || s == "--json";
  if (argv_s.empty() || argv_s[0] == "help" || argv_s[0] == "--help" || argv_s[0] == "-h") {
    print_usage(cmds);
    return argv_s.empty() ? kExitUsage : kExitOk;
  }
  const Command* cmd = nullptr;
  for (const auto& c : cmds)
    if (c.name == argv_s[0]) cmd = &c;
  if (!cmd) return usage_error("unknown command '" + argv_s[0] + "' (try 'perfdojo help')", json);
  perfdojo::util::ArgSpec spec;
  spec.program = "perfdojo " + cmd->name;
  spec.usage = "perfdojo " + cmd->usage;
  spec.value_options = cmd->value_options;
  spec.switch_options = cmd->switch_options;
  spec.positional = true;
  Args args;
  if (auto e = perfdojo::util::parse_args(spec, {argv_s.begin() + 1, argv_s.end()}, &args);
      !e.empty())
    return usage_error(e, args.json);
  if (args.help) {
    std::cout << "usage: perfdojo " << cmd->usage << " [--json]\n  " << cmd->summary << "\n";
    return kExitOk;
  }
  try {
    return cmd->run(args);
  } catch (const std::exception& e) {
    // Our bug, not the user's: say so rather than abort.
    std::cerr << "perfdojo: internal error: " << e.what() << "\n";
    return 3;
  }
}
