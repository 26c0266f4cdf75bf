// `x86_avx512`, `x86_avx2`, `x86_64`: generate C, compile it with the machine's compiler, and
// time it in an isolated worker process.
//
// measure(p): check p, look the result up in the cache (BackendConfig::cache_dir), print C
// (codegen_c.h), compile it into a shared object, run it once in the worker (perfdojo-worker)
// on ir::make_inputs(p, seed), verify the outputs, then time warm repetitions (each a batch of
// back-to-back calls lasting about a millisecond) until the spread of the batches falls below
// MeasureOptions::target_spread or the budget is spent. Times are per call.
//
// Verification (MeasureOptions::verify): programs of at most 1e7 flops are compared with the
// reference interpreter on the same inputs. Larger ones are compared with the *sequential* C of
// the same program (annotations ignored, -ffp-contract=off), which checks what this backend adds
// (vector code, threads, unrolling); that printer is itself checked against the interpreter by
// the tests. A large program without annotations has nothing to compare and is reported with
// verified = false; verify large programs end to end on a scaled-down instance of the kernel.
// Tolerance: max relative error 1e-4 for f32 (vectorised reductions reassociate), 1e-9 for f64,
// 0 for i32, the float ones scaled by sqrt(L / 1024) when a reduction sums L > 1024 terms into
// one element (two summation orders legitimately differ by ~eps sqrt(L) times the partial sums);
// a larger error is the error "wrong result: max relative error X ... (tolerance T)".
//
// BackendConfig fields read:
//   threads                       at most this many threads in parallel scopes
//   worker                        path of perfdojo-worker (default: found next to the program)
//   worker_memory_mb              the worker's address-space limit beyond the buffers (8192)
//   verify_interpreter_max_flops  largest program verified with the interpreter (1e7)
//   measure_lock                  false: do not serialise timing with other processes through
//                                 the lock file $TMPDIR/perfdojo-measure.lock
//   keep_build_dir                true: keep the generated sources and objects (for debugging)
//   inject                        TEST HOOK: "segv" | "hang" | "alloc" | "wrong", optionally
//                                 ":BUFFER" to affect only programs declaring BUFFER (see
//                                 CodegenOptions::inject); never set outside tests
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "backends/codegen_c.h"

namespace perfdojo::backends {

/// Instruction set the generated code targets.
enum class X86Isa { kAvx512, kAvx2, kPortable };

/// A new x86 backend for `isa`.
std::unique_ptr<Backend> make_x86_backend(X86Isa isa, const BackendConfig& config);

/// The ISA of a registry name ("x86_avx512", "x86_avx2", "x86_64"), or nullopt.
std::optional<X86Isa> x86_isa_by_name(std::string_view name);
/// The registry name of `isa`.
const char* x86_isa_name(X86Isa isa);
/// The flags passed to `compiler` for `isa` (before -shared -fPIC -o ...). With GCC they include
/// -fno-loop-unroll-and-jam (see the definition).
std::vector<std::string> x86_compile_flags(X86Isa isa, const std::string& compiler = "cc");
/// The libraries linked after the generated source (glibc's libmvec where it exists).
std::vector<std::string> x86_link_libraries();
/// The C the backend compiles for `p` (what `perfdojo codegen` prints).
GeneratedC x86_generate_c(X86Isa isa, const ir::Program& p, const BackendConfig& config = {});
/// The verification tolerance (max relative error) of outputs of type `t` of `p` (see above).
double x86_verification_tolerance(ir::DType t, const ir::Program& p);
/// Peak f32 FMA throughput of one core in GFLOP/s for `isa` (docs: machine.md; the portable
/// figure assumes 4-lane SSE without FMA, a quarter of AVX2).
double x86_peak_gflops_per_core(X86Isa isa);

}  // namespace perfdojo::backends
