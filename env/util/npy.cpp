#include "util/npy.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

namespace perfdojo::util {

std::string write_npy(const std::string& path, const ir::Tensor& t) {
  const char* descr = t.dtype == ir::DType::kF32   ? "<f4"
                      : t.dtype == ir::DType::kF64 ? "<f8"
                                                   : "<i4";
  std::string shape = "(";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    shape += std::to_string(t.shape[i]);
    if (t.shape.size() == 1 || i + 1 < t.shape.size()) shape += ",";
    if (i + 1 < t.shape.size()) shape += " ";
  }
  shape += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + length (2) + header + '\n' must be a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) return "cannot write '" + path + "'";
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  char lenb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(lenb, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  std::vector<char> bytes(t.data.size() * ir::dtype_bytes(t.dtype));
  for (size_t i = 0; i < t.data.size(); ++i) {
    char* dst = bytes.data() + i * ir::dtype_bytes(t.dtype);
    if (t.dtype == ir::DType::kF32) {
      float f = static_cast<float>(t.data[i]);
      std::memcpy(dst, &f, 4);
    } else if (t.dtype == ir::DType::kF64) {
      std::memcpy(dst, &t.data[i], 8);
    } else {
      int32_t v = static_cast<int32_t>(t.data[i]);
      std::memcpy(dst, &v, 4);
    }
  }
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) return "error while writing '" + path + "'";
  return "";
}

}  // namespace perfdojo::util
