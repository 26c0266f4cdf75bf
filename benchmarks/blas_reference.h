// OpenBLAS as the reference the benchmark programs compare generated matmuls with.
//
// OpenBLAS picks its kernel when the library loads, from OPENBLAS_CORETYPE (the project's
// machines set it to Haswell, a slow choice on newer cores); a program that includes this header
// calls `reexec_without_openblas_coretype` first thing in main, so OpenBLAS chooses by CPUID.
#pragma once

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace perfdojo::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Runs this program again without OPENBLAS_CORETYPE when it is set (returns only when unset).
inline void reexec_without_openblas_coretype(char** argv, const char* program) {
  if (!std::getenv("OPENBLAS_CORETYPE")) return;
  std::fprintf(stderr, "%s: re-executing without OPENBLAS_CORETYPE=%s\n", program,
               std::getenv("OPENBLAS_CORETYPE"));
  unsetenv("OPENBLAS_CORETYPE");
  execv("/proc/self/exe", argv);
  std::perror("execv");
  std::exit(1);
}

/// Median seconds of `reps` row-major cblas_sgemm calls C[M,N] = A[M,K] B[K,N] on `threads`
/// threads, after two warm-up calls.
inline double sgemm_seconds(int m, int n, int k, int threads, int reps) {
  openblas_set_num_threads(threads);
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n),
      c(static_cast<size_t>(m) * n);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<float>((i * 7919) % 1000) / 500.0f - 1.0f;
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<float>((i * 104729) % 1000) / 500.0f - 1.0f;
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n,
                0.0f, c.data(), n);
  };
  run();
  run();
  std::vector<double> t;
  for (int r = 0; r < std::max(1, reps); ++r) {
    double t0 = now_s();
    run();
    t.push_back(now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace perfdojo::bench
