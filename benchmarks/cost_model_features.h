// Features of a program and of the cost model's estimate of it, written per sample by
// `cost_model_quality --features OUT.csv` to study where the analytical model errs (and to try
// corrections offline). A ridge regression of log(measured / estimated) on these features,
// fitted on three kernels and tested on the fourth, did not improve the ranking
// (docs/cost_model.md), so no learned correction ships; the model's fixes are analytical rules.
#pragma once

#include <array>

#include "backends/cost_model.h"
#include "ir/ir.h"

namespace perfdojo::backends {

/// The features, in order (every one dimensionless, about -10..10):
///  0 bias (1)
///  1-4 log of each part's share of the estimate: compute, L1, L2 and L3+DRAM time
///  5 log of the overhead's share
///  6 share of statement executions inside :vec scopes
///  7 share that are reductions into a target the innermost loop does not move, outside
///    :vec (a scalar dependence chain unless the compiler reassociates, which it may not)
///  8 share whose innermost loop reads or writes with a stride other than 0 or 1
///  9 share whose innermost loop runs at most 4 times or is unrolled
/// 10 log(1 + statements in the code once :unroll scopes are written out) / 5
/// 11 1 when a :par scope exists
/// 12 log(1 + temporaries)
/// 13 log of the estimated GFLOP/s over the profile's vector FMA peak (0 without flops)
inline constexpr int kModelFeatures = 14;
using ModelFeatures = std::array<double, kModelFeatures>;

/// The features of `p` with its analytical estimate `e` on machine `m`.
ModelFeatures model_features(const ir::Program& p, const CostEstimate& e, const MachineProfile& m);

}  // namespace perfdojo::backends
