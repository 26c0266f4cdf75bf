#include "transforms/semantics_guard.h"

#include <algorithm>
#include <cstdlib>
#include <random>
#include <sstream>

#include "ir/check.h"
#include "ir/interp.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "transforms/registry.h"

namespace perfdojo::transforms {

namespace {
bool has_annotation(const std::vector<ir::NodePtr>& body, ir::Annot a) {
  for (const auto& n : body)
    if (n->is_scope && (n->annot == a || has_annotation(n->body, a))) return true;
  return false;
}
}  // namespace

GuardReport run_semantics_guard(const ir::Program& original, const GuardOptions& options) {
  GuardReport report;
  const auto inputs = ir::make_inputs(original, options.input_seed);
  // Strict: any read of an element nothing wrote is an error, dead values included (what
  // generated code would read from uninitialised memory).
  // Races too: two iterations of one :par execution touching an element, one writing it.
  const ir::InterpretOptions strict{.forbid_uninitialised_reads = true, .detect_races = true};
  auto expected = ir::interpret(original, inputs, strict);
  if (!expected.ok()) {
    report.error = "the original does not run: " + expected.error_text();
    return report;
  }
  for (int t = 0; t < options.trajectories; ++t) {
    const uint64_t seed = options.seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(t + 1));
    std::mt19937_64 rng(seed);
    const int steps = std::uniform_int_distribution<int>(1, std::max(1, options.max_steps))(rng);
    ir::Program cur = original;
    std::vector<Action> trace;
    ++report.trajectories;
    auto fail = [&](std::string what) {
      report.failure = GuardFailure{t, seed, trace, std::move(what), ir::print_program(cur)};
      return report;
    };
    for (int s = 0; s < steps; ++s) {
      auto a = sample_legal_action(cur, options.target, rng);
      if (!a) break;
      trace.push_back(*a);
      auto next = apply(cur, *a, options.target);
      if (!next.ok()) return fail("a legal action was refused: " + next.error_text());
      cur = std::move(next).value();
      ++report.kind_counts[static_cast<int>(a->kind)];
      ++report.steps;
    }
    if (auto errors = ir::check_program(cur); !errors.empty())
      return fail("the result no longer checks: " + errors[0].str());
    auto got = ir::interpret(cur, inputs, strict);
    if (!got.ok()) return fail(got.error_text());
    for (const auto& b : original.buffers) {
      if (b.role != ir::Role::kOutput) continue;
      const double err = ir::max_relative_error(expected->at(b.name), got->at(b.name));
      if (err != 0) {
        std::ostringstream m;
        m << "output '" << b.name << "' differs (max relative error " << err << ")";
        return fail(m.str());
      }
    }
    // A race-free program computes the same bits whatever order its :par iterations run in.
    if (has_annotation(cur.body, ir::Annot::kParallel)) {
      for (auto order :
           {ir::InterpretOptions::ParOrder::kReverse, ir::InterpretOptions::ParOrder::kShuffle}) {
        ir::InterpretOptions o = strict;
        o.par_order = order;
        o.shuffle_seed = seed;
        auto other = ir::interpret(cur, inputs, o);
        if (!other.ok()) return fail(other.error_text());
        for (const auto& b : original.buffers)
          if (b.role == ir::Role::kOutput &&
              ir::max_relative_error(got->at(b.name), other->at(b.name)) != 0)
            return fail(
                "output '" + b.name + "' changes when the :par iterations run " +
                (order == ir::InterpretOptions::ParOrder::kReverse ? "in reverse" : "shuffled"));
      }
    }
    if (has_annotation(cur.body, ir::Annot::kVector)) {
      ir::InterpretOptions o = strict;
      o.simd_vectors = true;
      auto lanes = ir::interpret(cur, inputs, o);
      if (!lanes.ok()) return fail(lanes.error_text());
      for (const auto& b : original.buffers)
        if (b.role == ir::Role::kOutput &&
            ir::max_relative_error(got->at(b.name), lanes->at(b.name)) != 0)
          return fail("output '" + b.name +
                      "' changes when the :vec scopes run lane-parallel, as vector code does");
    }
    auto parsed = parse_trace(print_trace(trace));
    if (!parsed.ok()) return fail("the printed trace does not parse: " + parsed.error_text());
    auto replayed = replay(original, parsed.value(), options.target);
    if (!replayed.ok()) return fail("the printed trace does not replay: " + replayed.error_text());
    if (!ir::structurally_equal(replayed.value(), cur))
      return fail("the replayed trace gives another program");
    auto reparsed = ir::load_program(ir::print_program(cur));
    if (!reparsed.ok()) return fail("the printed result does not parse: " + reparsed.error_text());
    if (!ir::structurally_equal(reparsed.value(), cur))
      return fail("the printed result parses to another program");
    if (options.progress) options.progress(report.trajectories, report.steps);
  }
  return report;
}

std::optional<ir::Program> guard_instance(const ir::Program& p, double max_work, const Target& t) {
  ir::Program cur = p;
  while (interpret_work(cur) > max_work) {
    std::vector<size_t> order(cur.sizes.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return cur.sizes[a].value > cur.sizes[b].value; });
    bool smaller = false;
    for (size_t i : order) {
      const std::string name = cur.sizes[i].name;
      const int64_t v = cur.sizes[i].value;
      if (v <= 1) continue;
      int64_t to = v / 2;
      if (to >= 8) to -= to % 4;
      auto alone =
          resize(cur, [&](const std::string& n, int64_t old) { return n == name ? to : old; });
      if (!alone) {  // a size tied to it by the indices: move the sizes near it by as much
        alone = resize(cur, [&](const std::string& n, int64_t old) {
          return n == name || (std::abs(old - v) <= 8 && old + (to - v) >= 1) ? old + (to - v)
                                                                              : old;
        });
      }
      if (!alone) continue;
      cur = std::move(*alone);
      smaller = true;
      break;
    }
    if (!smaller) {
      auto small = small_instance(p, {}, t, max_work);
      if (!small) return std::nullopt;
      return small->first;
    }
  }
  return cur;
}

std::string describe(const GuardFailure& f, const std::string& kernel) {
  return f.what + "\nkernel " + kernel + ", trajectory " + std::to_string(f.trajectory) +
         ", seed " + std::to_string(f.seed) + ", trace:\n" + print_trace(f.trace) + "result:\n" +
         f.result;
}

}  // namespace perfdojo::transforms
