// OpenBLAS picks its kernels once, when the library loads: from OPENBLAS_CORETYPE if set, else by
// CPUID, where a CPU newer than the library falls back to a generic core (Debian 12's OpenBLAS
// calls a recent AVX-512 Xeon "Prescott": SSE3 kernels at about a fifth of its sgemm speed, and
// LibTorch's matrix products run on it). A program that relies on OpenBLAS, directly or through
// LibTorch, calls `choose_openblas_core` first thing in main.
#pragma once

namespace perfdojo::util {

/// The core OpenBLAS chose ("SkylakeX", "Haswell", "Prescott"...), or nullptr when the process
/// has no OpenBLAS (looked up at run time, so another BLAS simply has no name).
const char* openblas_core();

/// Makes OpenBLAS run its best kernels for this CPU; returns in the process that will use them.
/// First it lets OpenBLAS choose by CPUID (running the program again without a preset
/// OPENBLAS_CORETYPE, which some machines set to a slower core); when that choice is a generic
/// core although the CPU has AVX-512 (or AVX2 and FMA), it runs the program again with
/// OPENBLAS_CORETYPE=SkylakeX (or Haswell). What was done is said on stderr, unless `quiet`, and
/// by `openblas_core_note()`. Without OpenBLAS in the process it does nothing.
void choose_openblas_core(char** argv, const char* program, bool quiet = false);

/// How the core was chosen, for reports: "chosen by CPUID" or why OPENBLAS_CORETYPE was set.
const char* openblas_core_note();

}  // namespace perfdojo::util
