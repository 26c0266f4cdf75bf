// The register-tile ceiling: what a broadcast-FMA micro-kernel of the shape the micro-kernel
// sketch builds reaches on this core, so that a GEMM-class figure can be read against what the
// core can do with loads in the loop, not only against the FMA peak (12 chains of FMAs on
// registers, no loads).
//
// The tile: MR rows of two vectors each (AVX-512: 12 x 32 floats, 24 zmm accumulators; AVX2:
// 6 x 16, 12 ymm), kc = 256, A packed k-major (MR floats per k, broadcast), B packed (two vectors
// per k), C loaded before and stored after the k loop. Two placements of B:
//  - in L1: one panel (32 KiB / 16 KiB), every call on the same one: the core's rate with a load
//    of B and MR broadcasts per k;
//  - streamed from L2: 32 panels (1 MiB / 512 KiB) in turn, each call on the next, with the A
//    panel in L1 and a C tile of its own per panel: the loop order of the sketch's rows-outer
//    expansion, where B comes from L2 once per row panel.
// Each is the best of `rounds` runs (a shared machine only ever makes a run slower).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "blas_reference.h"

namespace perfdojo::bench {

struct TileCeiling {
  int mr = 0, nr = 0, kc = 0;
  double l1_gflops = 0;  // B in L1
  double l2_gflops = 0;  // B streamed from L2
};

namespace detail {

template <int MR>
__attribute__((target("avx512f"))) __attribute__((noinline)) void tile_avx512(int kc,
                                                                              const float* a,
                                                                              const float* b,
                                                                              float* c, int ldc) {
  __m512 acc[MR][2];
  // Every loop over the tile fully unrolled, or GCC keeps the accumulators in memory.
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = _mm512_loadu_ps(c + i * ldc);
    acc[i][1] = _mm512_loadu_ps(c + i * ldc + 16);
  }
  for (int k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + 32 * k), b1 = _mm512_load_ps(b + 32 * k + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 x = _mm512_set1_ps(a[MR * k + i]);
      acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc[i][0]);
    _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
  }
}

template <int MR>
__attribute__((target("avx2,fma"))) __attribute__((noinline)) void tile_avx2(int kc, const float* a,
                                                                             const float* b,
                                                                             float* c, int ldc) {
  __m256 acc[MR][2];
  // Every loop over the tile fully unrolled, or GCC keeps the accumulators in memory.
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = _mm256_loadu_ps(c + i * ldc);
    acc[i][1] = _mm256_loadu_ps(c + i * ldc + 8);
  }
  for (int k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b + 16 * k), b1 = _mm256_load_ps(b + 16 * k + 8);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m256 x = _mm256_broadcast_ss(a + MR * k + i);
      acc[i][0] = _mm256_fmadd_ps(x, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(x, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(c + i * ldc, acc[i][0]);
    _mm256_storeu_ps(c + i * ldc + 8, acc[i][1]);
  }
}

struct FreeAligned {
  void operator()(float* p) const { std::free(p); }
};
using Floats = std::unique_ptr<float[], FreeAligned>;

inline Floats aligned_floats(size_t n, float scale) {
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  Floats p(static_cast<float*>(std::aligned_alloc(64, bytes)));
  for (size_t i = 0; i < n; ++i) p[i] = scale * static_cast<float>(i % 7) - scale * 3;
  return p;
}

}  // namespace detail

/// The ceiling at `lanes` f32 lanes (16: AVX-512, 8: AVX2) on the calling thread's core.
inline TileCeiling tile_ceiling(int lanes, int rounds = 5) {
  constexpr int kc = 256, panels = 32;
  TileCeiling out;
  out.mr = lanes == 16 ? 12 : 6;
  out.nr = 2 * lanes;
  out.kc = kc;
  const int mr = out.mr, nr = out.nr, ldc = panels * nr;
  auto tile = lanes == 16 ? &detail::tile_avx512<12> : &detail::tile_avx2<6>;
  detail::Floats a = detail::aligned_floats(static_cast<size_t>(kc) * mr, 1e-3f);
  detail::Floats b = detail::aligned_floats(static_cast<size_t>(kc) * nr * panels, 1e-3f);
  detail::Floats c = detail::aligned_floats(static_cast<size_t>(mr) * ldc, 0.0f);
  const double flops_per_call = 2.0 * mr * nr * kc;
  // About 2 GFLOP a round: ~10 ms at AVX-512 rates, long enough to be past any warm-up.
  const long calls =
      std::max<long>(panels, static_cast<long>(2e9 / flops_per_call) / panels * panels);
  volatile float sink = 0;
  for (int streamed = 0; streamed < 2; ++streamed) {
    double best = 0;
    for (int r = 0; r < rounds; ++r) {
      const double t0 = now_s();
      for (long i = 0; i < calls; ++i) {
        const int p = streamed ? static_cast<int>(i % panels) : 0;
        tile(kc, a.get(), b.get() + static_cast<size_t>(p) * kc * nr, c.get() + p * nr, ldc);
      }
      const double t = now_s() - t0;
      best = std::max(best, flops_per_call * static_cast<double>(calls) / t * 1e-9);
      sink = sink + c[0];
    }
    (streamed ? out.l2_gflops : out.l1_gflops) = best;
  }
  return out;
}

}  // namespace perfdojo::bench
