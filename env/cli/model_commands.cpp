// `perfdojo import`: a PyTorch model to a generated library (docs/models.md). The work is
// Python's (perfdojo.torch_import, which needs PyTorch); this command finds an interpreter that
// has it and hands over, so the CLI itself never links PyTorch.

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "util/process.h"

namespace perfdojo::cli {
namespace {

namespace fs = std::filesystem;

// --python, else $PERFDOJO_PYTHON, else the checkout's .venv-bench (scripts/bootstrap --bench:
// the newest PyTorch), else python3 on PATH.
std::string model_python(const Args& a) {
  if (a.has("python")) return a.get("python");
  if (const char* env = std::getenv("PERFDOJO_PYTHON"); env && *env) return env;
  const fs::path venv = fs::path(PERFDOJO_PYTHON_DIR).parent_path() / ".venv-bench/bin/python3";
  std::error_code ec;
  if (fs::exists(venv, ec)) return venv.string();
  return "python3";
}

int run_import(const Args& a) {
  if (a.positional.size() != 1) return usage_error("import takes exactly one FILE.py:NAME", a.json);
  if (!a.has("shapes"))
    return usage_error("import needs --shapes, e.g. --shapes 1,128,768 (';' between inputs)",
                       a.json);
  const std::string python = util::find_executable(model_python(a));
  if (python.empty())
    return usage_error("no Python interpreter '" + model_python(a) +
                           "' (--python, $PERFDOJO_PYTHON, or scripts/bootstrap --bench)",
                       a.json);
  std::vector<std::string> argv = {
      python, "-c", "import sys; from perfdojo.torch_import import main; sys.exit(main())",
      a.positional[0]};
  std::stringstream shapes(a.get("shapes"));
  for (std::string s; std::getline(shapes, s, ';');)
    if (!s.empty()) argv.insert(argv.end(), {"--shape", s});
  for (const char* opt : {"timeout", "mode", "threads", "frontend", "out"})
    if (a.has(opt)) argv.insert(argv.end(), {std::string("--") + opt, a.get(opt)});
  if (a.has("import-only")) argv.push_back("--import-only");
  if (a.json) argv.push_back("--json");
  // The package next to this build's sources first, so the command runs this checkout's code.
  std::string path = PERFDOJO_PYTHON_DIR;
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) path += ":" + std::string(old);
  setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<char*> cargv;
  for (auto& s : argv) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  std::cout.flush();
  execv(python.c_str(), cargv.data());
  return usage_error("cannot run " + python + ": " + std::strerror(errno), a.json);
}

}  // namespace

std::vector<Command> model_commands() {
  return {{"import",
           "import FILE.py:NAME --shapes S[;S...] [--timeout S] [--mode M] [--threads N] "
           "[--frontend auto|export|fx] [--out DIR] [--import-only] [--python PY]",
           "a PyTorch model (NAME: a torch.nn.Module class or a function returning one, called "
           "with no arguments) traced on seeded inputs of the given shapes, its operators lowered "
           "to IR kernels, optimised within --timeout seconds in all, built into one shared "
           "library with a header (--out DIR gets copies and report.json) and checked against "
           "eager; --import-only prints the kernels and what stays in PyTorch. Runs "
           "perfdojo.torch_import under --python, $PERFDOJO_PYTHON, .venv-bench or python3 "
           "(docs/models.md)",
           {"shapes", "timeout", "mode", "threads", "frontend", "out", "python"},
           {"import-only"},
           run_import}};
}

}  // namespace perfdojo::cli
