// The reading side of one bridge connection (docs/bridge.md, "Framing" and "Limits"): bytes off
// the socket into frames within the frame limit, back-pressure at --max-pending, a half-closed
// client, and the handshake, frame and idle timeouts. It decides nothing about what a frame
// means: its owner (server.cpp's Connection) hears of each frame and of the end of the stream.
// Everything here runs on the connection's strand.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bridge/protocol.h"

namespace perfdojo::bridge {

using Clock = std::chrono::steady_clock;

/// Seconds from `t` to now.
double seconds_since(Clock::time_point t);

/// What a Reader needs from the connection that owns it.
class ReaderOwner {
 public:
  virtual ~ReaderOwner() = default;
  /// Keeps the owner (and so the reader) alive while a read is in flight.
  virtual std::shared_ptr<void> hold() = 0;
  /// The connection is closed.
  virtual bool closed() const = 0;
  /// Closed, or closing after a last reply: read nothing more.
  virtual bool read_stopped() const = 0;
  /// Requests received whose replies are not yet written.
  virtual int pending() const = 0;
  /// Whether the connection still owes the client something (a reply pending or being written).
  virtual bool owes_replies() const = 0;
  /// Whether the handshake succeeded.
  virtual bool authenticated() const = 0;
  /// One complete frame's body.
  virtual void frame(const std::string& body) = 0;
  /// A header announced more than the limit (refused_length(), limit()); nothing more is read.
  virtual void frame_too_large() = 0;
  /// The client is gone (EOF with nothing owed, or an error): close.
  virtual void read_ended() = 0;
};

/// Frames off a socket, with their limits and clocks.
class Reader {
 public:
  /// Before the handshake, frames up to `preauth_limit` bytes and small reads (a thousand
  /// clients that never say hello cost megabytes).
  Reader(boost::asio::ip::tcp::socket& socket, ReaderOwner& owner, const Limits& limits,
         uint32_t preauth_limit, Clock::time_point connected);

  /// Reads on unless stopped, already reading, or --max-pending requests are unanswered (then
  /// it pauses; call again once replies went out).
  void read();
  /// Hands the owner every complete buffered frame while it has room (also after a pause).
  void process();
  /// The handshake succeeded: frames up to `limit`, reads of 64 KiB.
  void authenticated(uint32_t limit);

  /// The client half-closed: answer what it sent, then close.
  bool peer_done() const { return peer_done_; }
  /// The length a refused header announced, and the limit it broke.
  uint32_t refused_length() const { return decoder_.refused_length(); }
  uint32_t limit() const { return decoder_.limit(); }
  /// When the last frame arrived (the connection's start before the first).
  Clock::time_point last_frame() const { return last_frame_; }
  /// Why the connection times out now ("" when it does not): no handshake within
  /// --frame-timeout, a frame started that long ago unfinished, or --idle-timeout without a
  /// request (`last_activity`: the later of the last frame and the last reply written).
  std::string overdue(Clock::time_point last_activity) const;

 private:
  void on_read(const boost::system::error_code& ec, size_t n);

  boost::asio::ip::tcp::socket& socket_;
  ReaderOwner& owner_;
  const Limits& limits_;
  FrameDecoder decoder_;
  std::vector<char> buf_;
  Clock::time_point connected_, last_frame_, frame_started_;
  bool reading_ = false;
  bool paused_ = false;       // stopped at max_pending
  bool frame_clock_ = false;  // a frame is partly received: frame_started_ runs
  bool peer_done_ = false;
};

}  // namespace perfdojo::bridge
