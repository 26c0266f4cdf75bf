#include "transforms/inline_temporary.h"

namespace perfdojo::transforms {

// Not implemented yet: always refused, so no action of this kind is ever legal.
Legality check_inline_temporary(const ir::Program&, const Action& a, const Target&) {
  return {Reason::kUnsupportedByTarget, a.buffer, a.path};
}

ir::Program apply_inline_temporary(const ir::Program& p, const Action&, const Target&) { return p; }

}  // namespace perfdojo::transforms
