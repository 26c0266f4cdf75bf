// `cuda`: the C printer's CUDA mode (codegen_c.h, CodegenOptions::cuda) compiled by nvcc from
// the CUDA toolkit for a chosen architecture (BackendConfig::cuda_arch: sm_80 by default, sm_90,
// ...), run where a GPU is present and verified against the interpreter there.
//
// The mapping is deliberately plain: each top-level nest is one kernel launch, in program order;
// a nest whose top scope is `:par` runs one thread per iteration of it (blocks of 256), any
// other nest runs on one thread; temporaries live in device memory; `perfdojo_entry` copies the
// inputs in, launches, and copies the outputs back. Block and shared-memory mappings, vector
// loads and register tiles are not printed yet (docs/cuda.md).
//
// measure(p): the time is the cost model's on the built-in "a100" profile (an NVIDIA A100's
// published figures, docs/cuda.md), so the env and the optimiser run anywhere. With verify, the
// program is compiled by nvcc (an error is the measurement's error); when it is small enough to
// interpret it is run, and on a machine without a GPU that run reports "no GPU" and the result
// is unverified. On a GPU the outputs are compared with the interpreter's.
#pragma once

#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/codegen_c.h"
#include "backends/cross_backend.h"

namespace perfdojo::backends {

/// The nvcc the backend runs: $PERFDOJO_NVCC, else `nvcc` on PATH, else the CUDA toolkit's
/// /usr/local/cuda/bin/nvcc; "" when there is none.
std::string find_nvcc();

/// `cuda`: CUDA C++ compiled by nvcc for `arch` (sm_80, sm_90, ...), run natively where a GPU is
/// present, modelled on the built-in "a100" profile.
CrossTarget cuda_target(const std::string& arch = "sm_80");

/// The CUDA unit of `p` (kernels and host entry; no driver). `ns`: wrap it in that namespace.
GeneratedC cuda_generate(const ir::Program& p, const std::string& ns = "",
                         const BackendConfig& config = {});

/// A new `cuda` backend.
std::unique_ptr<Backend> make_cuda_backend(const BackendConfig& config);

}  // namespace perfdojo::backends
