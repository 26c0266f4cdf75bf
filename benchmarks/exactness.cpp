// Does the generated code compute what the IR says? Every suite and unseen kernel, at an
// interpretable size, as written, contracted (transforms/contract.h) and after random legal
// trajectories, compiled by an x86 backend and run against the interpreter. Each result is
// tallied by how it verified (docs/ir.md, "Verification"):
//   exact     bit for bit: the code keeps the IR's order and rounding
//   fused     within the error bound because the compiler fused a multiply with an add/subtract
//             the IR keeps apart (GCC's vectoriser ignores -ffp-contract=off there; compiler.h)
//   bound     within the error bound: the code reassociates (vector partial sums) or calls
//             vector math, as the IR allows
//   tolerance the interpreter could not bound it (too large) and a relative tolerance decided
//   FAIL      a wrong result, a crash or a compile error (printed in full)
// Prints a markdown table (the one in docs/ir.md) and exits 1 on any FAIL.
//
//   exactness [--backend x86_avx512] [--trajectories 20] [--steps 12] [--seed 0] [--only NAME]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "transforms/action.h"
#include "transforms/contract.h"
#include "transforms/registry.h"
#include "transforms/semantics_guard.h"
#include "util/args.h"

using namespace perfdojo;
namespace fs = std::filesystem;

namespace {

struct Tally {
  int exact = 0, fused = 0, bound = 0, tolerance = 0, fail = 0;
  int total() const { return exact + fused + bound + tolerance + fail; }
};

std::vector<fs::path> kernels_in(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".pdj") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

void progress(int done, int total, double t0) {
  const double el =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() -
      t0;
  const double rate = el > 0 ? done / el : 0;
  const int w = 30, filled = total ? w * done / total : w;
  std::fprintf(stderr, "\r[%s%s] %d/%d programs  %.1f/s  ETA %.0fs   ",
               std::string(filled, '#').c_str(), std::string(w - filled, '.').c_str(), done, total,
               rate, rate > 0 ? (total - done) / rate : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "exactness [--backend B] [--trajectories N] [--steps N] [--seed S] [--only NAME]";
  util::ArgSpec spec;
  spec.program = "exactness";
  spec.usage = usage;
  spec.value_options = {"backend", "trajectories", "steps", "seed", "only"};
  util::Args args;
  if (auto e = util::parse_args(spec, argc, argv, &args); !e.empty()) {
    std::fprintf(stderr, "exactness: %s\n", e.c_str());
    return 2;
  }
  if (args.help) {
    std::printf("usage: %s\n", usage);
    return 0;
  }
  const std::string backend_name = args.get("backend"), only = args.get("only");
  int trajectories = 20, steps = 12;
  int64_t seed = 0;
  for (const std::string& e :
       {args.get_int("trajectories", 0, 1000000, &trajectories),
        args.get_int("steps", 0, 1000000, &steps), args.get_int("seed", 0, INT64_MAX, &seed)})
    if (!e.empty()) {
      std::fprintf(stderr, "exactness: %s\n", e.c_str());
      return 2;
    }
  std::unique_ptr<backends::Backend> b;
  backends::BackendConfig config;
  config.cache_dir = "";  // every program compiled and checked now, none served from a record
  for (std::string n : backend_name.empty()
                           ? std::vector<std::string>{"x86_avx512", "x86_avx2", "x86_64"}
                           : std::vector<std::string>{backend_name}) {
    b = backends::make_backend(n, config);
    if (b && b->available().ok) break;
  }
  if (!b || !b->available().ok) {
    std::fprintf(stderr, "no x86 backend runs here\n");
    return 2;
  }
  const transforms::Target target = *transforms::target_by_name(b->name());
  backends::MeasureOptions mo;
  mo.time_budget_s = 0.001;
  mo.min_reps = 1;
  mo.max_reps = 1;
  mo.timeout_s = 20;

  struct Row {
    std::string name, set;
    Tally written, contracted, moved;
  };
  std::vector<Row> rows;
  std::vector<std::pair<std::string, fs::path>> files;
  for (const auto& f : kernels_in(PERFDOJO_KERNEL_DIR)) files.push_back({"suite", f});
  for (const auto& f : kernels_in(PERFDOJO_UNSEEN_DIR)) files.push_back({"unseen", f});
  if (!only.empty())
    std::erase_if(files, [&](const auto& f) { return f.second.stem().string() != only; });
  const int total = static_cast<int>(files.size()) * (2 + trajectories);
  int done = 0;
  const double t0 =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::vector<std::string> failures;
  auto tally = [&](Tally& t, const ir::Program& p, const std::string& what) {
    backends::Measurement m = b->measure(p, mo);
    if (!m.ok() || !m.verified) {
      ++t.fail;
      failures.push_back(what + ": " + m.error.value_or("not verified"));
    } else if (m.verification == "exact") {
      ++t.exact;
    } else if (m.verification.rfind("bound: the compiler fused", 0) == 0) {
      ++t.fused;
    } else if (m.verification.rfind("bound", 0) == 0) {
      ++t.bound;
    } else {
      ++t.tolerance;
    }
    progress(++done, total, t0);
  };
  std::mt19937_64 rng(seed);
  for (const auto& [set, file] : files) {
    Row r{file.stem().string(), set, {}, {}, {}};
    auto loaded = ir::load_file(file.string());
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.error_text().c_str());
      return 2;
    }
    auto small = transforms::guard_instance(*loaded, 2e5, target);
    if (!small) {
      failures.push_back(r.name + ": no interpretable instance");
      done += 2 + trajectories;
      continue;
    }
    tally(r.written, *small, r.name + " as written");
    tally(r.contracted, transforms::contract(*small), r.name + " contracted");
    for (int t = 0; t < trajectories; ++t) {
      ir::Program p = t % 2 ? transforms::contract(*small) : *small;
      std::string trace;
      for (int s = 0; s < steps; ++s) {
        auto a = transforms::sample_legal_action(p, target, rng);
        if (!a) break;
        trace += transforms::print_action(*a) + "; ";
        p = transforms::apply(p, *a, target).value();
      }
      tally(r.moved, p, r.name + (t % 2 ? " contracted" : "") + " after " + trace);
    }
    rows.push_back(r);
  }
  std::fprintf(stderr, "\n");

  auto cell = [](const Tally& t) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%d / %d / %d / %d / %d", t.exact, t.fused, t.bound, t.tolerance,
                  t.fail);
    return std::string(buf);
  };
  std::printf(
      "Backend %s; each cell: exact / fused by the compiler / bound / tolerance / FAIL; "
      "%d random trajectories of up to %d moves per kernel (every other one contracted first), "
      "seed %llu.\n\n",
      b->name().c_str(), trajectories, steps, static_cast<unsigned long long>(seed));
  std::printf("| kernel | set | as written | contracted | after moves |\n|---|---|---|---|---|\n");
  Tally all_w, all_c, all_m;
  auto add = [](Tally& a, const Tally& t) {
    a.exact += t.exact, a.fused += t.fused, a.bound += t.bound, a.tolerance += t.tolerance,
        a.fail += t.fail;
  };
  for (const auto& r : rows) {
    std::printf("| %s | %s | %s | %s | %s |\n", r.name.c_str(), r.set.c_str(),
                cell(r.written).c_str(), cell(r.contracted).c_str(), cell(r.moved).c_str());
    add(all_w, r.written), add(all_c, r.contracted), add(all_m, r.moved);
  }
  std::printf("| **all %zu** | | %s | %s | %s |\n", rows.size(), cell(all_w).c_str(),
              cell(all_c).c_str(), cell(all_m).c_str());
  for (const auto& f : failures) std::printf("\nFAIL %s\n", f.c_str());
  return failures.empty() ? 0 : 1;
}
