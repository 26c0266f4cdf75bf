// The micro-kernel sketch: a macro-move in the spirit of Ansor's sketches that takes a GEMM-class
// nest to the BLIS structure in one step and expands into atomic moves, so that traces, replay
// and legality stay atomic (docs/microkernel.md walks through one expansion).
//
// A GEMM-class nest is perfectly nested scopes over one `+=` statement: one iterator j with unit
// stride in the target's last dimension (and in no other), at least one reduction (an iterator
// the target does not use; k, the main one, is the outermost, the others keep their order), and
// a row iterator i among the target's others (the largest used by an operand that does not use
// j). The target's remaining
// iterators are batch scopes, kept outermost; the other reductions stay inside the register
// tile: matmul, bmm, attention's two products, mlp's layer, conv2d (i = output channel, j = the
// output column, k = input channel, batch = image and output row, kh and kw inside).
// With the caller's block sizes the expansion is, with every step checked by its own check:
//
//   order      swap_scopes until the nest is batch.. i j k reductions..
//   tile       k by kc (moved outermost), [j by nc (outermost)], i by mc, j by nr, i by mr,
//              giving  batch.. [Nc] Ko Mo No Mio Ki reductions.. Mii Ni
//   pack       create_temporary of each input indexed by k and j at Ko: a [No][Ki][Ni] panel,
//              each nr-wide column panel contiguous over k; of each input indexed by i and k at
//              Mo: a [Mio][Ki][Mii] block, each mr-high row panel contiguous over k
//   register   create_temporary of the target at Mio: an mr x nr accumulator tile, copied in,
//   tile       updated kc times, copied out
//   vectorise  the tile's nests (lanes wide), their column chunks and rows unrolled so the code
//              generator keeps the tile in mr * nr / lanes vector registers; then (optional
//              steps: a refusal drops the step, not the sketch) Ki unrolled by 2 and the panel
//              copies vectorised where their innermost loop is unit-stride
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/ir.h"
#include "transforms/action.h"

namespace perfdojo::transforms {

/// Block sizes of the micro-kernel sketch. For expand_microkernel every size must divide the
/// extent it tiles (a size equal to the extent leaves its level out); any divisor, not only the
/// factors the agent's action space offers.
struct MicrokernelParams {
  int64_t mr = 8;      ///< rows of the register tile (i)
  int64_t nr = 32;     ///< columns of the register tile (j), a multiple of `lanes`
  int64_t kc = 256;    ///< depth of the packed panels (k)
  int64_t mc = 64;     ///< rows of a packed A block (i), a multiple of mr
  int64_t nc = 0;      ///< columns of a packed B panel (j); 0: the whole extent
  int64_t lanes = 16;  ///< vector width in elements
  /// The register tile's columns are the nest's row iterator and its rows the unit-stride column
  /// (gemm_nest_at with `transposed`): conv2d's output channels as vectors, the output columns
  /// broadcast, as oneDNN's direct convolution does. The tile is unit-stride in the temporary but
  /// not in the target, so it is copied in and out element by element, and the broadcast operand
  /// is read where it lies (packing it would copy the input once per output row).
  bool transposed = false;
  /// The loop over the mr-row panels outside the loop over the nr-column panels (BLIS runs them
  /// the other way): consecutive tiles share an A micro-panel, which stays in L1, and walk along
  /// C's rows, where the BLIS order jumps mr rows of C at every tile (stores and the next loads
  /// a multiple of 4 KiB apart); B's panels then come from L2 at every tile.
  bool rows_outer = false;
  /// The reduction in the lanes, for nests of at most 4 rows whose operands are unit-stride in k (a
  /// GEMV over a few batches: y[b,n] = sum_k W[n,k] x[b,k]): k in chunks of `lanes`, the chunk
  /// loop outside an unrolled tile of nr columns x all mr = m rows of vector partial sums, which
  /// the code generator keeps in registers across it; nothing is packed (each weight is used
  /// only m times). kc = k's extent, mc = mr.
  bool dot = false;
  bool operator==(const MicrokernelParams&) const = default;
};

/// "mr=8 nr=32 kc=256 mc=64 lanes=16" (nc only when set, " transposed" and " rows_outer" when
/// set).
std::string print_params(const MicrokernelParams& m);

/// The roles of a GEMM-class nest.
struct GemmNest {
  Path path;                ///< the outermost scope of the nest
  int scopes = 3;           ///< perfectly nested scopes from `path` down to the statement
  int i = 0, j = 0, k = 0;  ///< positions (0 = outermost) of the row, column and main reduction
  std::vector<int> batch;   ///< positions of the target's other iterators (bmm's batch, conv's h)
  std::vector<int> reductions;   ///< positions of the other reduction scopes (conv's kh, kw)
  int64_t m = 0, n = 0, kk = 0;  ///< extents of i, j and k
  std::string target;            ///< the buffer the statement reduces into
  bool transposed = false;       ///< i and j exchanged (MicrokernelParams::transposed)
  bool transposable = false;     ///< gemm_nest_at with `transposed` would take it
  int64_t inner = 1;  ///< the product of the other reductions' extents (conv2d's kh x kw)
  bool operands_unit_k = false;       ///< every operand has k in its last dimension only, stride 1
  ir::DType dtype = ir::DType::kF32;  ///< the target buffer's element type (f64: half the lanes)
};

/// The nest at `path` if it is GEMM-class, else why not (a diagnostic at the scope's source).
/// With `transposed`, i and j (and m and n) are exchanged: the columns of the register tile are
/// the row iterator, which some operand must use without the unit-stride column (the panel the
/// tile loads as vectors once packed: conv2d's filters); refused when none does.
ir::Result<GemmNest> gemm_nest_at(const ir::Program& p, const Path& path, bool transposed = false);
/// Every GEMM-class nest of `p`, outermost first.
std::vector<GemmNest> gemm_nests(const ir::Program& p);

/// The expansion: the atomic actions and the program they lead to.
struct SketchExpansion {
  std::vector<Action> trace;
  ir::Program program;
};

/// Expands the sketch at the GEMM-class nest at `path` of `p`. Refused (a diagnostic naming the
/// step, its action and the reason) when the nest is not GEMM-class, a block size does not fit,
/// or a required step is illegal.
ir::Result<SketchExpansion> expand_microkernel(const ir::Program& p, const Path& path,
                                               const MicrokernelParams& params,
                                               const Target& target);

/// Loop fission that makes GEMM-class nests perfect: a `+=` whose three innermost enclosing
/// scopes would be GEMM-class on their own but share them with other statements (attention's
/// Q K^T sits with the softmax's first statements) gets those scopes split around it
/// (split_scope, each step checked: a fission that would break a dependence is not taken).
/// The trace may be empty.
SketchExpansion isolate_gemm_nests(const ir::Program& p, const Target& target);

/// The sketch for any extents, `want` giving the register tile and the block sizes to aim at:
/// where nr does not divide the columns or mr the rows, split_range separates the remainder
/// (the role's scope moved to the top of the nest first) and each part is fitted again, the
/// remainder with a tile of its own size; kc and mc become the divisors nearest what is wanted
/// (kc = K or mc = M leave that level out). matmul 1000^3 with 8 x 32: panels of 992 columns and
/// of 8, rows in blocks of 40.
ir::Result<SketchExpansion> expand_microkernel_fitted(const ir::Program& p, const Path& path,
                                                      const MicrokernelParams& want,
                                                      const Target& target);

/// The sketch on a whole program: fission exposing GEMM-class nests (isolate_gemm_nests), then
/// every nest fitted with its `choice`-th candidate (a nest with fewer takes its last), the last
/// nest first: an expansion may add siblings after its nest (a remainder split off at the top
/// level), which leaves the paths of the nests before it alone. The trace is empty when no nest
/// took the sketch.
SketchExpansion sketch_program(const ir::Program& p, const Target& target, size_t choice);
/// How many choices sketch_program has on `p`: the most candidates any GEMM-class nest (after
/// fission) has; 0 when there is nothing to sketch.
size_t sketch_choices(const ir::Program& p, const Target& target);

/// What to aim at on `nest` for a target (expand_microkernel_fitted), best guess first: register
/// tiles that fill the vector register file (AVX-512: 8 x 48 floats in 24 zmm accumulators, then
/// 8 x 32 and 4 x 64 in 16; AVX2: 6 x 16 in 12 ymm, 4 x 16 in 8), panels sized for L1 and L2,
/// mc 64 before mc 128, each in both panel orders (rows_outer first); on a transposable nest also
/// transposed tiles (AVX-512 8 x 32 and 4 x 64, AVX2 6 x 16 and 4 x 16). Transposed tiles come
/// first when they promise more than every plain one (transposed_first), else last. A nest of at
/// most 4 rows whose operands are unit-stride in k has the dot form (MicrokernelParams::dot) before
/// all of them.
std::vector<MicrokernelParams> microkernel_candidates(const GemmNest& nest, const Target& target);

/// Whether the transposed tile `t` promises more on `nest` than the plain tile `plain`: the share
/// of the target that full tiles cover (a column remainder runs in narrower, slower vectors; a row
/// remainder of r keeps its vectors and counts r / mr of its rows), times, for
/// the transposed tile, 1 - 2 lanes / depth (its copies in and out run element by element: mr x nr
/// each way per mr x nr / lanes x depth FMAs, depth = kc times the other reductions). conv2d-3x3:
/// 56 output columns leave 8 of 56 to an 8 x 8 remainder (0.857) while 64 output channels take
/// 8 x 32 tiles whole (1 - 32 / 576 = 0.944); matmul-1024 stays plain (0.984 against 0.875), and
/// so does matmul-skinny's 64 columns, whole in 8 x 32 tiles.
bool transposed_first(const GemmNest& nest, const MicrokernelParams& plain,
                      const MicrokernelParams& t);

}  // namespace perfdojo::transforms
