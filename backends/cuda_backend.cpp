#include "backends/cuda_backend.h"

#include <cstdlib>

#include "util/process.h"

namespace perfdojo::backends {

std::string find_nvcc() {
  if (const char* e = std::getenv("PERFDOJO_NVCC"); e && *e) return util::find_executable(e);
  if (auto p = util::find_executable("nvcc"); !p.empty()) return p;
  return util::find_executable("/usr/local/cuda/bin/nvcc");
}

CrossTarget cuda_target(const std::string& arch) {
  CrossTarget t;
  t.name = "cuda";
  t.profile = "a100";
  t.compiler = find_nvcc().empty() ? "nvcc" : find_nvcc();
  // -x cu: the unit is CUDA whatever its name; static cudart needs no GPU to link.
  // --fmad=false: nvcc contracts a * b + c by default; the IR says where a fused multiply-add is.
  t.flags = {"-O3", "-std=c++17", "-x", "cu", "-arch=" + arch, "--fmad=false", "-w"};
  t.vector_bytes = 4;  // no vector code: parallelism is threads
  t.packages = "the CUDA toolkit (nvcc)";
  t.cuda = true;
  return t;
}

GeneratedC cuda_generate(const ir::Program& p, const std::string& ns, const BackendConfig& config) {
  return cross_generate_c(cuda_target(), p, config, ns);
}

std::unique_ptr<Backend> make_cuda_backend(const BackendConfig& config) {
  return make_cross_backend(cuda_target(config.cuda_arch), config);
}

namespace {
const CrossTarget& default_cuda() {
  static const CrossTarget kCuda = cuda_target();
  return kCuda;
}
[[maybe_unused]] const bool kCudaBackendRegistered =
    register_cross_target(&default_cuda()) &&
    register_backend("cuda", 20, [](const BackendConfig& c) { return make_cuda_backend(c); });
}  // namespace

}  // namespace perfdojo::backends
