// The signatures every transformation shares, and the checks several of them start with.
//
// A transformation is a file pair `NAME.h`/`NAME.cpp` holding three free functions:
// - `check_NAME` decides legality without changing anything and says why not (a Reason);
// - `precheck_NAME` gives the flat mask the verdicts it can read from a MaskSummary, made once
//   per mask, for every parameter at one location, and says which need the full check;
// - `apply_NAME` builds the new program; it may assume `check_NAME` said yes, and says so with
//   PERFDOJO_EXPECT_LEGAL (an internal assertion, on in the tests).
// Its row in PERFDOJO_TRANSFORM_KINDS (action.h) registers it.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "ir/ir.h"
#include "transforms/action.h"

namespace perfdojo::transforms {

class ProgramIndex;
class MaskSummary;

/// Decides whether an action is legal on a program for a target. The index, when given, was
/// built from the same program and only makes the check faster, never changes its verdict.
using CheckFn = Legality (*)(const ir::Program&, const Action&, const Target&, const ProgramIndex*);
/// Applies a legal action; the result computes what the input computed.
using ApplyFn = ir::Program (*)(const ir::Program&, const Action&, const Target&);

/// A candidate's location as the flat mask addresses it; -1 where the kind has none. A scope is
/// named by its scope slot (pre-order position among scopes) and its node index in the
/// summary's ProgramIndex; a node by its node index; buffers by declaration index.
///
/// Kinds located at a scope and a buffer, or at a buffer pair, take no parameter and are asked
/// a row at a time: with `buffer == -1` (every buffer at the scope), resp. `buffer2 == -1`
/// (every partner j > buffer), bit b of the answer is about buffer b (b < 64; the mask asks
/// again with the buffer named for the others).
struct MaskSite {
  int scope = -1;
  int node = -1;
  int buffer = -1;
  int buffer2 = -1;
};

/// A precheck's answer, bit i for the kind's i-th parameter value (or, for a row, buffer i):
/// `legal` is decided legal, `check` is left to the full check, a bit in neither is decided
/// illegal.
struct Precheck {
  uint64_t legal = 0;
  uint64_t check = 0;
};

/// The most parameter values a kind may have.
inline constexpr int kMaxParams = 32;

/// The precheck of a move that runs a scope W lanes at a time (vectorize, dot_product): every
/// W dividing `extent` is left to the check, the others are illegal.
inline Precheck check_dividing_widths(int64_t extent, std::span<const int64_t> params) {
  Precheck out;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i] > 0 && extent % params[i] == 0) out.check |= uint64_t{1} << i;
  return out;
}

/// Verdicts of one kind at one location (or one row) for each of `params` (at most
/// kMaxParams), from a summary of the program. Never decides legal what check refuses or
/// illegal what it accepts (a tested invariant). It sees no target: what depends on the target
/// is left to the check.
using PrecheckFn = Precheck (*)(MaskSummary& summary, const MaskSite& site,
                                std::span<const int64_t> params);

/// The low `n` bits.
inline constexpr uint64_t low_bits(int n) {
  return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
}
/// Every parameter left to the full check: the precheck of a kind that knows nothing cheap.
inline Precheck check_all(std::span<const int64_t> params) {
  return {0, low_bits(static_cast<int>(params.size()))};
}

/// Thrown by PERFDOJO_EXPECT_LEGAL: our bug, not the caller's.
struct InternalError : std::logic_error {
  using std::logic_error::logic_error;
};
/// Whether apply_X re-checks legality (PERFDOJO_EXPECT_LEGAL). Off by default (the check costs
/// as much as a mask entry); on when the environment has PERFDOJO_INTERNAL_CHECKS=1 at the
/// first use, as the tests' main sets it. set_ returns the previous setting.
bool set_internal_checks(bool on);
bool internal_checks();
/// Throws InternalError naming `a` when `l` refuses it.
void expect_legal(const Legality& l, const Action& a, const char* where);

}  // namespace perfdojo::transforms

/// At the top of apply_NAME: with internal checks on, fails loudly when reached for an action
/// that check_NAME refuses (apply may assume the check passed; this says when it did not).
#define PERFDOJO_EXPECT_LEGAL(check_fn, p, a, t)                                     \
  do {                                                                               \
    if (::perfdojo::transforms::internal_checks())                                   \
      ::perfdojo::transforms::expect_legal(check_fn(p, a, t, nullptr), a, __func__); \
  } while (0)

namespace perfdojo::transforms {

/// The scope at a.path, or a verdict saying why there is none. The index, when given, indexes
/// `p` and only makes it faster.
Legality scope_location(const ir::Program& p, const Path& path, const ir::Node** scope,
                        const ProgramIndex* index = nullptr);

/// Affine map of tiling depth d by f: {d} -> {d}*f + {d+1}, {k>d} -> {k+1}.
ir::Affine tile_index(const ir::Affine& a, int d, int64_t f);
/// A scope at depth d of extent E split into (E/f) x f, body re-indexed; annotation on the inner.
ir::NodePtr tile_node(const ir::Node& s, int d, int64_t f, ir::Annot inner_annot);
/// The scope at `path` run `w` lanes at a time: annotated :vec when its extent is w, else tiled
/// by w with the inner scope :vec (vectorize, dot_product). The extent must be a multiple of w.
ir::Program annotate_lanes(const ir::Program& p, const Path& path, int64_t w);
/// The first checks of a move that runs a scope `a.param` lanes at a time (vectorize,
/// dot_product): the location is a scope (`*scope`), the width one of the target's, the scope
/// not annotated.
Legality lanes_location(const ir::Program& p, const Action& a, const Target& t,
                        const ir::Node** scope, const ProgramIndex* index);

}  // namespace perfdojo::transforms
