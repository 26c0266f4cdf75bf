// `perfdojo actions | apply | sketch`: the action space from the command line.
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/registry.h"
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
  if (!target) return usage_error("unknown --target '" + a.get("target") + "' (x86_avx512, x86_avx2, x86_64)", a.json);
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
      o.add("action", text).add("legal", c.legality.ok()).add("reason", transforms::reason_name(c.legality.reason));
      if (!c.legality.ok()) o.add("explanation", transforms::explain(c.action, c.legality));
      arr.raw(o.str());
    } else if (c.legality.ok()) {
      std::cout << text << "\n";
    } else {
      std::cout << text << "    # illegal: " << transforms::reason_name(c.legality.reason) << "\n";
    }
  }
  if (a.json) {
    std::cout << JsonObject().add("ok", true).add("file", a.positional[0]).add("candidates", total)
                     .add("legal", legal).raw("actions", arr.str()).str() << "\n";
  }
  return kExitOk;
}

int cmd_apply(const Args& a) {
  if (a.positional.empty()) return usage_error("apply takes a FILE and actions", a.json);
  auto target = target_of(a);
  if (!target) return usage_error("unknown --target '" + a.get("target") + "' (x86_avx512, x86_avx2, x86_64)", a.json);
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
      std::string msg = "action " + std::to_string(i + 1) + " refused: " + transforms::explain(trace[i], l);
      if (a.json) {
        std::cout << JsonObject().add("ok", false).add("error", msg).add("action", transforms::print_action(trace[i]))
                         .add("index", static_cast<int64_t>(i)).add("reason", transforms::reason_name(l.reason)).str()
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
    std::cout << JsonObject().add("ok", true).add("text", text).raw("trace", t.str())
                     .add("hash", ir::structural_hash(cur)).str() << "\n";
  } else {
    std::cout << text;
  }
  return kExitOk;
}


int cmd_sketch(const Args& a) {
  if (a.positional.size() != 1) return usage_error("sketch takes exactly one FILE", a.json);
  auto target = target_of(a);
  if (!target) return usage_error("unknown --target '" + a.get("target") + "' (x86_avx512, x86_avx2, x86_64)", a.json);
  const std::string& file = a.positional[0];
  auto r = ir::load_file(file);
  if (!r.ok()) return report_errors(r.errors(), a.json, file);
  if (a.has("all")) {  // every GEMM-class nest, as the optimiser's first proposal
    if (a.values.count("path")) return usage_error("--all sketches every nest; it takes no --path", a.json);
    const transforms::SketchExpansion all = transforms::sketch_program(*r, *target, 0);
    if (all.trace.empty()) {
      ir::Diagnostic d;
      d.loc.file = file;
      d.message = "no GEMM-class nest took the sketch";
      return report_errors({d}, a.json, file);
    }
    if (a.json)
      std::cout << JsonObject().add("ok", true).add("trace", transforms::print_trace(all.trace))
                       .add("text", ir::print_program(all.program)).str()
                << "\n";
    else
      std::cout << (a.has("ir") ? ir::print_program(all.program) : transforms::print_trace(all.trace));
    return kExitOk;
  }
  // Without --path: loop fission first where a GEMM-class nest shares its scopes.
  transforms::SketchExpansion start{{}, *r};
  if (!a.values.count("path")) start = transforms::isolate_gemm_nests(*r, *target);
  const std::vector<transforms::GemmNest> nests = transforms::gemm_nests(start.program);
  transforms::GemmNest nest;
  if (a.values.count("path")) {
    auto act = transforms::parse_action("tile_scope " + a.get("path") + " 2", "<--path>");
    if (!act.ok()) return usage_error("--path '" + a.get("path") + "' is not a path like 0.1", a.json);
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
  transforms::MicrokernelParams m = candidates.empty() ? transforms::MicrokernelParams{} : candidates.front();
  if (a.has("transposed"))  // the first transposed candidate, when the nest has one
    for (const auto& c : candidates)
      if (c.transposed) {
        m = c;
        break;
      }
  bool given = false;
  int rc = kExitOk;
  for (auto [name, field] : {std::pair{"mr", &m.mr}, {"nr", &m.nr}, {"kc", &m.kc}, {"mc", &m.mc},
                             {"nc", &m.nc}, {"lanes", &m.lanes}}) {
    if (!int_option(a, name, name == std::string("nc") ? 0 : 1, 1 << 20, field, &rc)) return rc;
    given = given || a.values.count(name);
  }
  // Sizes given: a plain tile unless --transposed asks (the first candidate may be transposed).
  if (given || a.has("transposed")) m.transposed = a.has("transposed");
  if (given || a.has("rows-outer")) m.rows_outer = a.has("rows-outer");
  // Sizes given: exactly those (each must divide its extent), unless --fit asks for the fitted
  // expansion (remainders split off); else the first candidate, fitted.
  auto e = given && !a.has("fit") ? transforms::expand_microkernel(start.program, nest.path, m, *target)
                 : transforms::expand_microkernel_fitted(start.program, nest.path, m, *target);
  if (!e.ok()) return report_errors(e.errors(), a.json, file);
  std::vector<transforms::Action> trace = start.trace;
  trace.insert(trace.end(), e->trace.begin(), e->trace.end());
  if (a.json) {
    JsonArray t, c, n;
    for (const auto& act : trace) t.add(transforms::print_action(act));
    for (const auto& p : candidates) c.add(transforms::print_params(p));
    for (const auto& g : nests) n.add(transforms::print_path(g.path));
    std::cout << JsonObject().add("ok", true).add("path", transforms::print_path(nest.path))
                     .add("params", transforms::print_params(m)).raw("trace", t.str())
                     .raw("candidates", c.str()).raw("nests", n.str())
                     .add("text", ir::print_program(e->program)).str()
              << "\n";
  } else if (a.has("ir")) {
    std::cout << ir::print_program(e->program);
  } else {
    if (!start.trace.empty())
      std::cout << "# loop fission exposing the GEMM-class nest (" << start.trace.size() << " actions)\n";
    std::cout << "# micro-kernel sketch at " << transforms::print_path(nest.path) << ": "
              << transforms::print_params(m) << " (" << e->trace.size() << " atomic actions)\n"
              << transforms::print_trace(trace);
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> transform_commands() {
  return {
      {"actions", "actions FILE [--legal-only] [--target T]",
       "list every candidate action with its legality (the text 'apply' accepts)",
       {"target"}, {"legal-only"}, cmd_actions},
      {"apply", "apply FILE [ACTION ...] [--trace FILE] [--target T]",
       "apply actions (each one quoted argument, e.g. \"tile_scope 0 4\") and print the new IR; "
       "an illegal action is refused with its reason (exit 2)",
       {"trace", "target"}, {}, cmd_apply},
      {"sketch", "sketch FILE [--path P | --all] [--mr N --nr N --kc N --mc N --nc N --lanes N [--fit]] [--transposed] [--rows-outer] [--target T] [--ir]",
       "expand the micro-kernel sketch (tile, pack, register tile, vectorise) at a GEMM-class nest "
       "(the first one, after loop fission exposing it, unless --path names one) into atomic "
       "actions; sizes given must divide their extents, unless --fit splits off remainders the "
       "way the sketch does without sizes (aiming at the target's first candidate); --transposed: the "
       "tile's vectors run along the nest's row iterator (conv2d's output channels); --rows-outer: the "
       "loop over row panels outside the loop over column panels; --all: every GEMM-class nest with its first candidate (the optimiser's first "
       "proposal); prints the trace ('apply --trace' replays it) or, with --ir, the IR",
       {"path", "mr", "nr", "kc", "mc", "nc", "lanes", "target"}, {"ir", "all", "fit", "transposed", "rows-outer"}, cmd_sketch},
  };
}

}  // namespace perfdojo::cli
