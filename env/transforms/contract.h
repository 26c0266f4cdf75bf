// contract: where a product meets a sum, compute the two with one rounding (a fused multiply-add).
//
// The IR says exactly where a fused multiply-add happens: `fma(a, b, c)` in an expression and the
// fused update `t[..] = fma(x, y, t[..])` (a `+=` of a product, docs/ir.md "Contraction"); the
// code generators print those as FMA instructions and everything else without contraction, so
// the generated code computes what the interpreter computes. `contract` is the rewrite that
// introduces them, bottom-up and deterministically, in f32 and f64 statements:
//   `t += x * y`            -> t = fma(x, y, t)
//   `x * y + z`, `z + x * y` -> fma(x, y, z)   (both sides products: the left one fuses)
//   `x * y - z`             -> fma(x, y, -z)
//   `z - x * y`             -> fma(-x, y, z)
// It is not semantics-preserving bit for bit: each fused pair rounds once instead of twice (the
// result is at least as accurate). So it is not a move in the action space; the optimiser and
// the env apply it to the whole program first where the mode allows it and the target has FMA
// instructions (Target::fma), as `-ffp-contract=on` would, and `perfdojo fmt --contract` prints it.
// Select conditions, casts' integer operands and i32 statements are left alone.
#pragma once

#include "ir/ir.h"
#include "transforms/action.h"

namespace perfdojo::transforms {

/// The program with every contractible multiply-add fused (above); `count`, when given, gets
/// the number fused.
ir::Program contract(const ir::Program& p, int* count = nullptr);

/// Whether contraction applies on `target`: it has FMA instructions (x86_64 without AVX does not).
bool contracts_on(const Target& target);

}  // namespace perfdojo::transforms
