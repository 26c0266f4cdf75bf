// `cost_model`: an analytical, deterministic estimate of a program's run time from the IR alone.
#pragma once

#include "backends/backend.h"

namespace perfdojo::backends {

/// A new cost-model backend (reads config.machine_profile when set).
std::unique_ptr<Backend> make_cost_model_backend(const BackendConfig& config);

}  // namespace perfdojo::backends
