// The writing side of one bridge connection: replies queued in order and sent in one gather
// write, a last reply that closes the connection (then a short linger so the client reads it
// rather than a reset), and the clocks of a client that stopped reading. Everything here runs
// on the connection's strand.
#pragma once

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "bridge/protocol.h"
#include "bridge/reader.h"

namespace perfdojo::bridge {

/// What a Writer needs from the connection that owns it.
class WriterOwner {
 public:
  virtual ~WriterOwner() = default;
  /// Keeps the owner (and so the writer) alive while a write is in flight.
  virtual std::shared_ptr<void> hold() = 0;
  /// The connection is closed.
  virtual bool closed() const = 0;
  /// A reply to a request has gone out (or was dropped).
  virtual void replied() = 0;
  /// Replies went out and the connection stays open: read on.
  virtual void written() = 0;
  /// Close now: a write failed, or the linger after the last reply is over.
  virtual void close() = 0;
};

/// Replies onto a socket.
class Writer {
 public:
  Writer(boost::asio::ip::tcp::socket& socket, WriterOwner& owner);

  /// Whether a reply that closes the connection is queued: nothing more is read or queued.
  bool closing() const { return closing_; }
  /// Queues `body` (`answers_request`: it answers a request, WriterOwner::replied() once it is
  /// out) and writes; `close_after` closes the connection once it is written. Once closing, a
  /// reply is dropped (and counted replied).
  void queue(std::string body, bool answers_request, bool close_after);
  /// Whether a write is in flight or queued.
  bool busy() const { return writing_ || !out_.empty(); }
  /// When the last write finished (never: the clock's epoch).
  Clock::time_point last_write() const { return last_write_; }
  /// Whether the connection should close now: the linger after the last reply is over, or the
  /// client has not read a reply for max(--frame-timeout, 5 s).
  bool stuck(const Limits& limits) const;

 private:
  struct Outgoing {
    std::array<unsigned char, kFrameHeaderBytes> header;
    std::string body;
    bool answers_request;
    bool close_after;
  };
  void write();
  void on_written(const boost::system::error_code& ec);
  void linger();
  void drain();

  boost::asio::ip::tcp::socket& socket_;
  WriterOwner& owner_;
  std::deque<Outgoing> out_;
  size_t in_flight_ = 0;  // entries of out_ the write in flight carries
  std::vector<boost::asio::const_buffer> buffers_;
  Clock::time_point write_started_, linger_started_, last_write_{};
  bool writing_ = false, closing_ = false, lingering_ = false;
  std::vector<char> drain_buf_;
  uint64_t drained_ = 0;
};

}  // namespace perfdojo::bridge
