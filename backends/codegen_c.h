// The C printer behind the x86 backends: one translation unit per program, readable, with the IR
// statement each line comes from in a comment. It prints any checked program; annotations it
// cannot honour safely (a `:vec` body it cannot vectorise) become plain loops, never wrong code.
//
// The unit defines `void kernel(T* restrict BUF, ...)` over the input then output buffers in
// declaration order (inputs `const`), and `void perfdojo_entry(void* const* bufs)`, which calls
// kernel with bufs[i] as its i-th parameter (what the measuring worker calls).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace perfdojo::backends {

/// Version of the printer's output; part of every result-cache key so a new printer re-measures.
inline constexpr const char* kCodegenVersion = "c15";

/// Vector registers the accumulators of one `:vec` scope share, rotated over the copies of an
/// unrolled scope right around it so their updates are in flight together (the cost model counts
/// the same chains).
inline constexpr int64_t kAccumulatorRegisters = 8;

/// What the printer may use. The defaults honour every annotation.
struct CodegenOptions {
  std::string target = "x86";  ///< named in the banner comment only
  bool vectorize = true;       ///< `:vec` scopes become GCC vector-extension code
  bool parallel = true;        ///< `:par` scopes become `#pragma omp parallel for` loops
  /// With `parallel`: the threads each such loop runs on (`num_threads`), so the kernel uses the
  /// cores it was measured on, not whatever OpenMP finds; 0 leaves the choice to OpenMP.
  int threads = 0;
  bool unroll = true;       ///< `:unroll` scopes are unrolled
  int64_t max_unroll = 64;  ///< larger `:unroll` scopes get `#pragma GCC unroll` instead
  int64_t max_unrolled_copies =
      1024;  ///< nested unrolling stops (plain loops) beyond this many copies
  int64_t small_temp_elements = 256;  ///< temporaries up to this size are locals (registers)
  int native_vector_bytes = 64;       ///< register width; wider `:vec` scopes print in chunks
  /// Vector exp/log/tanh call glibc's libmvec (link with -lmvec); else one libm call per lane.
  bool libmvec = false;
  /// Vector stores to buffers declared `stream` are x86 non-temporal stores (immintrin.h) when
  /// the address is aligned to the vector; else every store is a plain one.
  bool stream_stores = false;
  /// Widest register of the int8 dot-product instruction (vpdpbusd): 64 with AVX-512 VNNI (its
  /// 256-bit form too), 32 with AVX-VNNI only, 0 without. A `:vec` scope of 4-term u8 x i8 dot
  /// products (transforms/dot_product.h) prints as one instruction per register where it fits,
  /// the kernel compiled for the feature (a target attribute); elsewhere as the loop it is.
  int vnni_bytes = 0;
  /// AArch64 with the int8 matrix-multiply extension's mixed-sign dot product (usdot, i8mm):
  /// a `:vec` scope of 4 such lanes (16 bytes) prints as one vusdotq_s32, the kernel compiled
  /// for +i8mm (the cross targets run it under qemu's `-cpu max`).
  bool arm_usdot = false;
  /// A register tile's copy-in (a fully unrolled nest filling a local temporary from another
  /// buffer, followed by a loop: the tile's updates) prefetches, before that loop, the lines the
  /// copy reads in the enclosing loop's next iteration (BLIS prefetches the next tile of C the
  /// same way). matmul-1024's 8 x 32 sketch: 0.96x to 1.02x OpenBLAS.
  bool prefetch_tiles = true;
  /// An indirect read of a table's row (docs/ir.md, "Indirect indices") in a loop whose iterator
  /// walks its index buffer in order: at each iteration, prefetch the row the index element this
  /// many positions later names (its lines up to 1 KiB), so that the random rows' memory latency
  /// overlaps the work on earlier ones, as FBGEMM's embedding kernels do. 0: none.
  int64_t gather_prefetch = 16;
  /// CUDA C++ instead of C (cuda_backend.h): every top-level nest becomes a `__global__` kernel
  /// (one thread per iteration of its top-level `:par` scope, else one thread), temporaries live
  /// in device memory, and `perfdojo_entry` (host code) copies, launches and copies back.
  /// Vector annotations print as plain loops; `:unroll` as in C.
  bool cuda = false;
  /// With `cuda`: wrap the unit in this namespace (several units in one file); "" for none, then
  /// `perfdojo_entry` is `extern "C"`.
  std::string cuda_namespace;
  /// Test hook, never set in production: "segv" (the kernel crashes), "hang" (never returns),
  /// "alloc" (allocates until the memory limit, then crashes), "wrong" (adds 1 to the first
  /// output element), "uninit" (adds a value read from memory nothing wrote to the first output
  /// element). "" prints the program as it is.
  std::string inject;
};

/// The printed unit and the printer's decisions.
struct GeneratedC {
  std::string source;
  int vector_scopes = 0;     ///< `:vec` scopes printed as vector code
  int scalar_fallbacks = 0;  ///< `:vec` scopes printed as plain loops (reason in a comment)
  int streamed_stores = 0;   ///< vector stores printed as non-temporal stores
  int prefetched_tiles = 0;  ///< register-tile copies whose next iteration is prefetched
  /// The code computes every value as the interpreter does, bit for bit: each operation in the
  /// IR's order with its rounding (a fused multiply-add only where the IR has one). False where
  /// it reassociates (vector partial sums or products combined across lanes or register sets)
  /// or calls vector math (libmvec's exp, log, tanh, sin, cos), and for CUDA (device math).
  bool exact = false;
  bool fuses = false;              ///< the code calls fma (the IR's fma and fused updates)
  std::vector<std::string> notes;  ///< one line per fallback: why the scope stayed scalar
};

/// The C translation unit for a checked program.
GeneratedC generate_c(const ir::Program& p, const CodegenOptions& options = {});

/// Buffers passed to `kernel`, in parameter order: inputs then outputs, each in declaration order.
std::vector<const ir::BufferDecl*> kernel_parameters(const ir::Program& p);

}  // namespace perfdojo::backends
