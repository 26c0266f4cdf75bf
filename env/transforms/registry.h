// The action registry: one table row per transformation (stable id, name, location and
// parameter kinds, what its check reads, check, precheck, apply), and the operations built on it.
#pragma once

#include <functional>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/ir.h"
#include "transforms/action.h"
#include "transforms/transform.h"

namespace perfdojo::transforms {

/// One registry row: a kind's three functions (its file pair, see transform.h). Its names,
/// location, parameter and what its check reads come from the same row of
/// PERFDOJO_TRANSFORM_KINDS (kind_name, loc_kind, param_kind, reads).
struct TransformInfo {
  Kind kind;
  CheckFn check;
  PrecheckFn precheck;
  ApplyFn apply;
};

/// The table, indexed by Kind.
const std::vector<TransformInfo>& registry();

/// Legality of `a` on `p`; never throws, never changes `p`.
Legality check(const ir::Program& p, const Action& a, const Target& t);
/// The same verdict, faster when many actions are checked on one program: `index` must have been
/// built from `p` (analysis.h).
Legality check(const ir::Program& p, const Action& a, const Target& t, const ProgramIndex& index);
/// Applies `a` when legal; an illegal action is refused with the explanation as a diagnostic.
ir::Result<ir::Program> apply(const ir::Program& p, const Action& a, const Target& t);
/// Replays a trace from `p`; stops at the first illegal action, naming its line.
ir::Result<ir::Program> replay(const ir::Program& p, const std::vector<Action>& trace, const Target& t);

/// `p` with its sizes set by `set` (name, old value -> new value), dimensions and extents written
/// with a size name following; nullopt when the result no longer checks.
std::optional<ir::Program> resize(const ir::Program& p,
                                  const std::function<int64_t(const std::string&, int64_t)>& set);

/// `p` with every size (or only the size named `only`) divided by `g` where that keeps it whole;
/// dimensions and extents written with a size name follow it. nullopt when the result no longer
/// checks (e.g. `HI = H + 2`).
std::optional<ir::Program> scale_sizes(const ir::Program& p, int64_t g, const std::string& only = "");

/// What interpreting `p` costs: statement executions (scope iterations x statements).
double interpret_work(const ir::Program& p);

/// A smaller instance of `p` on which `trace` still replays, small enough to interpret
/// (`max_work` scope iterations x statements): {small original, small result}. Tries dividing all
/// sizes by 1, 2, 4, ... 4096, then halving one size at a time (sizes tied by indices, like a
/// convolution's), then giving each size the smallest value the trace replays on (residues of
/// split_range and blocks that are not powers of two: 1024 rows as 1020 + 4 fit 124); nullopt
/// when none fits.
std::optional<std::pair<ir::Program, ir::Program>> small_instance(const ir::Program& p,
                                                                  const std::vector<Action>& trace,
                                                                  const Target& t, double max_work = 2e7);

/// The fixed parameter values tried for each parameter kind (documented in docs/actions.md). The
/// same on every target, so an action space is one across backends: a width the target lacks is
/// refused by the check (unsupported_by_target), not left out.
const std::vector<int64_t>& param_values(ParamKind k, const Target& t);
/// The vector widths (f32 lanes) every target's action space offers: 16, 8, 4, 2 (x86 AVX-512
/// and AVX2, NEON and SVE at 128/256 bits, RVV at 64).
const std::vector<int64_t>& vector_width_params();

/// An action together with its verdict.
struct Candidate {
  Action action;
  Legality legality;
};

/// Every candidate action on `p` (every kind x location x parameter value), unchecked, in the
/// canonical order: kinds in registry order, then locations, then parameter values.
std::vector<Action> candidate_actions(const ir::Program& p, const Target& t);
/// Every candidate action on `p` with its legality.
std::vector<Candidate> enumerate(const ir::Program& p, const Target& t);
/// A random legal action: a kind uniformly among those with a legal candidate, then one of its
/// legal candidates (so the many tile factors do not crowd out the rarer transformations);
/// nullopt when nothing is legal. Checks candidates one at a time, not the whole mask.
std::optional<Action> sample_legal_action(const ir::Program& p, const Target& t, std::mt19937_64& rng);
/// Only the legal ones.
std::vector<Action> legal_actions(const ir::Program& p, const Target& t);

}  // namespace perfdojo::transforms
