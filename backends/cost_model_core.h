// The cost model's core model of a flattened program: how the generated C runs each scope
// (unrolled, vectorised and with how many lanes; which small temporaries live in registers), the
// instructions, ports and dependence chains of each loop body, loop and fork overheads, and the
// bytes each cache level serves. Internal to the cost model.
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "backends/cost_model_flat.h"

namespace perfdojo::backends::cost_detail {

struct NestCost {
  double core_cycles = 0;  // compute and L1 (per-body maxima, threads applied)
  double l1_cycles = 0;    // the part of core_cycles where loads or stores bound
  double overhead_cycles = 0;
  double bytes[4] = {};
  double level_s[4] = {};
};

// How the generated C runs a scope's iterations: `lanes` at a time (an explicit `:vec` scope,
// or a loop GCC -O3 vectorises on its own), in `chunks` = ceil(extent / lanes) steps.
struct ScopeRun {
  double lanes = 1;
  bool outer_vectorised = false;  // GCC vectorises this loop across its iterations (outer-loop)
  double chunks = 1;
  double trips = 1;       // steps of this scope over the whole run: product of chunks down to it
  bool unrolled = false;  // written out as copies: no loop bookkeeping, copies can be registers
  /// The scope of 4 inside a `:vec` scope of u8 x i8 dot products (transforms/dot_product.h)
  /// that one vpdpbusd per register runs: 1 chunk, no lanes of its own.
  bool dot = false;
};

// The Model's vectors, kept per thread with the Flat: their storage outlives one estimate.
struct ModelStorage {
  std::vector<NestCost> nests;
  std::vector<ScopeRun> run;
  std::vector<char> reg_early, reg;
  std::vector<std::pair<double, int>> group_cycles;
  // Scratch of the plan and of compute_groups.
  std::vector<char> early, unrolled, flat, flat_late, has_vec, done;
  std::vector<double> copies;
  std::vector<int> group, owners;
};

// One statement's totals as cost_group sums them over a group.
struct GroupTotals {
  double fp = 0, ld = 0, st = 0, uops = 0, div = 0, chain = 0, l1_bytes = 0;
  double streams = 0;  // accesses that issue loads or stores (candidates for SSR streams)
};

struct OpCounts {
  double fp = 0;     // add, mul, fma, max, min, compare-select, cast: one pipe slot each
  double div = 0;    // divides and square roots (the divider)
  double trans = 0;  // exp, log, tanh
};

struct Model {
  const MachineProfile& m;
  const Flat& f;
  ModelStorage& x;
  std::vector<NestCost>& nests = x.nests;
  double freq_hz = m.freq_ghz * 1e9;
  std::vector<ScopeRun>& run = x.run;
  // Small temporaries whose every index is fixed once unrolled scopes are written out (and
  // vector scopes expanded) become registers: before vectorisation (`reg_early`, GCC's scalar
  // replacement can then privatise them per lane) and in the final code (`reg`: no loads or
  // stores at all).
  std::vector<char>& reg_early = x.reg_early;
  std::vector<char>& reg = x.reg;
  // Per group: core cycles, parallel scope.
  std::vector<std::pair<double, int>>& group_cycles = x.group_cycles;

  // Cycles between two entries of parallel scope p: everything outside it, spread over its
  // entries (its threads idle that long).
  double fork_gap_cycles(int p, double entries) const {
    double outside = 0;
    for (const auto& [cycles, par] : group_cycles)
      if (par != p) outside += cycles;
    return outside / std::max(entries, 1.0);
  }

  double par_speedup(int par) const {
    if (par < 0) return 1;
    double e = static_cast<double>(f.scopes[par].extent);
    double t = std::min<double>(std::max(m.cores, 1), e);
    return std::max(0.05, e / std::ceil(e / t) * (t > 1 ? m.parallel_efficiency : 1.0));
  }

  // FMA-pipe instructions per cycle at a width (f32 lanes; 1 = scalar).
  double pipe_rate(double lanes) const {
    double peak = lanes > 8   ? m.peak_gflops_avx512
                  : lanes > 1 ? m.peak_gflops_avx2
                              : m.peak_gflops_scalar;
    double width = lanes > 8 ? 16 : lanes > 1 ? 8 : 1;
    if (m.vector_lanes > 0) {  // a core that names its one vector width (cross targets)
      peak = lanes > 1 ? m.peak_gflops_vector : m.peak_gflops_scalar;
      width = lanes > 1 ? m.vector_lanes : 1;
    } else if (peak <= 0) {
      peak = m.peak_gflops_avx2;
      width = 8;
    }
    return std::max(0.25, peak / (2.0 * width * m.freq_ghz));
  }
  /// vpdpbusd instructions per cycle (each `lanes` x 4 products), 0 without VNNI.
  double dot_rate(double lanes) const {
    return m.peak_gops_vnni > 0 ? m.peak_gops_vnni / (8.0 * lanes * m.freq_ghz) : 0;
  }
  /// Whether scope `q`, the only child of a `:vec` scope, is the scope of 4 of a u8 x i8 dot
  /// product the C printer prints as vpdpbusd on a machine with VNNI.
  bool dot_scope(int q) const;

  // Whether GCC's vectoriser can take the iterations of depth d over every statement inside
  // `scope`: every access unit-stride or invariant in them, no libm call (no vector variants
  // without -ffast-math), and no float reduction into an element invariant in them
  // (reassociation is not allowed). A reduction into a register temporary is allowed when
  // `private_registers` (it is re-initialised per iteration of an outer vectorised loop).
  bool vectorisable(int scope, int d, bool private_registers) const;

  // Decides, per scope, whether its iterations are written out (`:unroll`, or a small loop GCC
  // unrolls completely) and how many lanes they run with (`:vec`, or GCC's loop, outer-loop and
  // straight-line vectorisers, tried in that order as GCC -O3 does).
  void plan_vectors();
  // Its steps: which scopes are written out, which temporaries become registers, the lanes of
  // each scope, and the steps each scope takes.
  void plan_unrolling();
  void plan_registers();
  void plan_lanes();
  bool plan_outer_loop(int s, double native);
  void plan_straight_line(int s, double native);
  void plan_trips();
  double chunks_of(const ScopeInfo& sc, const ScopeRun& r) const;

  // Whether an access invariant in the scope at depth k may be hoisted out of it: always
  // outside OpenMP regions (the kernel's pointers are `restrict`), inside only for an explicit
  // vector scope's own accumulator.
  bool unaliased_outside_par(const StmtInfo& s, int k, int vdepth) const;
  // Whether a statement stores to a kernel parameter (an input or output buffer, not a
  // temporary: those are the kernel's own arrays, which GCC tells apart from any pointer).
  bool stores_to_parameter(const StmtInfo& s) const;
  // Whether any statement inside scope s stores to a kernel parameter.
  bool subtree_stores_to_parameter(int s) const;

  // Groups the statements by the loop their instructions sit in and costs each group.
  void compute_groups();
  // One group: the statements whose nearest enclosing non-vector scope is `owner` (-1: top
  // level). Totals over the whole run: instructions, ports, issue and dependence chains.
  void cost_group(int owner, const std::vector<int>& stmts);
  // Its parts for one statement: the depth and lanes of its vectorised scope (-1 and 1 when
  // none), its loads and stores, and the dependence chain through its reduction target.
  std::pair<int, double> stmt_lanes(const StmtInfo& s) const;
  void memory_instructions(const StmtInfo& s, int vdepth, double lanes, double hoist_regs,
                           GroupTotals& t) const;
  double reduction_chain(const StmtInfo& s, const OpCounts& ops) const;

  // Loop overhead outside innermost bodies, loop entries and parallel forks.
  void loop_overheads();
  // Bytes each level serves, from the reuse model at each capacity; the initial values' fill
  // into `overhead_s`.
  void memory_traffic(double& overhead_s);

  // Bytes served from below a cache of `cap` bytes during `mult` executions of scope s.
  void traffic(int s, double mult, double cap, int level);
  int par_of(int s) const;
  // Bytes one execution of a statement brings in when nothing around it stays cached: a line
  // per access (`cost`: weighted when the innermost loop strides past a line per step).
  double stmt_bytes(int si, bool cost) const;
  void add_traffic(int nest, int level, double bytes, double cost, int par);
};

}  // namespace perfdojo::backends::cost_detail
