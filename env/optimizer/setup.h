// The optimiser's setup: modes and their settings, the architecture parsed once into an ISA,
// and the cost model's machine profile (given, cached or calibrated). Internal to the optimiser
// except for what optimizer.h declares.
#pragma once

#include <functional>
#include <string>

#include "backends/backend.h"
#include "backends/machine_profile.h"
#include "backends/x86_backend.h"

namespace perfdojo::optimizer::detail {

// The machine's one-minute load average (what calibration asks before it keeps a profile).
using LoadSource = std::function<double()>;

// The cost model's profile for this machine: given, from the environment, cached, or measured
// now (and cached unless `load`, /proc/loadavg when empty, says other jobs kept the cores
// busy). Sets config.machine_profile to a readable file; returns where it came from.
std::string resolve_profile(backends::BackendConfig& config, backends::MachineProfile* out,
                            const LoadSource& load = {});

// The FMA peak per core of `isa` on the machine `profile` describes (GFLOP/s).
double peak_gflops(backends::X86Isa isa, const backends::MachineProfile& profile);

}  // namespace perfdojo::optimizer::detail
