// `cost_model`: an analytical, deterministic estimate of a program's run time from the IR alone.
//
// One walk of the tree gives, per loop body, the instructions one iteration issues (vector
// scopes divide by lanes, invariant operands are hoisted, small temporaries live in registers)
// and the dependence chains through reduction targets; a reuse model per loop level gives the
// bytes each cache level serves. Each top-level nest then costs the largest of its compute time
// and its traffic per level over that level's bandwidth (a roofline per nest), plus overheads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/machine_profile.h"

namespace perfdojo::backends {

/// Which resource bounds an estimate.
enum class Bound { kCompute, kL1, kL2, kL3, kDram, kOverhead };

/// "compute", "L1", "L2", "L3", "DRAM", "overhead".
const char* bound_name(Bound b);

/// The model's estimate with its parts (times in seconds, traffic in bytes).
struct CostEstimate {
  double time_s = 0;       ///< the estimate
  double flops = 0;        ///< flop_count(p)
  double compute_s = 0;    ///< instruction issue, ports and dependence chains (threads applied)
  double bytes[4] = {};    ///< served by L1 (loads and stores), L2, L3 and DRAM
  double level_s[4] = {};  ///< time each level needs for its bytes (threads applied)
  double overhead_s = 0;   ///< loop bookkeeping outside inner bodies, forks, the call itself
  Bound bound = Bound::kCompute;  ///< the part that dominates the estimate
};

/// What estimate_cost worked out for each top-level node of the last program it estimated with
/// this memo. The IR is immutable and a transformation shares the nodes it did not change, so
/// the next program's unchanged nests are copied instead of analysed again (their loop tree,
/// accesses, cache lines and footprints; the whole-program parts are always redone). The
/// estimate is bit-identical with or without one. Not thread-safe: one per caller (each
/// cost-model backend holds its own). A copy starts empty.
class CostMemo {
 public:
  CostMemo();
  ~CostMemo();
  CostMemo(const CostMemo&);
  CostMemo& operator=(const CostMemo&);
  /// Forgets everything.
  void clear();
  /// Nests remembered (those of the last program).
  size_t size() const;
  /// Nests copied from, and nests analysed, since construction.
  uint64_t hits() const;
  uint64_t misses() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  friend CostEstimate estimate_cost(const ir::Program&, const MachineProfile&, CostMemo*);
};

/// Estimates `p` on the machine `m`. Deterministic; never throws on a checked program.
CostEstimate estimate_cost(const ir::Program& p, const MachineProfile& m);
/// The same, reusing what `memo` (may be null) remembers of `p`'s unchanged nests.
CostEstimate estimate_cost(const ir::Program& p, const MachineProfile& m, CostMemo* memo);

/// A new cost-model backend (reads config.machine_profile when set; a profile that cannot be
/// loaded makes every measurement return that error).
std::unique_ptr<Backend> make_cost_model_backend(const BackendConfig& config);

}  // namespace perfdojo::backends
