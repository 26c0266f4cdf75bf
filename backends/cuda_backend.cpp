#include "backends/cuda_backend.h"

#include <cstdlib>

#include "backends/cross_backend.h"
#include "util/process.h"

namespace perfdojo::backends {

std::string find_nvcc() {
  if (const char* e = std::getenv("PERFDOJO_NVCC"); e && *e) return util::find_executable(e);
  if (auto p = util::find_executable("nvcc"); !p.empty()) return p;
  return util::find_executable("/usr/local/cuda/bin/nvcc");
}

GeneratedC cuda_generate(const ir::Program& p, const std::string& ns, const BackendConfig& config) {
  return cross_generate_c(cuda_target(), p, config, ns);
}

std::unique_ptr<Backend> make_cuda_backend(const BackendConfig& config) {
  auto it = config.extra.find("cuda_arch");
  return make_cross_backend(cuda_target(it == config.extra.end() ? "sm_80" : it->second), config);
}

}  // namespace perfdojo::backends
