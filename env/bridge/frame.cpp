#include "bridge/frame.h"

#include <cstring>

namespace perfdojo::bridge {

std::string encode_frame(std::string_view body) {
  std::string out(kFrameHeaderBytes + body.size(), '\0');
  const auto n = static_cast<uint32_t>(body.size());
  out[0] = static_cast<char>((n >> 24) & 0xff);
  out[1] = static_cast<char>((n >> 16) & 0xff);
  out[2] = static_cast<char>((n >> 8) & 0xff);
  out[3] = static_cast<char>(n & 0xff);
  std::memcpy(out.data() + kFrameHeaderBytes, body.data(), body.size());
  return out;
}

uint32_t decode_frame_length(const unsigned char* h) {
  return (uint32_t{h[0]} << 24) | (uint32_t{h[1]} << 16) | (uint32_t{h[2]} << 8) | uint32_t{h[3]};
}

void FrameDecoder::feed(const char* data, size_t n) {
  // Drop consumed bytes before growing, so the buffer stays near one frame plus one read.
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (64u << 10) && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(data, n);
}

FrameDecoder::Status FrameDecoder::next(std::string* body) {
  const size_t avail = buf_.size() - pos_;
  if (avail < kFrameHeaderBytes) return Status::kNeedMore;
  const uint32_t len =
      decode_frame_length(reinterpret_cast<const unsigned char*>(buf_.data() + pos_));
  if (len > max_) {
    refused_ = len;
    return Status::kTooLarge;
  }
  if (avail - kFrameHeaderBytes < len) return Status::kNeedMore;
  body->assign(buf_, pos_ + kFrameHeaderBytes, len);
  pos_ += kFrameHeaderBytes + len;
  return Status::kFrame;
}

}  // namespace perfdojo::bridge
