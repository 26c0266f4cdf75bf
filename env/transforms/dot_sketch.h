// The int8 dot-product sketch: the micro-kernel sketch's counterpart for u8 x i8 GEMMs
// (transforms/dot_product.h), expanded into atomic moves. A GEMM over three scopes first has its
// reduction tiled by 4 (dot_blocking); weights not packed four k at a time are packed so by the
// panel copy below.
//
// A dot nest is four perfectly nested plain scopes over one statement `C += U * S` (i32 target,
// one u8 and one i8 operand) with the roles, by their strides in the element offsets:
//   j  stride 1 in C, non-zero in one operand (the packed one), 0 in the other (the broadcast
//      one); a packed input [K/4, N, 4] has stride 4 here, and needs no copy to be read so;
//   q  extent 4, stride 0 in C, 1 in the broadcast operand, non-zero in the packed one;
//   p  stride 0 in C, used by both operands (the k blocks);
//   i  used by C and the broadcast operand, not by the packed one.
// With a register tile of mr rows and nr columns (nr a multiple of the lanes) the expansion is:
//
//   tile       i by mr, j by nr (each left whole when the tile takes the extent)
//   order      swap_scopes until the nest is  Jo Io p Ii Ji q
//   pack       create_temporary of the packed operand at Jo: the panel of nr columns, all of p,
//              contiguous as [p][Ji][q] (its rows 4 KiB apart in a [K/4, N, 4] input share L1
//              sets); at the outermost scope when there is no Jo but the weights need packing
//   dot        dot_product of Ji at the lanes: nr/lanes registers of lanes dot products
//   unroll     Ii by mr and the registers' scope by nr/lanes: mr x nr/lanes accumulators the
//              code generator keeps in registers across p
//
// docs/microkernel.md ("int8 dot products") has the figures.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "transforms/microkernel_sketch.h"

namespace perfdojo::transforms {

/// A dot nest's roles: positions 0..3 (outermost first) of i, j, p and q, and extents.
struct DotNest {
  Path path;
  int i = 0, j = 0, p = 0, q = 0;
  int64_t m = 0, n = 0;
  std::string packed;       ///< the operand read along j
  bool needs_pack = false;  ///< not yet at 4 j + q: the sketch's panel copy packs it so
};

/// The dot nest at `path`, or nullopt.
std::optional<DotNest> dot_nest_at(const ir::Program& p, const Path& path);
/// The move that makes the three-scope u8 x i8 GEMM at `path` (weights as they come, `W[N, K]`
/// or `B[K, N]`) a dot nest: tile_scope of its reduction by 4 (q, the 4 bytes of a lane). nullopt
/// when it is not one or already is a dot nest.
std::optional<Action> dot_blocking(const ir::Program& p, const Path& path);
/// Every top-level dot nest of `p`, in program order.
std::vector<DotNest> dot_nests(const ir::Program& p);

/// A register tile: mr rows, nr columns, at `lanes` i32 lanes per register.
struct DotTile {
  int64_t mr = 8, nr = 32, lanes = 16;
  bool operator==(const DotTile&) const = default;
};
/// The tiles to try on `nest` for `target`, best guess first: the target's widest lanes (8 or
/// more, or the 4 of an AArch64 target's usdot), at most 24 accumulators, sizes that divide the
/// extents (8 x 2 registers, 4 x 4, 8 x 1, ...).
std::vector<DotTile> dot_candidates(const DotNest& nest, const Target& target);

/// Expands the sketch at the dot nest at `path`; refused (a diagnostic naming the step) when the
/// nest is not one, the tile does not fit, or a step is illegal.
ir::Result<SketchExpansion> expand_dot_sketch(const ir::Program& p, const Path& path,
                                              const DotTile& tile, const Target& target);

}  // namespace perfdojo::transforms
