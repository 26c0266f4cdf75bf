// The optimiser's setup: modes and their settings, the architecture parsed once into an ISA,
// and the cost model's machine profile (given, cached or calibrated). Internal to the optimiser
// except for what optimizer.h declares.
#pragma once

#include <string>

#include "backends/backend.h"
#include "backends/machine_profile.h"
#include "backends/x86_backend.h"

namespace perfdojo::optimizer::detail {

// The cost model's profile for this machine: given, from the environment, cached, or measured
// now (and cached). Sets config.machine_profile to a readable file; returns where it came from.
std::string resolve_profile(backends::BackendConfig& config, backends::MachineProfile* out);

// The FMA peak per core of `isa` on the machine `profile` describes (GFLOP/s).
double peak_gflops(backends::X86Isa isa, const backends::MachineProfile& profile);

}  // namespace perfdojo::optimizer::detail
