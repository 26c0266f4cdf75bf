// widen_buffer BUF: a temporary of a narrow type (bf16, f16, i8, u8) holds its elements in the
// type they are computed in instead (f32 or i32; docs/ir.md, "Narrow types"). A packed panel of
// bf16 weights becomes an f32 panel: the micro-kernel that reads it is the f32 one, its loads
// plain vector loads, and the conversion is paid once per element as the panel is packed.
//
// Legal when BUF is a temporary without an initial value, some statement writes it, and every
// statement writing it is a plain store (`=`) of one load of a buffer of BUF's own type. Each
// stored value is then already representable in the narrow type, so storing it narrowed or not
// gives the same value, and every read of BUF sees what it saw before: bit for bit.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `widen_buffer` (no change is made).
Legality check_widen_buffer(const ir::Program& p, const Action& a, const Target& t,
                            const ProgramIndex* index = nullptr);
/// The mask's verdicts for `widen_buffer` from the program summary (see PrecheckFn).
Precheck precheck_widen_buffer(MaskSummary& summary, const MaskSite& site,
                               std::span<const int64_t> params);
/// Applies a legal `widen_buffer`: the declaration's type becomes its compute type.
ir::Program apply_widen_buffer(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
