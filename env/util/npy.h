// Writing tensors as NumPy .npy files (format version 1.0, C order).
#pragma once

#include <string>

#include "ir/interp.h"

namespace perfdojo::util {

/// Writes `t` to `path` in its declared dtype (<f4, <f8, <i4, <f2, |i1, |u1; bf16, which NumPy
/// lacks, as the <f4 values it widens to); returns "" or an error message.
std::string write_npy(const std::string& path, const ir::Tensor& t);

}  // namespace perfdojo::util
