#include "target/target_of.h"

#include <algorithm>

#include "transforms/action.h"

namespace perfdojo {

transforms::Target target_of(const backends::Backend& backend, const std::string& arch) {
  const backends::Capabilities caps = backend.capabilities();
  transforms::Target t;
  t.name = arch;
  t.vector_widths = caps.vector_widths;
  t.parallel = caps.parallel;
  t.threads = std::max(1, caps.threads);
  t.vector_registers = caps.vector_registers;
  t.stream_stores = caps.stream_stores;
  t.fma = transforms::target_has_fma(arch);
  return t;
}

transforms::Target target_of(const backends::Backend& backend) {
  return target_of(backend, backend.name());
}

}  // namespace perfdojo
