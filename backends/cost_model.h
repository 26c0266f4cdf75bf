// `cost_model`: an analytical, deterministic estimate of a program's run time from the IR alone.
//
// One walk of the tree gives, per loop body, the instructions one iteration issues (vector
// scopes divide by lanes, invariant operands are hoisted, small temporaries live in registers)
// and the dependence chains through reduction targets; a reuse model per loop level gives the
// bytes each cache level serves. Each top-level nest then costs the largest of its compute time
// and its traffic per level over that level's bandwidth (a roofline per nest), plus overheads.
#pragma once

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
  double time_s = 0;     ///< the estimate
  double flops = 0;      ///< flop_count(p)
  double compute_s = 0;  ///< instruction issue, ports and dependence chains (threads applied)
  double bytes[4] = {};  ///< served by L1 (loads and stores), L2, L3 and DRAM
  double level_s[4] = {};  ///< time each level needs for its bytes (threads applied)
  double overhead_s = 0;   ///< loop bookkeeping outside inner bodies, forks, the call itself
  Bound bound = Bound::kCompute;  ///< the part that dominates the estimate
};

/// Estimates `p` on the machine `m`. Deterministic; never throws on a checked program.
CostEstimate estimate_cost(const ir::Program& p, const MachineProfile& m);

/// A new cost-model backend (reads config.machine_profile when set; a profile that cannot be
/// loaded makes every measurement return that error).
std::unique_ptr<Backend> make_cost_model_backend(const BackendConfig& config);

}  // namespace perfdojo::backends
