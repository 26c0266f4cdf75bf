#include "bridge/base64.h"

#include <array>

namespace perfdojo::bridge {

namespace {
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(in[k])); };
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (b(i) << 16) | (b(i + 1) << 8) | b(i + 2);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  if (size_t rest = in.size() - i) {
    uint32_t v = b(i) << 16;
    if (rest == 2) v |= b(i + 1) << 8;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += rest == 2 ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string pack_mask(const std::vector<uint8_t>& mask) {
  // Eight entries per byte without a branch: a mask is ~2,000 entries, one in ten legal at
  // random, and a branch per entry mispredicted often enough to cost ~2 us a step.
  std::string bits((mask.size() + 7) / 8, '\0');
  const size_t whole = mask.size() / 8;
  for (size_t j = 0; j < whole; ++j) {
    const uint8_t* m = mask.data() + 8 * j;
    unsigned v = 0;
    for (int k = 0; k < 8; ++k) v |= static_cast<unsigned>(m[k] != 0) << (7 - k);
    bits[j] = static_cast<char>(v);
  }
  for (size_t i = 8 * whole; i < mask.size(); ++i)
    bits[i >> 3] =
        static_cast<char>(bits[i >> 3] | (static_cast<unsigned>(mask[i] != 0) << (7 - (i & 7))));
  return bits;
}

std::string mask_base64(const std::vector<uint8_t>& mask) { return base64_encode(pack_mask(mask)); }

std::optional<std::string> base64_decode(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::array<int, 256> value;
  value.fill(-1);
  for (int k = 0; k < 64; ++k) value[static_cast<unsigned char>(kB64[k])] = k;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const auto c = static_cast<unsigned char>(in[i + k]);
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad || value[c] < 0) {
        return std::nullopt;  // a character outside the alphabet, or data after padding
      } else {
        v[k] = value[c];
      }
    }
    uint32_t n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

}  // namespace perfdojo::bridge
