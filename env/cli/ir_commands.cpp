// `perfdojo check | fmt | kernels | run`: the IR's own subcommands.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli.h"
#include "gym/dataset.h"
#include "ir/check.h"
#include "ir/interp.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "transforms/contract.h"
#include "util/json.h"
#include "util/npy.h"

namespace perfdojo::cli {
namespace {

namespace fs = std::filesystem;
using util::JsonArray;
using util::JsonObject;

std::string kernel_dir(const Args& a) {
  if (a.values.count("dir")) return a.get("dir");
  if (const char* env = std::getenv("PERFDOJO_KERNELS")) return env;
  return PERFDOJO_KERNEL_DIR;
}

int cmd_check(const Args& a) {
  if (a.positional.size() != 1) return usage_error("check takes exactly one FILE", a.json);
  const std::string& file = a.positional[0];
  ir::CheckedStream sink;
  if (a.has("tree")) {
    // As the optimiser and the env load a kernel: the whole tree, then the checker over it. The
    // pieces of the tree go through the same counters and hash.
    auto r = ir::load_file(file);
    if (!r.ok()) return report_errors(r.errors(), a.json, file);
    ir::replay(*r, sink);
  } else {
    // Streamed: the body is never held, so a file of any size is checked in the memory of a line.
    std::ifstream in(file, std::ios::binary);
    if (!in) return report_errors({{{file, 0, 0}, "cannot read file"}}, a.json, file);
    auto errors = ir::check_stream(in, file, sink);
    if (!errors.empty()) return report_errors(errors, a.json, file);
  }
  const int64_t stmts = sink.statements, scopes = sink.scopes;
  if (a.json) {
    std::cout << JsonObject()
                     .add("ok", true)
                     .add("file", file)
                     .add("statements", stmts)
                     .add("scopes", scopes)
                     .add("hash", sink.hasher.finish())
                     .str()
              << "\n";
  } else {
    std::cout << file << ": ok (" << stmts << " statements, " << scopes << " scopes)\n";
  }
  return kExitOk;
}

// Checks and prints in one streaming pass: the text is held (it is written only when the kernel
// is valid), the tree never is.
class CheckAndPrint final : public ir::ProgramSink {
 public:
  void declarations(const ir::Program& h) override {
    check.declarations(h);
    printer.declarations(h);
  }
  void open_scope(int64_t e, std::string n, ir::Annot an, ir::SourceLoc l,
                  ir::ScopeBounds b) override {
    printer.open_scope(e, n, an, l, b);
    check.open_scope(e, std::move(n), an, std::move(l), std::move(b));
  }
  void close_scope() override {
    printer.close_scope();
    check.close_scope();
  }
  void statement(ir::Stmt s) override {
    printer.statement(s);
    check.statement(std::move(s));
  }
  std::ostringstream text;
  ir::StreamPrinter printer{text};
  ir::StreamChecker check;
};

int cmd_fmt(const Args& a) {
  if (a.positional.size() != 1) return usage_error("fmt takes exactly one FILE", a.json);
  const std::string& file = a.positional[0];
  std::ifstream in(file, std::ios::binary);
  if (!in) return report_errors({{{file, 0, 0}, "cannot read file"}}, a.json, file);
  CheckAndPrint sink;
  auto errors = ir::parse_stream(in, file, sink);
  if (errors.empty()) errors = sink.check.finish();
  if (!errors.empty()) return report_errors(errors, a.json, file);
  std::string text = std::move(sink.text).str();
  int fused = 0;
  if (a.has("contract")) {
    // The whole tree: the rewrite needs it (the text just printed is known valid).
    auto p = ir::parse_program(text, file);
    if (!p.ok()) return report_errors(p.errors(), a.json, file);
    text = ir::print_program(transforms::contract(p.value(), &fused));
  }
  if (a.json) {
    JsonObject o;
    o.add("ok", true).add("file", file).add("text", text);
    if (a.has("contract")) o.add("contracted", fused);
    std::cout << o.str() << "\n";
  } else {
    std::cout << text;
  }
  return kExitOk;
}

int cmd_kernels(const Args& a) {
  std::string dir = kernel_dir(a);
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".pdj") files.push_back(e.path());
  if (ec) return usage_error("cannot list kernel folder '" + dir + "': " + ec.message(), a.json);
  std::sort(files.begin(), files.end());
  JsonArray arr;
  for (const auto& f : files) {
    auto r = ir::load_file(f.string());
    std::string name = f.stem().string();
    std::string desc =
        r.ok() ? r->doc.substr(0, r->doc.find('\n')) : "(invalid: " + r.errors()[0].str() + ")";
    if (a.json) {
      arr.raw(JsonObject()
                  .add("name", name)
                  .add("uri", "perfdojo://suite/" + name)
                  .add("path", f.string())
                  .add("valid", r.ok())
                  .add("family", env::kernel_family(name))
                  .add("description", desc)
                  .str());
    } else {
      const std::string family = env::kernel_family(name);
      std::cout << name << std::string(name.size() < 22 ? 22 - name.size() : 1, ' ') << family
                << std::string(family.size() < 12 ? 12 - family.size() : 1, ' ') << desc << "\n";
    }
  }
  if (a.json) std::cout << JsonObject().add("ok", true).raw("kernels", arr.str()).str() << "\n";
  return kExitOk;
}

int cmd_run(const Args& a) {
  if (a.positional.size() != 1) return usage_error("run takes exactly one FILE", a.json);
  const std::string& file = a.positional[0];
  uint64_t seed = 0;
  try {
    size_t used = 0;
    std::string s = a.get("seed", "0");
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument(s);
    seed = std::stoull(s, &used);
    if (used != s.size()) throw std::invalid_argument(s);
  } catch (const std::exception&) {
    return usage_error("--seed needs a non-negative integer, found '" + a.get("seed") + "'",
                       a.json);
  }
  auto r = ir::load_file(file);
  if (!r.ok()) return report_errors(r.errors(), a.json, file);
  auto result = ir::interpret(*r, ir::make_inputs(*r, seed));
  if (!result.ok()) return report_errors(result.errors(), a.json, file);
  std::string out_dir = a.get("out");
  if (!out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) return usage_error("cannot create '" + out_dir + "': " + ec.message(), a.json);
  }
  JsonArray outs;
  for (const auto& b : r->buffers) {
    if (b.role != ir::Role::kOutput) continue;
    const ir::Tensor& t = result->at(b.name);
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    for (double v : t.data) {
      sum += v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    std::string path;
    if (!out_dir.empty()) {
      path = (fs::path(out_dir) / (b.name + ".npy")).string();
      if (auto err = util::write_npy(path, t); !err.empty()) return usage_error(err, a.json);
    }
    JsonArray shape;
    for (auto d : t.shape) shape.add(d);
    if (a.json) {
      JsonObject o;
      o.add("name", b.name).add("dtype", ir::dtype_name(b.dtype)).raw("shape", shape.str());
      o.add("sum", sum).add("min", lo).add("max", hi);
      if (!path.empty()) o.add("file", path);
      outs.raw(o.str());
    } else {
      std::cout << b.name << ": " << ir::dtype_name(b.dtype) << shape.str() << " sum=" << sum
                << " min=" << lo << " max=" << hi << (path.empty() ? "" : "  -> " + path) << "\n";
    }
  }
  if (a.json)
    std::cout << JsonObject()
                     .add("ok", true)
                     .add("file", file)
                     .add("seed", seed)
                     .raw("outputs", outs.str())
                     .str()
              << "\n";
  return kExitOk;
}

}  // namespace

std::vector<Command> ir_commands() {
  return {
      {"check",
       "check FILE [--tree]",
       "parse and check a kernel as it streams (constant memory); errors as file:line:col. --tree "
       "loads the whole tree first, as the optimiser and the env do",
       {},
       {"tree"},
       cmd_check},
      {"fmt",
       "fmt FILE [--contract]",
       "print a kernel in canonical form; --contract fuses its multiply-adds first (fma, as the "
       "optimiser's search starts)",
       {},
       {"contract"},
       cmd_fmt},
      {"kernels", "kernels [--dir DIR]", "list the shipped kernel suite", {"dir"}, {}, cmd_kernels},
      {"run",
       "run FILE [--seed S] [--out DIR]",
       "interpret a kernel on seeded inputs; --out writes each output as DIR/<name>.npy",
       {"seed", "out"},
       {},
       cmd_run},
  };
}

}  // namespace perfdojo::cli
