// `interpreter`: runs the reference interpreter and reports its wall time. Needs no compiler;
// useful to exercise the env end to end anywhere. Not a performance signal.
#pragma once

#include "backends/backend.h"

namespace perfdojo::backends {

/// A new interpreter backend.
std::unique_ptr<Backend> make_interpreter_backend(const BackendConfig& config);

}  // namespace perfdojo::backends
