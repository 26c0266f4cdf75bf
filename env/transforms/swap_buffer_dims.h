// swap_buffer_dims BUF I: exchange dimensions I and I+1 of BUF's layout.
//
// A temporary is relaid in place: its shape and every access's index list are permuted. An
// input keeps its layout (the caller supplies it): a packed copy `BUF_pN` with the swapped
// layout is filled by a new nest at the start of the body and every read of BUF reads the copy.
// An output keeps its layout too (the caller reads it): it is staged in a copy `BUF_pN` with the
// swapped layout and the output's initial value, every access of BUF uses the copy, and a new
// nest at the end of the body writes the copy back (a transposed convolution's output computed
// with its channels contiguous). An output without an initial value is refused (kDependence):
// the write-back could read an element of the copy that nothing wrote. I must satisfy
// 0 <= I < rank-1 (kBadParameter); an unused buffer is kNothingToDo. Refused (kAnnotated) when an
// access inside a vectorised scope would stop being unit-stride or invariant in its lanes.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `swap_buffer_dims` (no change is made).
Legality check_swap_buffer_dims(const ir::Program& p, const Action& a, const Target& t,
                                const ProgramIndex* index = nullptr);
/// The mask's verdicts for `swap_buffer_dims` from the program summary (see PrecheckFn).
Precheck precheck_swap_buffer_dims(MaskSummary& summary, const MaskSite& site,
                                   std::span<const int64_t> params);
/// Applies a legal `swap_buffer_dims`.
ir::Program apply_swap_buffer_dims(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
