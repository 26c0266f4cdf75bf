// The references the benchmark programs compare generated kernels with: OpenBLAS's sgemm and the
// measured FMA peak of one core.
//
// A program that includes this header calls util::choose_openblas_core (util/openblas_core.h)
// first thing in main, so the baseline is OpenBLAS at its best on this CPU.
#pragma once

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backends/backend.h"
#include "util/openblas_core.h"

extern "C" char* openblas_get_corename(void);

namespace perfdojo::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Explicit FMA intrinsics: the C++ build is ISO mode, where GCC does not contract a * b + c.
__attribute__((target("avx512f"))) inline double fma_chains_avx512(long iters) {
  __m512 a[12], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int k = 0; k < 12; ++k) a[k] = _mm512_set1_ps(static_cast<float>(k));
  for (long i = 0; i < iters; ++i) {
    for (int k = 0; k < 12; ++k) a[k] = _mm512_fmadd_ps(a[k], m, c);
  }
  double s = 0;
  for (int k = 0; k < 12; ++k) s += _mm512_reduce_add_ps(a[k]);
  return s;
}

__attribute__((target("avx2,fma"))) inline double fma_chains_avx2(long iters) {
  __m256 a[12], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int k = 0; k < 12; ++k) a[k] = _mm256_set1_ps(static_cast<float>(k));
  for (long i = 0; i < iters; ++i) {
    for (int k = 0; k < 12; ++k) a[k] = _mm256_fmadd_ps(a[k], m, c);
  }
  float out[8];
  double s = 0;
  for (int k = 0; k < 12; ++k) {
    _mm256_storeu_ps(out, a[k]);
    s += out[0];
  }
  return s;
}

/// The FMA peak of one core in GFLOP/s at `lanes` f32 lanes (16: AVX-512, 8: AVX2): the best of
/// `rounds` runs of 12 independent chains of vector FMAs (the best, because a shared machine only
/// ever makes a run slower).
inline double peak_gflops(int lanes, int rounds = 5) {
  const long iters = 20'000'000;
  double best = 0;
  volatile double sink = 0;
  for (int r = 0; r < rounds; ++r) {
    double t0 = now_s();
    sink = sink + (lanes == 16 ? fma_chains_avx512(iters) : fma_chains_avx2(iters));
    double t = now_s() - t0;
    best = std::max(best, 2.0 * lanes * 12 * static_cast<double>(iters) / t * 1e-9);
  }
  return best;
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
