#include "util/npy.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

namespace perfdojo::util {

std::string write_npy(const std::string& path, const ir::Tensor& t) {
  // NumPy has no bf16: its elements are written as the float32 values they widen to, exactly.
  const ir::DType file_type = t.dtype == ir::DType::kBF16 ? ir::DType::kF32 : t.dtype;
  const char* descr = "<i4";
  switch (file_type) {
    case ir::DType::kF32:
      descr = "<f4";
      break;
    case ir::DType::kF64:
      descr = "<f8";
      break;
    case ir::DType::kF16:
      descr = "<f2";
      break;
    case ir::DType::kI8:
      descr = "|i1";
      break;
    case ir::DType::kU8:
      descr = "|u1";
      break;
    default:
      break;
  }
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
  const size_t width = static_cast<size_t>(ir::dtype_bytes(file_type));
  std::vector<char> bytes(t.data.size() * width);
  for (size_t i = 0; i < t.data.size(); ++i) {
    char* dst = bytes.data() + i * width;
    if (ir::is_narrow(file_type)) {
      const uint32_t b = ir::narrow_bits(file_type, t.data[i]);
      std::memcpy(dst, &b, width);  // little-endian: the low bytes
    } else if (file_type == ir::DType::kF32) {
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
