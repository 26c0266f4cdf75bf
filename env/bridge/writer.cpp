#include "bridge/writer.h"

#include <algorithm>

namespace perfdojo::bridge {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

Writer::Writer(tcp::socket& socket, WriterOwner& owner) : socket_(socket), owner_(owner) {}

void Writer::queue(std::string body, bool answers_request, bool close_after) {
  if (owner_.closed() || closing_) {
    if (answers_request) owner_.replied();
    return;
  }
  Outgoing o;
  const auto n = static_cast<uint32_t>(body.size());
  o.header = {static_cast<unsigned char>(n >> 24), static_cast<unsigned char>(n >> 16),
              static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n)};
  o.body = std::move(body);
  o.answers_request = answers_request;
  o.close_after = close_after;
  out_.push_back(std::move(o));
  if (close_after) closing_ = true;  // read nothing more; finish writing, then close
  write();
}

void Writer::write() {
  if (writing_ || out_.empty() || owner_.closed()) return;
  writing_ = true;
  write_started_ = Clock::now();
  // Everything queued goes out in one gather write.
  in_flight_ = out_.size();
  buffers_.clear();
  for (size_t i = 0; i < in_flight_; ++i) {
    buffers_.emplace_back(out_[i].header.data(), out_[i].header.size());
    buffers_.emplace_back(out_[i].body.data(), out_[i].body.size());
    if (out_[i].close_after) {
      in_flight_ = i + 1;
      break;
    }
  }
  asio::async_write(socket_, buffers_,
                    [this, keep = owner_.hold()](const boost::system::error_code& ec, size_t) {
                      on_written(ec);
                    });
}

void Writer::on_written(const boost::system::error_code& ec) {
  writing_ = false;
  if (owner_.closed()) return;
  if (ec) {
    owner_.close();
    return;
  }
  bool close_now = false;
  for (size_t i = 0; i < in_flight_; ++i) {
    if (out_.front().answers_request) owner_.replied();
    close_now = close_now || out_.front().close_after;
    out_.pop_front();
  }
  last_write_ = Clock::now();
  if (close_now) {
    linger();
    return;
  }
  write();
  owner_.written();
}

// After a closing reply: send FIN, then discard input briefly so the client reads the reply
// instead of a reset caused by the bytes we never read.
void Writer::linger() {
  lingering_ = true;
  linger_started_ = Clock::now();
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  drain_buf_.resize(4096);
  drain();
}

void Writer::drain() {
  if (owner_.closed()) return;
  socket_.async_read_some(
      asio::buffer(drain_buf_),
      [this, keep = owner_.hold()](const boost::system::error_code& ec, size_t n) {
        drained_ += n;
        if (ec || drained_ > (64u << 20)) {
          owner_.close();
        } else {
          drain();
        }
      });
}

bool Writer::stuck(const Limits& l) const {
  if (lingering_) return seconds_since(linger_started_) > 2.0;
  return writing_ && l.frame_timeout_s > 0 &&
         seconds_since(write_started_) > std::max(l.frame_timeout_s, 5.0);
}

}  // namespace perfdojo::bridge
