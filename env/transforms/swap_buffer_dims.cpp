#include "transforms/swap_buffer_dims.h"

namespace perfdojo::transforms {

// Not implemented yet: always refused, so no action of this kind is ever legal.
Legality check_swap_buffer_dims(const ir::Program&, const Action& a, const Target&) {
  return {Reason::kUnsupportedByTarget, a.buffer, a.path};
}

ir::Program apply_swap_buffer_dims(const ir::Program& p, const Action&, const Target&) { return p; }

}  // namespace perfdojo::transforms
