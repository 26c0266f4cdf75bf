// The action registry: one table row per transformation (stable id, name, location and
// parameter kinds, what its check reads, check, precheck, apply), and the operations built on it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
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
ir::Result<ir::Program> replay(const ir::Program& p, const std::vector<Action>& trace,
                               const Target& t);

/// `p` with its sizes set by `set` (name, old value -> new value), dimensions and extents written
/// with a size name following; nullopt when the result no longer checks.
std::optional<ir::Program> resize(const ir::Program& p,
                                  const std::function<int64_t(const std::string&, int64_t)>& set);

/// `p` with every size (or only the size named `only`) divided by `g` where that keeps it whole;
/// dimensions and extents written with a size name follow it. nullopt when the result no longer
/// checks (e.g. `HI = H + 2`).
std::optional<ir::Program> scale_sizes(const ir::Program& p, int64_t g,
                                       const std::string& only = "");

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
                                                                  const Target& t,
                                                                  double max_work = 2e7);

/// The fixed parameter values of the width, index and no-parameter kinds (documented in
/// docs/actions.md). The same set on every target, so an action space is one across backends: a
/// width the target lacks is refused by the check (unsupported_by_target), not left out; the
/// widths' order puts the target's native width first (vector_width_params(t)). Factor
/// kinds have no fixed set (empty here): their values are derived at each scope (factor_values).
const std::vector<int64_t>& param_values(ParamKind k, const Target& t);

/// The sizes a register tile is made of on any target: 2 to 8 rows (broadcasts), and 1 to 4
/// vectors of every width vector_width_params offers: 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48,
/// 64. The same on every target, like the widths.
const std::vector<int64_t>& register_fit_sizes();

/// Up to kMaxParams parameter values, ascending; no allocation.
struct ParamList {
  std::array<int64_t, kMaxParams> v{};
  int n = 0;
  std::span<const int64_t> span() const { return {v.data(), static_cast<size_t>(n)}; }
  const int64_t* begin() const { return v.data(); }
  const int64_t* end() const { return v.data() + n; }
  /// The position of `x`, or -1.
  int find(int64_t x) const;
};

/// The values a factor kind (tile_scope, unroll, split_range) offers at a scope of extent `e`,
/// ascending, derived from the extent and the register-fit sizes rather than a fixed list:
/// - tile_scope: the divisors d of e with 2 <= d < e;
/// - unroll: the divisors d of e with 2 <= d <= min(e, kMaxUnroll), e itself included;
/// - split_range: the register-fit sizes f < e that do not divide e (the first part then tiles
///   by f, the rest is the remainder).
/// Where more than param_slots(k) qualify (32 for tile_scope, 16 for the others: 5040 has 58
/// divisors), those nearest a register-fit size or a power of two (in log2) are kept, the smaller
/// on a tie. A value's slot depends only on the kind and e. Empty for a kind that takes no factor.
ParamList factor_values(Kind k, int64_t e);

/// How many parameter slots kind k has in the flat space: kMaxParams (32) for tile_scope, 16 for
/// the other factor kinds, the size of its fixed set otherwise.
int param_slots(Kind k);

/// The parameter values of kind k at a scope of extent `e` (ignored by kinds whose values are
/// fixed) on target `t`: factor_values for factor kinds, param_values otherwise.
ParamList params_at(Kind k, int64_t e, const Target& t = Target{});
/// The vector widths (f32 lanes) every target's action space offers: 16, 8, 4, 2 (x86 AVX-512
/// and AVX2, NEON and SVE at 128/256 bits, RVV at 64).
const std::vector<int64_t>& vector_width_params();
/// The same widths in the order target `t`'s width slots hold them: the target's widest first,
/// then the narrower ones descending, then those wider than it (which it lacks) ascending. Slot
/// 0 is "the native vector" on every target (16 on AVX-512, 8 on AVX2, 4 on NEON, 2 on RVV), so
/// a policy trained on one ISA proposes the same move on another; a target without vectors
/// keeps 16, 8, 4, 2.
const std::vector<int64_t>& vector_width_params(const Target& t);

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
std::optional<Action> sample_legal_action(const ir::Program& p, const Target& t,
                                          std::mt19937_64& rng);
/// Only the legal ones.
std::vector<Action> legal_actions(const ir::Program& p, const Target& t);

}  // namespace perfdojo::transforms
