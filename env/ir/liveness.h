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

/// The temporaries private to each iteration of the scope `s` (at `depth`: the number of scopes
/// around it): every access of the buffer lies inside `s`, and within one iteration of `s` every
/// element is written before anything reads it, because a plain store covering the whole buffer
/// (over scopes inside `s` only, as `initial_value_dead` covers) runs earlier in the same
/// iteration of some scope around the read. No value flows through such a buffer from one
/// iteration to another, so the iterations may each have their own copy (the code generator
/// gives every thread of a `:par` scope one: a GEMM's packed blocks and register tile) and
/// dependences through it do not order the iterations. Sorted by name.
std::vector<std::string> iteration_private_buffers(const Program& p, const Node& s, int depth);

}  // namespace perfdojo::ir
