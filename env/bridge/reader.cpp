#include "bridge/reader.h"

namespace perfdojo::bridge {

namespace asio = boost::asio;

namespace {
constexpr size_t kPreauthReadBytes = 4096, kReadBytes = 64 << 10;
}  // namespace

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Reader::Reader(asio::ip::tcp::socket& socket, ReaderOwner& owner, const Limits& limits,
               uint32_t preauth_limit, Clock::time_point connected)
    : socket_(socket),
      owner_(owner),
      limits_(limits),
      decoder_(preauth_limit),
      buf_(kPreauthReadBytes),
      connected_(connected),
      last_frame_(connected) {}

void Reader::authenticated(uint32_t limit) {
  decoder_.set_limit(limit);
  buf_.resize(kReadBytes);
}

void Reader::read() {
  if (reading_ || peer_done_ || owner_.read_stopped()) return;
  if (owner_.pending() >= limits_.max_pending) {
    paused_ = true;  // back-pressure: read on once replies have gone out
    return;
  }
  if (paused_ && frame_clock_) frame_started_ = Clock::now();  // the pause was ours, not theirs
  paused_ = false;
  reading_ = true;
  socket_.async_read_some(asio::buffer(buf_), [this, keep = owner_.hold()](
                                                  const boost::system::error_code& ec, size_t n) {
    reading_ = false;
    on_read(ec, n);
  });
}

void Reader::on_read(const boost::system::error_code& ec, size_t n) {
  if (owner_.closed()) return;
  if (ec == asio::error::eof && owner_.authenticated() && owner_.owes_replies()) {
    // The client finished sending but still reads: its requests in flight get their
    // replies, then the connection closes (a truncated frame has nobody to answer).
    peer_done_ = true;
    return;
  }
  if (ec) {
    // EOF with nothing owed, or a reset: the client is gone.
    owner_.read_ended();
    return;
  }
  decoder_.feed(buf_.data(), n);
  process();
  read();
}

void Reader::process() {
  std::string body;
  while (!owner_.read_stopped() && owner_.pending() < limits_.max_pending) {
    FrameDecoder::Status st = decoder_.next(&body);
    if (st == FrameDecoder::Status::kNeedMore) break;
    if (st == FrameDecoder::Status::kTooLarge) {
      owner_.frame_too_large();
      return;
    }
    frame_clock_ = false;
    last_frame_ = Clock::now();
    owner_.frame(body);
  }
  if (decoder_.mid_frame() && !frame_clock_) {
    frame_clock_ = true;
    frame_started_ = Clock::now();
  } else if (!decoder_.mid_frame()) {
    frame_clock_ = false;
  }
}

std::string Reader::overdue(Clock::time_point last_activity) const {
  const Limits& l = limits_;
  if (!owner_.authenticated() && l.frame_timeout_s > 0 &&
      seconds_since(connected_) > l.frame_timeout_s)
    return "no handshake within " + std::to_string(l.frame_timeout_s) + " s (--frame-timeout)";
  if (frame_clock_ && reading_ && l.frame_timeout_s > 0 &&
      seconds_since(frame_started_) > l.frame_timeout_s)
    return "a frame started " + std::to_string(l.frame_timeout_s) +
           " s ago never finished (--frame-timeout)";
  if (l.idle_timeout_s > 0 && owner_.pending() == 0 && !frame_clock_ &&
      seconds_since(last_activity) > l.idle_timeout_s)
    return "no request for " + std::to_string(l.idle_timeout_s) + " s (--idle-timeout)";
  return "";
}

}  // namespace perfdojo::bridge
