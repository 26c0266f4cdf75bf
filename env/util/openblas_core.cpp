#include "util/openblas_core.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace perfdojo::util {

const char* openblas_core() {
  using CoreName = char* (*)();
  auto f = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return f ? f() : nullptr;
}

void choose_openblas_core(char** argv, const char* program, bool quiet) {
  if (!openblas_core()) return;
  auto again = [&](const char* stage) {
    setenv("PERFDOJO_OPENBLAS_STAGE", stage, 1);
    execv("/proc/self/exe", argv);
    std::perror("execv");
    std::exit(1);
  };
  const char* stage = std::getenv("PERFDOJO_OPENBLAS_STAGE");
  if (!stage && std::getenv("OPENBLAS_CORETYPE")) {
    if (!quiet)
      std::fprintf(stderr, "%s: re-executing without OPENBLAS_CORETYPE=%s\n", program,
                   std::getenv("OPENBLAS_CORETYPE"));
    unsetenv("OPENBLAS_CORETYPE");
    again("cpuid");
  }
  if (stage && std::strcmp(stage, "forced") == 0) return;
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool avx512 = false, avx2 = false;
#endif
  const char* core = openblas_core();
  // Cores with kernels at least as wide as the CPU's vectors.
  auto one_of = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (std::strcmp(core, n) == 0) return true;
    return false;
  };
  const bool good = avx512 ? one_of({"SkylakeX", "Cooperlake", "SapphireRapids"})
                    : avx2 ? one_of({"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen"})
                           : true;
  if (good) return;
  const char* want = avx512 ? "SkylakeX" : "Haswell";
  if (!quiet)
    std::fprintf(
        stderr, "%s: OpenBLAS chose core %s for this CPU; re-executing with OPENBLAS_CORETYPE=%s\n",
        program, core, want);
  setenv("OPENBLAS_CORETYPE", want, 1);
  again("forced");
}

const char* openblas_core_note() {
  const char* stage = std::getenv("PERFDOJO_OPENBLAS_STAGE");
  return stage && std::strcmp(stage, "forced") == 0
             ? "OPENBLAS_CORETYPE set: CPUID gave a generic core"
             : "chosen by CPUID";
}

}  // namespace perfdojo::util
