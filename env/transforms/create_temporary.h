// create_temporary PATH BUF: cache the region of BUF that one iteration of the scope at PATH
// touches in a new temporary (register / local-memory blocking).
//
// With S the scope at PATH (depth d), every access of BUF inside S must use one identical index
// I, unless S only reads BUF: then each distinct index is cached as below in a temporary of its
// own (copy-ins in order of first use, no copy-out), so C = A A^T, which reads A[{i},{k}] and
// A[{j},{k}], packs A's row block and its column panel apart. The iterators of I deeper than d,
// in increasing depth, become the temporary's dimensions (extent: the largest scope at that
// depth holding an access); without any, it is `[1]` accessed
// `[0]`. The layout thus follows the loop order, not BUF's: with B[{k},{jo}*32+{ji}] and scopes
// jo, k, ji the temporary is [jo][k][ji], a BLIS-style packed panel (this move is the packing
// move). When S writes BUF the map from those iterators to BUF's elements must be injective
// (each iterator in one dimension; the terms of a dimension a mixed radix, as tiling leaves
// them: 8*{io}+{ii} with ii < 8), so distinct elements land in distinct temporary elements; when
// S only reads BUF any map is exact (a sliding window 1*{oh}+1*{kh} copies duplicates). The body
// of S becomes: a copy-in nest `BUF_t[..] = BUF[I']`, the old body with BUF[I] -> BUF_t[..], and,
// when S writes BUF, a copy-out nest `BUF[I'] = BUF_t[..]`. The copy-in is left out when the
// first statement of S (in program order) touching BUF stores the whole region with plain `=`
// without reading BUF: later reads find what S stored, and a copy-in would read values about to
// be overwritten (for a temporary without an initial value, memory never written). The copy-in
// stores BUF's initial value (`BUF_t[..] = 0`) instead of loading it when the region still holds
// that value at every iteration of S: BUF has one, no statement outside S writes it before S's
// top-level nest ends (pointwise-conv's later bias nest may), and no two iterations of S and the
// scopes around it touch one element (conv2d's output tile: one visit per element; not
// matmul's C under a blocked reduction, which every block revisits).
// Refused when S is vectorised, parallel or GPU-mapped, or lies in a parallel or GPU-mapped
// scope: the temporary is one storage shared by every iteration of those scopes.
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `create_temporary` (no change is made).
Legality check_create_temporary(const ir::Program& p, const Action& a, const Target& t,
                                const ProgramIndex* index = nullptr);
/// The mask's verdicts for `create_temporary` from the program summary (see PrecheckFn).
Precheck precheck_create_temporary(MaskSummary& summary, const MaskSite& site,
                                   std::span<const int64_t> params);
/// Applies a legal `create_temporary`.
ir::Program apply_create_temporary(const ir::Program& p, const Action& a, const Target& t);

}  // namespace perfdojo::transforms
