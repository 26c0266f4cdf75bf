// `x86_avx512`, `x86_avx2`, `x86_64`: generate C, compile it with the machine's compiler, and
// time it in an isolated worker process.
#pragma once

#include "backends/backend.h"

namespace perfdojo::backends {

/// Instruction set the generated code targets.
enum class X86Isa { kAvx512, kAvx2, kPortable };

/// A new x86 backend for `isa`.
std::unique_ptr<Backend> make_x86_backend(X86Isa isa, const BackendConfig& config);

}  // namespace perfdojo::backends
