// Actions: one transformation applied at one location with one parameter.
//
// The kind list is declared once (PERFDOJO_TRANSFORM_KINDS) and drives the enum, the names and
// the registry, so ids are stable: new kinds are appended, never renumbered.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/ir.h"

namespace perfdojo::transforms {

// The registry: one row per transformation, in id order. A row names the kind's file pair
// (`NAME.h`/`NAME.cpp`, defining check_NAME, precheck_NAME and apply_NAME), what its location
// and parameter are, and what its check reads besides its location (how long the mask may
// remember a verdict, see Reads). Adding a transformation = its file pair, its tests, one row.
//
// X(enum name, file and function name, location kind, parameter kind, what the check reads)
#define PERFDOJO_TRANSFORM_KINDS(X)                                    \
  X(kTileScope, tile_scope, kScope, kFactor, kSubtree)                 \
  X(kJoinNested, join_nested, kScope, kNone, kSubtree)                 \
  X(kSwapScopes, swap_scopes, kScope, kNone, kSubtree)                 \
  X(kJoinScopes, join_scopes, kScope, kNone, kNextSibling)             \
  X(kSplitScope, split_scope, kScope, kIndex, kSubtree)                \
  X(kMoveStatement, move_statement, kNode, kNone, kNextSibling)        \
  X(kVectorize, vectorize, kScope, kWidth, kSubtree)                   \
  X(kUnroll, unroll, kScope, kFactor, kSubtree)                        \
  X(kParallelize, parallelize, kScope, kNone, kSubtree)                \
  X(kCreateTemporary, create_temporary, kScopeBuffer, kNone, kSubtree) \
  X(kReuseBuffers, reuse_buffers, kBufferPair, kNone, kEverything)     \
  X(kShrinkBuffer, shrink_buffer, kBuffer, kIndex, kLiveRange)         \
  X(kInlineTemporary, inline_temporary, kBuffer, kNone, kLiveRange)    \
  X(kHoist, hoist, kNode, kNone, kParent)                              \
  X(kSwapBufferDims, swap_buffer_dims, kBuffer, kIndex, kLiveRange)    \
  X(kClearAnnotation, clear_annotation, kScope, kNone, kSubtree)       \
  X(kSplitRange, split_range, kScope, kFactor, kSubtree)               \
  X(kStreamStores, stream_stores, kBuffer, kNone, kLiveRange)          \
  X(kMaskToBounds, mask_to_bounds, kScope, kNone, kEverything)         \
  X(kDotProduct, dot_product, kScope, kWidth, kSubtree)                \
  X(kWidenBuffer, widen_buffer, kBuffer, kNone, kEverything)

/// Every transformation, in registry order (the order is part of the action space: append only).
enum class Kind {
#define PERFDOJO_X(e, n, l, p, r) e,
  PERFDOJO_TRANSFORM_KINDS(PERFDOJO_X)
#undef PERFDOJO_X
};

/// Number of kinds.
inline constexpr int kNumKinds = 0
#define PERFDOJO_X(e, n, l, p, r) +1
    PERFDOJO_TRANSFORM_KINDS(PERFDOJO_X)
#undef PERFDOJO_X
    ;

/// What an action's location names.
enum class LocKind { kScope, kNode, kBuffer, kBufferPair, kScopeBuffer };
/// What an action's parameter means.
enum class ParamKind { kNone, kFactor, kWidth, kIndex };
/// What a kind's check reads besides its location, which decides how long the flat mask may
/// remember a verdict (docs/actions.md, "The mask"). Every check at a scope or node reads that
/// node's subtree and the extents and annotations of the scopes enclosing it; a check at a
/// buffer reads its declaration.
enum class Reads {
  kSubtree,      ///< nothing more
  kNextSibling,  ///< and the node's next sibling
  kParent,       ///< and the node's parent scope, with the node's position in it
  kLiveRange,    ///< the top-level nodes from the buffer's first use to its last
  kEverything,   ///< anything in the program: never remembered
};

/// The action's text name, e.g. "tile_scope".
const char* kind_name(Kind k);
/// Location kind of a transformation.
LocKind loc_kind(Kind k);
/// Parameter kind of a transformation.
ParamKind param_kind(Kind k);
/// What a transformation's check reads (its registry row).
Reads reads(Kind k);

/// A path from the program body to a node: body[p0].body[p1]... Stable for a given program.
using Path = std::vector<int>;

/// One transformation at one location with one parameter.
struct Action {
  Kind kind = Kind::kTileScope;
  Path path;            ///< scope or node, for kScope/kNode/kScopeBuffer locations
  std::string buffer;   ///< for buffer locations
  std::string buffer2;  ///< the second buffer of kBufferPair
  int64_t param = 0;    ///< factor, width or index; 0 when unused
  bool operator==(const Action&) const = default;
};

/// Why an action may not be applied; kOk means it may.
enum class Reason {
  kOk,
  kNoSuchLocation,       ///< the path or buffer does not exist
  kNotAScope,            ///< the location is a statement but a scope is needed
  kBadParameter,         ///< the parameter is outside its documented set
  kNotDivisible,         ///< the factor does not divide the extent
  kAnnotated,            ///< a scope involved already carries an annotation
  kNotPerfectlyNested,   ///< the scope must have exactly one child, itself a scope
  kIndexNotMergeable,    ///< join_nested: an index does not use the two iterators as one
  kNoNextSibling,        ///< nothing follows the location in its scope
  kExtentMismatch,       ///< join_scopes: the two scopes differ in extent
  kDependence,           ///< a data dependence would be reversed or broken
  kNotInnermost,         ///< vectorize: the scope contains other scopes
  kNonContiguous,        ///< vectorize: an access is neither unit-stride nor invariant
  kUnsupportedByTarget,  ///< the target lacks the capability (e.g. no threads)
  kNestedParallel,       ///< parallelize: an enclosing scope is already parallel
  kNotATemporary,        ///< the buffer is an input or an output
  kLifetimesOverlap,     ///< reuse_buffers: both buffers are live at once
  kShapeMismatch,        ///< reuse_buffers: types or shapes differ
  kHasInitialValue,      ///< the buffer's declared initial value would be lost
  kNotInvariant,         ///< hoist: the statement depends on the scope's iterator
  kIrregularAccess,      ///< accesses of the buffer are not of the form the transformation needs
  kNothingToDo,          ///< the action would leave the program unchanged
  kNotWritten,           ///< stream_stores: no statement stores to the buffer
  kReadBack,             ///< stream_stores: a statement reads the buffer
  kNonRectangular,       ///< a bounded scope is involved that this kind does not handle yet
  kIndirect,             ///< an indirect index is involved that this move does not handle yet
};

/// A legality verdict: the reason plus the buffer and scope involved (for the message).
struct Legality {
  Reason reason = Reason::kOk;
  std::string buffer;  ///< buffer involved, if any
  Path where;          ///< scope or node involved, if any
  bool ok() const { return reason == Reason::kOk; }
};

/// Short stable identifier of a reason ("dependence", "not_divisible", ...).
const char* reason_name(Reason r);
/// A sentence explaining the verdict for `a` (rendered only when asked; search loops skip it).
std::string explain(const Action& a, const Legality& l);

/// What the hardware target offers to the action space.
struct Target {
  std::string name = "x86_avx512";
  std::vector<int> vector_widths = {16, 8};  ///< f32 lanes: AVX-512 then AVX2
  bool parallel = true;                      ///< parallel scopes can run on threads
  /// Architectural vector registers, which bound a register tile (0: 32 with 16 lanes, else 16,
  /// as on x86).
  int vector_registers = 0;
  /// Vector stores can be non-temporal (x86 with vectors; stream_stores).
  bool stream_stores = true;
  /// Fused multiply-add instructions (contract.h): every preset but x86_64 (SSE2 only).
  bool fma = true;
  /// The threads a parallel scope runs on (with `parallel`): what the optimiser's parallel
  /// proposals divide among (legality never depends on it).
  int threads = 2;
  /// f32 lanes of the widest vector (0: no vectors).
  int widest_lanes() const {
    int lanes = 0;
    for (int w : vector_widths) lanes = std::max(lanes, w);
    return lanes;
  }
  int registers() const {
    if (vector_registers > 0) return vector_registers;
    return widest_lanes() >= 16 ? 32 : 16;
  }
};

/// The presets: "x86_avx512" (16 and 8 lanes), "x86_avx2" (8), "x86_64" (no vectors), and the
/// cross targets "aarch64_neon" (4), "aarch64_sve" (8), "riscv64_rvv" (2), single-core;
/// nullopt for an unknown name.
std::optional<Target> target_by_name(std::string_view name);

/// Whether the target named `name` has fused multiply-add instructions: its preset's `fma`, true
/// for names that are no preset (the cost model's machines).
bool target_has_fma(std::string_view name);

/// "0.2.1"
std::string print_path(const Path& p);
/// One line: "tile_scope 0.1 32", "reuse_buffers x e", "create_temporary 0.0 C".
std::string print_action(const Action& a);
/// Parses print_action's text; errors name the column of the offending token.
ir::Result<Action> parse_action(std::string_view text, std::string_view file = "<action>",
                                int line = 1);
/// Parses a trace: one action per line, '#' comments and blank lines ignored.
ir::Result<std::vector<Action>> parse_trace(std::string_view text,
                                            std::string_view file = "<trace>");
/// Prints a trace, one action per line.
std::string print_trace(const std::vector<Action>& trace);

}  // namespace perfdojo::transforms
