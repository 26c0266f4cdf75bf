// Bridge frames (docs/bridge.md, "Framing"): a 4-byte big-endian length N, then N bytes of UTF-8
// JSON. Nothing here touches a socket or JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace perfdojo::bridge {

/// Bytes of the big-endian length that precedes each frame body.
inline constexpr size_t kFrameHeaderBytes = 4;

/// The 4-byte header followed by `body`.
std::string encode_frame(std::string_view body);
/// The length a 4-byte header announces.
uint32_t decode_frame_length(const unsigned char* header);

/// Splits a byte stream into frame bodies. Refuses a frame as soon as its header announces more
/// than the limit, before any of its body is buffered.
class FrameDecoder {
 public:
  /// What next() found.
  enum class Status { kNeedMore, kFrame, kTooLarge };

  explicit FrameDecoder(uint32_t max_frame_bytes) : max_(max_frame_bytes) {}
  /// Appends received bytes.
  void feed(const char* data, size_t n);
  /// The next complete frame's body, if one is buffered.
  Status next(std::string* body);
  /// Whether part of a frame (header or body) is buffered: the frame timeout is running.
  bool mid_frame() const { return pos_ < buf_.size(); }
  /// Length announced by the refused header (after kTooLarge).
  uint32_t refused_length() const { return refused_; }
  /// The largest frame accepted from now on (the bridge raises it after the handshake).
  void set_limit(uint32_t max_frame_bytes) { max_ = max_frame_bytes; }
  uint32_t limit() const { return max_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
  uint32_t max_;
  uint32_t refused_ = 0;
};

}  // namespace perfdojo::bridge
