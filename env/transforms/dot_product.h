// dot_product PATH W: run a scope's iterations as the lanes of a vector of 4-term integer dot
// products, the shape of x86's vpdpbusd (AVX-512 VNNI, AVX-VNNI) and Arm's sdot/udot
// (docs/actions.md, "dot_product").
//
// The scope (depth d) must hold exactly one unannotated, unbounded scope of extent 4 (depth
// d + 1), holding exactly one statement `C[...] += U[...] * S[...]` with C an i32 buffer and U,
// S one u8 and one i8 buffer (either order), where, with j the scope's iterator and q the
// inner one:
// - C's element offset (row-major) is j plus what the scopes outside give, the same for every q;
// - one operand's offset is q plus the outside's, the same for every lane: four consecutive
//   bytes, broadcast to every lane;
// - the other's is 4 j + q plus the outside's: for each lane, its own four consecutive bytes
//   (weights packed as [K/4, N, 4], as inference libraries store them, or [K/4, 4 N]).
// Each lane sums its four products into its own element; integer addition wraps and is
// associative, so the vector instruction's order gives the interpreter's result bit for bit.
// The scope becomes `:vec` W lanes (tiled first when its extent is a multiple of W), the inner
// scope stays: the C printer prints the pair as one instruction per lane vector where the CPU
// has it, else as the loop it is. Refusals: unsupported_by_target (W not a vector width of the
// target), annotated, not_divisible, irregular_access (another body or statement),
// non_contiguous (an access of another shape).
#pragma once

#include "transforms/transform.h"

namespace perfdojo::transforms {

/// Legality of `dot_product` (no change is made).
Legality check_dot_product(const ir::Program& p, const Action& a, const Target& t,
                           const ProgramIndex* index = nullptr);
/// The mask's verdicts for `dot_product`: an annotated scope or one whose extent a width does
/// not divide is refused, the rest is left to the full check.
Precheck precheck_dot_product(MaskSummary& summary, const MaskSite& site,
                              std::span<const int64_t> params);
/// Applies a legal `dot_product`.
ir::Program apply_dot_product(const ir::Program& p, const Action& a, const Target& t);

/// The roles in a 4-term dot-product scope `s` at depth `d` of program `p`, when its body has
/// the form above: the i32 target, the u8 and the i8 operand, and which operand is broadcast
/// (does not depend on the lanes). The C printer asks the same question.
struct DotForm {
  const ir::Stmt* stmt = nullptr;
  const ir::Access* unsigned_operand = nullptr;  ///< the u8 one
  const ir::Access* signed_operand = nullptr;    ///< the i8 one
  bool unsigned_broadcast = false;  ///< the u8 operand is the one invariant in the lanes
};
/// The form, or the reason and buffer why not (`why` set, nullopt returned).
std::optional<DotForm> dot_form(const ir::Program& p, const ir::Node& s, int d, Legality* why);

/// The coefficient of the iterator at depth `d` in `a`'s element offset, as the buffer lays it
/// out (row-major): B4[k/4, j, q] gives 4 for j, 1 for q.
int64_t element_stride(const ir::Program& p, const ir::Access& a, int d);

}  // namespace perfdojo::transforms
