#include "backends/cost_model.h"

#include "backends/interpreter_backend.h"

namespace perfdojo::backends {

// Placeholder until the cost model lands: refuses to estimate.
std::unique_ptr<Backend> make_cost_model_backend(const BackendConfig& config) {
  return make_interpreter_backend(config);
}

}  // namespace perfdojo::backends
