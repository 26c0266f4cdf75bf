// Facts about when a buffer's contents can be observed, for the code generators and the cost
// model (not a transformation: they decide what the program's own text already implies).
#pragma once

#include "ir/ir.h"

namespace perfdojo::ir {

/// Whether buffer `b`'s initial value (`= VALUE`) can never be observed: no statement reads `b`
/// (no load of it, no reduction into it), and one plain store covers every element (its index,
/// per dimension, a mixed radix of iterators found in that dimension only, with coefficient 1 on
/// the innermost term, each next coefficient the span of the smaller terms, constant 0, and the
/// span the dimension's extent: conv2d's output after the transposed micro-kernel sketch, whose
/// copy-out is its only access). Then the fill that sets the initial value is dead and the
/// generated code leaves it out. False for inputs and buffers without an initial value.
bool initial_value_dead(const Program& p, const BufferDecl& b);

}  // namespace perfdojo::ir

namespace perfdojo::ir {

/// The temporaries private to each iteration of the scope at `path` (child indices from the
/// program's body): every iteration writes all of the buffer, and every element it reads it
/// has written before, because a plain store covering the whole buffer (over scopes inside the
/// scope only, as `initial_value_dead` covers) runs earlier in the same iteration of some
/// scope around the read. No value flows through such a buffer from one iteration to another,
/// and what the scope leaves in it is what its last iteration wrote, so parallelize gives each
/// iteration its own copy (a first dimension indexed by the scope's iterator: a GEMM's packed
/// blocks and register tile) and the iterations no longer depend on one another through it.
/// Reads only the scope's subtree and the buffers' declarations. Sorted by name; empty when
/// `path` names no scope.
std::vector<std::string> iteration_private_buffers(const Program& p, const std::vector<int>& path);

/// The temporaries that are such copies: every access lies inside the scope at `path` with the
/// scope's iterator, alone, as its first index (and nowhere else), and within one iteration
/// every element of the iteration's slice is written before anything reads it. Code may then
/// keep one slice per thread instead of all of them (the code generator does). Sorted by name.
std::vector<std::string> iteration_slices(const Program& p, const std::vector<int>& path);

}  // namespace perfdojo::ir
