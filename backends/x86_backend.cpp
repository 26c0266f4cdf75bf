#include "backends/x86_backend.h"

#include "backends/interpreter_backend.h"

namespace perfdojo::backends {

// Placeholder until code generation lands.
std::unique_ptr<Backend> make_x86_backend(X86Isa, const BackendConfig& config) {
  return make_interpreter_backend(config);
}

}  // namespace perfdojo::backends
