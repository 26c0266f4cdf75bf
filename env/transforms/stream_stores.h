// stream_stores BUFFER: the buffer's vector stores become non-temporal (x86's _mm512_stream_ps
// and kin): they go to memory without first reading each line for ownership, and leave no line
// in cache. A result the kernel never reads back and that does not fit in cache then costs one
// pass over memory instead of two (RMSNorm's or softmax's output, a large elementwise map).
// Never changes semantics: it says how stores run, not what they store, and the generated kernel
// ends with a store fence. Legal on an output or temporary that some plain store writes, that no
// statement reads (a load or a reduction's read of its target), on a target with such stores.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `stream_stores` (no change is made).
Legality check_stream_stores(const ir::Program& p, const Action& a, const Target& t,
                             const ProgramIndex* index = nullptr);
/// The mask's verdicts for `stream_stores` from the program summary (see PrecheckFn).
Precheck precheck_stream_stores(MaskSummary& summary, const MaskSite& site,
                                std::span<const int64_t> params);
/// Applies a legal `stream_stores`: the declaration gains `stream`.
ir::Program apply_stream_stores(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
