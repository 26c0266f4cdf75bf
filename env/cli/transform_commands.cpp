// `perfdojo actions | apply | sketch | guard`: the action space from the command line.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "cli/cli.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/registry.h"
#include "transforms/semantics_guard.h"
#include "util/json.h"

namespace perfdojo::cli {
namespace {

using util::JsonArray;
using util::JsonObject;

std::optional<transforms::Target> target_of(const Args& a) {
  return transforms::target_by_name(a.get("target", "x86_avx512"));
}

int cmd_actions(const Args& a) {
  if (a.positional.size() != 1) return usage_error("actions takes exactly one FILE", a.json);
  auto target = target_of(a);
  if (!target)
    return usage_error("unknown --target '" + a.get("target") + "' (x86_avx512, x86_avx2, x86_64)",
                       a.json);
  auto r = ir::load_file(a.positional[0]);
  if (!r.ok()) return report_errors(r.errors(), a.json, a.positional[0]);
  bool legal_only = a.has("legal-only");
  JsonArray arr;
  int legal = 0, total = 0;
  for (const auto& c : transforms::enumerate(*r, *target)) {
    ++total;
    legal += c.legality.ok();
    if (legal_only && !c.legality.ok()) continue;
    std::string text = transforms::print_action(c.action);
    if (a.json) {
      JsonObject o;
      o.add("action", text)
          .add("legal", c.legality.ok())
          .add("reason", transforms::reason_name(c.legality.reason));
      if (!c.legality.ok()) o.add("explanation", transforms::explain(c.action, c.legality));
      arr.raw(o.str());
    } else if (c.legality.ok()) {
      std::cout << text << "\n";
    } else {
      std::cout << text << "    # illegal: " << transforms::reason_name(c.legality.reason) << "\n";
    }
  }
  if (a.json) {
    std::cout << JsonObject()
                     .add("ok", true)
                     .add("file", a.positional[0])
                     .add("candidates", total)
                     .add("legal", legal)
                     .raw("actions", arr.str())
                     .str()
              << "\n";
  }
  return kExitOk;
}

int cmd_apply(const Args& a) {
  if (a.positional.empty()) return usage_error("apply takes a FILE and actions", a.json);
  auto target = target_of(a);
  if (!target)
    return usage_error("unknown --target '" + a.get("target") + "' (x86_avx512, x86_avx2, x86_64)",
                       a.json);
  const std::string& file = a.positional[0];
  auto r = ir::load_file(file);
  if (!r.ok()) return report_errors(r.errors(), a.json, file);
  std::vector<transforms::Action> trace;
  if (a.values.count("trace")) {
    std::ifstream in(a.get("trace"));
    if (!in) return usage_error("cannot read trace '" + a.get("trace") + "'", a.json);
    std::stringstream ss;
    ss << in.rdbuf();
    auto t = transforms::parse_trace(ss.str(), a.get("trace"));
    if (!t.ok()) return report_errors(t.errors(), a.json, a.get("trace"));
    trace = t.value();
  }
  for (size_t i = 1; i < a.positional.size(); ++i) {
    auto act = transforms::parse_action(a.positional[i], "<argument " + std::to_string(i) + ">");
    if (!act.ok()) return report_errors(act.errors(), a.json, file);
    trace.push_back(act.value());
  }
  ir::Program cur = r.value();
  for (size_t i = 0; i < trace.size(); ++i) {
    auto l = transforms::check(cur, trace[i], *target);
    if (!l.ok()) {
      std::string msg =
          "action " + std::to_string(i + 1) + " refused: " + transforms::explain(trace[i], l);
      if (a.json) {
        std::cout << JsonObject()
                         .add("ok", false)
                         .add("error", msg)
                         .add("action", transforms::print_action(trace[i]))
                         .add("index", static_cast<int64_t>(i))
                         .add("reason", transforms::reason_name(l.reason))
                         .str()
                  << "\n";
      } else {
        std::cerr << "perfdojo: " << msg << " [" << transforms::reason_name(l.reason) << "]\n";
      }
      return kExitUsage;
    }
    cur = transforms::apply(cur, trace[i], *target).value();
  }
  std::string text = ir::print_program(cur);
  if (a.json) {
    JsonArray t;
    for (const auto& act : trace) t.add(transforms::print_action(act));
    std::cout << JsonObject()
                     .add("ok", true)
                     .add("text", text)
                     .raw("trace", t.str())
                     .add("hash", ir::structural_hash(cur))
                     .str()
              << "\n";
  } else {
    std::cout << text;
  }
  return kExitOk;
}

int cmd_sketch(const Args& a) {
  if (a.positional.size() != 1) return usage_error("sketch takes exactly one FILE", a.json);
  auto target = target_of(a);
  if (!target)
    return usage_error("unknown --target '" + a.get("target") + "' (x86_avx512, x86_avx2, x86_64)",
                       a.json);
  const std::string& file = a.positional[0];
  auto r = ir::load_file(file);
  if (!r.ok()) return report_errors(r.errors(), a.json, file);
  if (a.has("all")) {  // every GEMM-class nest, as the optimiser's first proposal
    if (a.values.count("path"))
      return usage_error("--all sketches every nest; it takes no --path", a.json);
    const transforms::SketchExpansion all = transforms::sketch_program(*r, *target, 0);
    if (all.trace.empty()) {
      ir::Diagnostic d;
      d.loc.file = file;
      d.message = "no GEMM-class nest took the sketch";
      return report_errors({d}, a.json, file);
    }
    if (a.json)
      std::cout << JsonObject()
                       .add("ok", true)
                       .add("trace", transforms::print_trace(all.trace))
                       .add("text", ir::print_program(all.program))
                       .str()
                << "\n";
    else
      std::cout << (a.has("ir") ? ir::print_program(all.program)
                                : transforms::print_trace(all.trace));
    return kExitOk;
  }
  // Without --path: loop fission first where a GEMM-class nest shares its scopes.
  transforms::SketchExpansion start{{}, *r};
  if (!a.values.count("path")) start = transforms::isolate_gemm_nests(*r, *target);
  const std::vector<transforms::GemmNest> nests = transforms::gemm_nests(start.program);
  transforms::GemmNest nest;
  if (a.values.count("path")) {
    auto act = transforms::parse_action("tile_scope " + a.get("path") + " 2", "<--path>");
    if (!act.ok())
      return usage_error("--path '" + a.get("path") + "' is not a path like 0.1", a.json);
    auto g = transforms::gemm_nest_at(*r, act->path);
    if (!g.ok()) return report_errors(g.errors(), a.json, file);
    nest = *g;
  } else if (nests.empty()) {
    ir::Diagnostic d;
    d.loc.file = file;
    d.message = "no GEMM-class nest (three scopes over one += whose target uses two of them)";
    return report_errors({d}, a.json, file);
  } else {
    nest = nests.front();
  }
  const auto candidates = transforms::microkernel_candidates(nest, *target);
  transforms::MicrokernelParams m =
      candidates.empty() ? transforms::MicrokernelParams{} : candidates.front();
  if (a.has("transposed"))  // the first transposed candidate, when the nest has one
    for (const auto& c : candidates)
      if (c.transposed) {
        m = c;
        break;
      }
  bool given = false;
  int rc = kExitOk;
  for (auto [name, field] : {std::pair{"mr", &m.mr},
                             {"nr", &m.nr},
                             {"kc", &m.kc},
                             {"mc", &m.mc},
                             {"nc", &m.nc},
                             {"lanes", &m.lanes}}) {
    if (!int_option(a, name, name == std::string("nc") ? 0 : 1, 1 << 20, field, &rc)) return rc;
    given = given || a.values.count(name);
  }
  // Sizes given: a plain tile unless --transposed asks (the first candidate may be transposed).
  if (given || a.has("transposed")) m.transposed = a.has("transposed");
  if (given || a.has("rows-outer")) m.rows_outer = a.has("rows-outer");
  // Sizes given: exactly those (each must divide its extent), unless --fit asks for the fitted
  // expansion (remainders split off); else the first candidate, fitted.
  const bool fitted = !given || a.has("fit");
  auto e = fitted ? transforms::expand_microkernel_fitted(start.program, nest.path, m, *target)
                  : transforms::expand_microkernel(start.program, nest.path, m, *target);
  if (!e.ok()) return report_errors(e.errors(), a.json, file);
  std::vector<transforms::Action> trace = start.trace;
  trace.insert(trace.end(), e->trace.begin(), e->trace.end());
  if (a.json) {
    JsonArray t, c, n;
    for (const auto& act : trace) t.add(transforms::print_action(act));
    for (const auto& p : candidates) c.add(transforms::print_params(p));
    for (const auto& g : nests) n.add(transforms::print_path(g.path));
    std::cout << JsonObject()
                     .add("ok", true)
                     .add("path", transforms::print_path(nest.path))
                     .add("params", transforms::print_params(m))
                     .add("fitted", fitted)
                     .raw("trace", t.str())
                     .raw("candidates", c.str())
                     .raw("nests", n.str())
                     .add("text", ir::print_program(e->program))
                     .str()
              << "\n";
  } else if (a.has("ir")) {
    std::cout << ir::print_program(e->program);
  } else {
    if (!start.trace.empty())
      std::cout << "# loop fission exposing the GEMM-class nest (" << start.trace.size()
                << " actions)\n";
    std::cout << "# micro-kernel sketch at " << transforms::print_path(nest.path) << ": "
              << transforms::print_params(m)
              // fitted: the sizes aimed at; a reduction of at most 2 kc is taken whole, and
              // remainders split off are tiled to fit (docs/microkernel.md)
              << (fitted ? ", fitted to the nest" : "") << " (" << e->trace.size()
              << " atomic actions)\n"
              << transforms::print_trace(trace);
  }
  return kExitOk;
}

std::string sizes_text(const ir::Program& p) {
  std::string out;
  for (const auto& s : p.sizes)
    out += (out.empty() ? "" : " ") + s.name + "=" + std::to_string(s.value);
  return out;
}

int cmd_guard(const Args& a) {
  if (a.positional.size() != 1) return usage_error("guard takes exactly one FILE", a.json);
  auto target = target_of(a);
  if (!target)
    return usage_error("unknown --target '" + a.get("target") + "' (x86_avx512, x86_avx2, x86_64)",
                       a.json);
  transforms::GuardOptions options;
  options.target = *target;
  int64_t trajectories = 200, steps = 30, seed = 0, max_work = 200000;
  int rc = 0;
  if (!int_option(a, "trajectories", 1, 1000000, &trajectories, &rc) ||
      !int_option(a, "steps", 1, 1000, &steps, &rc) ||
      !int_option(a, "seed", 0, std::numeric_limits<int64_t>::max(), &seed, &rc) ||
      !int_option(a, "max-work", 1, 1000000000, &max_work, &rc))
    return rc;
  options.trajectories = static_cast<int>(trajectories);
  options.max_steps = static_cast<int>(steps);
  options.seed = static_cast<uint64_t>(seed);
  const std::string& file = a.positional[0];
  auto r = ir::load_file(file);
  if (!r.ok()) return report_errors(r.errors(), a.json, file);
  // Every trajectory's result is interpreted: a kernel larger than --max-work runs at a smaller
  // instance (guard_instance).
  ir::Program program = r.value();
  const bool scaled = transforms::interpret_work(program) > static_cast<double>(max_work);
  if (scaled) {
    auto small = transforms::guard_instance(program, static_cast<double>(max_work), *target);
    if (!small)
      return usage_error("no instance of '" + file +
                             "' is small enough to interpret within --max-work " +
                             std::to_string(max_work) + " statement executions; give smaller sizes",
                         a.json);
    program = std::move(*small);
  }
  const bool bar = isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  options.progress = [&](int done, int taken) {
    if (!bar) return;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double f = static_cast<double>(done) / static_cast<double>(options.trajectories);
    const int filled = static_cast<int>(f * 30);
    std::fprintf(
        stderr, "\r[%s%s] %3.0f%%  %d trajectories  %d actions  %.0f trajectories/s  ETA %.0fs   ",
        std::string(filled, '#').c_str(), std::string(30 - filled, '.').c_str(), f * 100, done,
        taken, elapsed > 0 ? done / elapsed : 0.0, f > 0 ? elapsed * (1 - f) / f : 0.0);
    std::fflush(stderr);
  };
  const transforms::GuardReport report = transforms::run_semantics_guard(program, options);
  if (bar) std::fprintf(stderr, "\n");
  if (!report.error.empty()) {
    if (a.json)
      std::cout << JsonObject().add("ok", false).add("file", file).add("error", report.error).str()
                << "\n";
    else
      std::cerr << "perfdojo: " << file << ": " << report.error << "\n";
    return kExitInvalid;
  }
  if (a.json) {
    JsonObject kinds;
    for (int k = 0; k < transforms::kNumKinds; ++k)
      kinds.add(transforms::kind_name(static_cast<transforms::Kind>(k)),
                static_cast<int64_t>(report.kind_counts[k]));
    JsonObject o;
    o.add("ok", !report.failure)
        .add("file", file)
        .add("sizes", sizes_text(program))
        .add("scaled", scaled)
        .add("trajectories", static_cast<int64_t>(report.trajectories))
        .add("actions", static_cast<int64_t>(report.steps))
        .raw("kinds", kinds.str());
    if (report.failure) {
      const transforms::GuardFailure& f = *report.failure;
      JsonArray t;
      for (const auto& act : f.trace) t.add(transforms::print_action(act));
      o.raw("failure", JsonObject()
                           .add("what", f.what)
                           .add("trajectory", static_cast<int64_t>(f.trajectory))
                           .add("seed", std::to_string(f.seed))
                           .raw("trace", t.str())
                           .add("result", f.result)
                           .str());
    }
    std::cout << o.str() << "\n";
  } else {
    std::cout << "guard: " << file << " at " << sizes_text(program)
              << (scaled ? " (scaled down: every result is interpreted)" : "") << "\n";
    if (report.failure) {
      std::cout << "VIOLATION after " << report.trajectories
                << " trajectories: " << transforms::describe(*report.failure, file);
    } else {
      std::cout
          << report.trajectories << " trajectories, " << report.steps
          << " legal actions: every result computes what the original computes\nactions by kind:";
      for (int k = 0; k < transforms::kNumKinds; ++k)
        if (report.kind_counts[k] > 0)
          std::cout << " " << transforms::kind_name(static_cast<transforms::Kind>(k)) << " "
                    << report.kind_counts[k];
      std::cout << "\n";
    }
  }
  return report.failure ? kExitInvalid : kExitOk;
}

}  // namespace

std::vector<Command> transform_commands() {
  return {
      {"actions",
       "actions FILE [--legal-only] [--target T]",
       "list every candidate action with its legality (the text 'apply' accepts)",
       {"target"},
       {"legal-only"},
       cmd_actions},
      {"apply",
       "apply FILE [ACTION ...] [--trace FILE] [--target T]",
       "apply actions (each one quoted argument, e.g. \"tile_scope 0 4\") and print the new IR; "
       "an illegal action is refused with its reason (exit 2)",
       {"trace", "target"},
       {},
       cmd_apply},
      {"sketch",
       "sketch FILE [--path P | --all] [--mr N --nr N --kc N --mc N --nc N --lanes N [--fit]] "
       "[--transposed] [--rows-outer] [--target T] [--ir]",
       "expand the micro-kernel sketch (tile, pack, register tile, vectorise) at a GEMM-class nest "
       "(the first one, after loop fission exposing it, unless --path names one) into atomic "
       "actions; sizes given must divide their extents, unless --fit splits off remainders the "
       "way the sketch does without sizes (aiming at the target's first candidate); --transposed: "
       "the "
       "tile's vectors run along the nest's row iterator (conv2d's output channels); --rows-outer: "
       "the "
       "loop over row panels outside the loop over column panels; --all: every GEMM-class nest "
       "with its first candidate (the optimiser's first "
       "proposal); prints the trace ('apply --trace' replays it) or, with --ir, the IR",
       {"path", "mr", "nr", "kc", "mc", "nc", "lanes", "target"},
       {"ir", "all", "fit", "transposed", "rows-outer"},
       cmd_sketch},
      {"guard",
       "guard FILE [--trajectories 200] [--steps 30] [--seed 0] [--max-work 200000] [--target T]",
       "the semantics guard on one kernel: random trajectories of legal actions (1 to --steps "
       "each), every "
       "result run by the strict interpreter against the original on the same inputs (outputs must "
       "be "
       "equal, no element read before it is written, no element touched by two iterations of one "
       ":par "
       "scope execution with one of them writing, the same bits with the :par iterations run "
       "reversed "
       "and shuffled, and with the :vec scopes run lane-parallel), its trace replayed and its text "
       "parsed back; a "
       "kernel whose interpretation takes more than --max-work statement executions runs at a "
       "smaller "
       "instance; the first violation is printed with its trace (exit 1)",
       {"trajectories", "steps", "seed", "max-work", "target"},
       {},
       cmd_guard},
  };
}

}  // namespace perfdojo::cli
