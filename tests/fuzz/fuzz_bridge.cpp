// libFuzzer target: the bridge's input path without a socket. The bytes are a client's stream,
// cut into reads of sizes taken from the first byte; every frame the decoder yields is parsed as
// a request and, when it is one, served as the server would on one cost-model session (a
// `make` replaces it), binary frames included. Replies must be JSON objects or binary replies;
// nothing may crash or hang.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "bridge/handlers.h"
#include "bridge/protocol.h"
#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace perfdojo;
  using namespace perfdojo::bridge;
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 64;
  ++data;
  --size;
  ConfigPolicy policy;            // no files, no compiler: what a server gives a remote client
  std::unique_ptr<env::Env> env;  // per input: a finding must reproduce from its input alone
  FrameDecoder decoder(4096);
  std::string body;
  int frames = 0;
  for (size_t at = 0; at < size && frames < 16; at += chunk) {
    decoder.feed(reinterpret_cast<const char*>(data) + at, std::min(chunk, size - at));
    for (;;) {
      const auto st = decoder.next(&body);
      if (st != FrameDecoder::Status::kFrame) {
        if (st == FrameDecoder::Status::kTooLarge) return 0;
        break;
      }
      ++frames;
      if (is_binary_frame(body)) {
        // The binary hot path: a parsed frame runs its entries on the session (any session id
        // names it); every record must be well formed.
        BinaryRequest br;
        if (parse_binary_request(body, 8, &br) || !env) continue;
        std::vector<std::string> records;
        for (const auto& e : br.entries) records.push_back(run_binary_entry(*env, e));
        const std::string reply = binary_reply(br.id, records);
        if (reply.size() < kBinaryHeaderBytes || !is_binary_frame(reply)) std::abort();
        continue;
      }
      Request req;
      if (parse_request(body, &req)) continue;  // answered with an error reply
      // Only the cost model: a fuzzed request must not start compilers and measurements.
      if (body.find("x86") != std::string::npos || body.find("interpreter") != std::string::npos)
        continue;
      std::string reply;
      try {
        if (req.op == "make") {
          env = make_env(req, policy);
          continue;
        }
        if (!env || !is_session_op(req.op) || req.op == "fork") continue;
        reply = handle_session_op(*env, req, policy);
      } catch (const RequestError&) {
        continue;  // a typed refusal, as the server sends it
      }
      util::json::Document d;
      if (util::parse_json(reply, &d) || !d.IsObject()) std::abort();
    }
  }
  return 0;
}
