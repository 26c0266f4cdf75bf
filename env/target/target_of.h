// The one conversion from what a backend can run (backends::Capabilities) to what the
// transformations check against (transforms::Target): the env, the optimiser, the agents'
// tools and the trace validator all take it from here, so a new capability is added once.
#pragma once

#include <string>

#include "backends/backend.h"
#include "transforms/action.h"

namespace perfdojo {

/// The transformations' target for `backend` (named `arch`): its vector widths and registers,
/// whether and on how many threads parallel scopes run, streaming stores, and fused
/// multiply-adds (transforms::target_has_fma of the name).
transforms::Target target_of(const backends::Backend& backend, const std::string& arch);

/// target_of(backend, backend.name()).
transforms::Target target_of(const backends::Backend& backend);

}  // namespace perfdojo
