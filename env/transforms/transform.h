// The signature every transformation shares, and the checks several of them start with.
//
// A transformation is a pair of free functions: `check_X` decides legality without changing
// anything (and is what the action mask evaluates), `apply_X` builds the new program and may
// assume `check_X` said yes. Each pair lives in its own file.
#pragma once

#include "ir/ir.h"
#include "transforms/action.h"

namespace perfdojo::transforms {

class ProgramIndex;

/// Decides whether an action is legal on a program for a target. The index, when given, was
/// built from the same program and only makes the check faster, never changes its verdict.
using CheckFn = Legality (*)(const ir::Program&, const Action&, const Target&, const ProgramIndex*);
/// Applies a legal action; the result computes what the input computed.
using ApplyFn = ir::Program (*)(const ir::Program&, const Action&, const Target&);

/// The scope at a.path, or a verdict saying why there is none. The index, when given, indexes
/// `p` and only makes it faster.
Legality scope_location(const ir::Program& p, const Path& path, const ir::Node** scope,
                        const ProgramIndex* index = nullptr);

/// Affine map of tiling depth d by f: {d} -> {d}*f + {d+1}, {k>d} -> {k+1}.
ir::Affine tile_index(const ir::Affine& a, int d, int64_t f);
/// A scope at depth d of extent E split into (E/f) x f, body re-indexed; annotation on the inner.
ir::NodePtr tile_node(const ir::Node& s, int d, int64_t f, ir::Annot inner_annot);

}  // namespace perfdojo::transforms
