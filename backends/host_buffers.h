// Kernel buffers in host memory, shared by the backends that run generated code (x86 in its
// worker's shared region, the cross targets through a file): the interpreter's doubles written
// as the element type and read back, outputs prefilled as the interpreter starts them, and the
// verification of outputs against a reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "ir/interp.h"
#include "ir/ir.h"

namespace perfdojo::backends {

/// Writes `v` at `dst` as elements of type `t`.
void write_tensor(uint8_t* dst, ir::DType t, const std::vector<double>& v);
/// Reads buffer `b`'s elements from `src`.
ir::Tensor read_tensor(const uint8_t* src, const ir::BufferDecl& b);
/// Outputs without an initial value start as the interpreter starts them: NaN (0 for i32), so a
/// kernel reading one before writing it shows up in verification.
void prefill_outputs(uint8_t* base, const std::vector<const ir::BufferDecl*>& params,
                     const std::vector<size_t>& offs);
/// The printer's test hook for `p` (CodegenOptions::inject) from `config.inject`:
/// "KIND" for every program, "KIND:BUFFER" only for programs that declare BUFFER.
std::string codegen_test_hook(const BackendConfig& config, const ir::Program& p);

/// How compare_outputs decides (docs/ir.md, "Verification").
struct Comparison {
  /// Bit for bit (NaN equals NaN): the code keeps the IR's order and rounding (GeneratedC::exact)
  /// and `want` is the interpreter's, so any difference is a bug.
  bool exact = false;
  /// Otherwise, when given: the interpreter's error bounds for `want` (InterpretOptions::
  /// error_bounds); an element passes within kBoundFactor times its bound plus two units in the
  /// last place of the value.
  const std::map<std::string, ir::Tensor>* bounds = nullptr;
  // Neither: the relative tolerance (x86_verification_tolerance), for results compared with a
  // sequential build at a size the interpreter cannot run.
};
/// A reordering of the same operations stays within a small multiple of the running bound.
inline constexpr double kBoundFactor = 4;

/// Compares each output in `got` with `want` as `how` says. Sets m.max_rel_error and
/// m.verification ("exact", "bound" or "tolerance"); false, with m.error naming the first
/// output and element that fails.
bool compare_outputs(const ir::Program& p, const std::map<std::string, ir::Tensor>& got,
                     const std::map<std::string, ir::Tensor>& want, Measurement& m,
                     const Comparison& how = {});

}  // namespace perfdojo::backends
