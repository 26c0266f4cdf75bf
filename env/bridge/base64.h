// Base64 as the bridge carries binary states and action masks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace perfdojo::bridge {

/// Standard base64 with padding.
std::string base64_encode(std::string_view bytes);
/// A 0/1 mask packed 8 actions to a byte, first action in the high bit (numpy.packbits order),
/// then base64: a 1657-action mask is 280 characters and decodes in microseconds.
std::string mask_base64(const std::vector<uint8_t>& mask);
/// The same bits before base64: (n + 7) / 8 bytes.
std::string pack_mask(const std::vector<uint8_t>& mask);
/// Strict decoding: nullopt on any character outside the alphabet or a bad length.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace perfdojo::bridge
