// The binary hot path on strings alone: request parsing refuses every malformed frame with a
// precise message, and a record carries exactly what the env's own step returned.
#include "bridge/binary.h"

#include <doctest/doctest.h>

#include <cstring>

#include "bridge/base64.h"
#include "bridge/request.h"

using namespace perfdojo;
using namespace perfdojo::bridge;

namespace {

std::string header(uint16_t count, uint32_t id, unsigned char version = kBinaryVersion) {
  std::string h(kBinaryHeaderBytes, '\0');
  h[0] = static_cast<char>(kBinaryMagic);
  h[1] = static_cast<char>(version);
  std::memcpy(&h[2], &count, 2);
  std::memcpy(&h[4], &id, 4);
  return h;
}

std::string entry(uint64_t session, uint64_t value, uint32_t kind) {
  std::string e(kBinaryEntryBytes, '\0');
  std::memcpy(&e[0], &session, 8);
  std::memcpy(&e[8], &value, 8);
  std::memcpy(&e[16], &kind, 4);
  return e;
}

std::string refusal(const std::string& body, int max_entries = 8) {
  BinaryRequest r;
  auto err = parse_binary_request(body, max_entries, &r);
  REQUIRE(err.has_value());
  CHECK(err->type == ErrorType::kBadRequest);
  return err->message;
}

// A record read back field by field.
struct Decoded {
  int status, terminated, truncated, flags;
  uint32_t step;
  double reward, time_s, initial_time_s, best_time_s;
  std::string obs, mask, message;
};

Decoded decode_record(const std::string& rec) {
  Decoded d{};
  size_t p = 0;
  auto get = [&](void* out, size_t n) {
    REQUIRE(p + n <= rec.size());
    std::memcpy(out, rec.data() + p, n);
    p += n;
  };
  auto bytes = [&] {
    uint32_t n;
    get(&n, 4);
    REQUIRE(p + n <= rec.size());
    std::string s = rec.substr(p, n);
    p += n;
    return s;
  };
  d.status = static_cast<unsigned char>(rec[0]);
  d.terminated = rec[1];
  d.truncated = rec[2];
  d.flags = rec[3];
  p = 4;
  get(&d.step, 4);
  get(&d.reward, 8);
  get(&d.time_s, 8);
  get(&d.initial_time_s, 8);
  get(&d.best_time_s, 8);
  d.obs = bytes();
  d.mask = bytes();
  d.message = bytes();
  CHECK(p == rec.size());
  return d;
}

std::unique_ptr<env::Env> make_env(std::vector<std::string> spaces = {"features"}) {
  env::EnvConfig c;
  c.benchmark = "perfdojo://gen/softmax?seed=3";
  c.observation_spaces = std::move(spaces);
  auto e = env::Env::make(c);
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  return std::move(e).value();
}

}  // namespace

TEST_CASE("binary requests: every malformed frame is refused with what is wrong") {
  BinaryRequest r;
  const std::string ok = header(2, 77) + entry(5, 3, 1) + entry(6, 9, 2);
  REQUIRE_FALSE(parse_binary_request(ok, 8, &r).has_value());
  CHECK(r.id == 77);
  REQUIRE(r.entries.size() == 2);
  CHECK(r.entries[0].session == 5);
  CHECK(r.entries[0].value == 3);
  CHECK(r.entries[0].kind == BinaryEntry::Kind::kStep);
  CHECK(r.entries[1].kind == BinaryEntry::Kind::kResetSeed);

  CHECK(refusal(ok.substr(0, 5)).find("header is 8 bytes") != std::string::npos);
  CHECK(refusal(header(1, 1, 9) + entry(1, 1, 1)).find("version 9") != std::string::npos);
  CHECK(refusal(header(0, 1)).find("count is 0") != std::string::npos);
  CHECK(refusal(header(9, 1) + std::string(9 * kBinaryEntryBytes, '\0'))
            .find("exceed the limit of 8") != std::string::npos);
  CHECK(refusal(ok + "x").find("2 entries make 48 bytes, the frame has 49") != std::string::npos);
  CHECK(refusal(ok.substr(0, ok.size() - 1)).find("the frame has 47") != std::string::npos);
  const std::string bad_kind = refusal(header(2, 1) + entry(1, 1, 1) + entry(1, 1, 7));
  CHECK(bad_kind.find("entry 1 (byte 44): kind 7") != std::string::npos);
  CHECK(is_binary_frame(ok));
  CHECK_FALSE(is_binary_frame("{\"id\":1}"));
  CHECK_FALSE(is_binary_frame(""));
}

TEST_CASE("a binary record carries exactly what the env's step returned") {
  auto a = make_env();
  auto b = make_env();
  a->reset(4);
  auto rec0 = decode_record(run_binary_entry(*b, {0, 4, BinaryEntry::Kind::kResetSeed}));
  CHECK(rec0.status == 0);
  CHECK(rec0.step == 0);
  for (int i = 0; i < 6; ++i) {
    const auto mask = a->action_mask();
    int act = -1;
    for (int k = static_cast<int>(mask.size()) - 2; k >= 0 && act < 0; --k)
      if (mask[k] && (k * 7 + i) % 3 == 0) act = k;
    if (act < 0) act = static_cast<int>(mask.size()) - 1;
    env::StepResult want = a->step(act);
    Decoded got = decode_record(
        run_binary_entry(*b, {0, static_cast<uint64_t>(act), BinaryEntry::Kind::kStep}));
    CHECK(got.status == 0);
    CHECK(got.reward == want.reward);
    CHECK(got.time_s == want.info.time_s);
    CHECK(got.best_time_s == want.info.best_time_s);
    CHECK(got.initial_time_s == want.info.initial_time_s);
    CHECK(got.step == static_cast<uint32_t>(want.info.step));
    CHECK(got.terminated == want.terminated);
    CHECK(got.truncated == want.truncated);
    CHECK(((got.flags & 1) != 0) == want.info.illegal_action);
    REQUIRE(got.obs.size() == want.observation.features.size() * 4);
    CHECK(std::memcmp(got.obs.data(), want.observation.features.data(), got.obs.size()) == 0);
    CHECK(got.mask == pack_mask(want.info.action_mask));
    if (want.terminated) break;
  }
}

TEST_CASE("binary entries that cannot run leave the env as it was") {
  auto e = make_env();
  e->reset(1);
  const int n = e->action_spec().n;
  Decoded out =
      decode_record(run_binary_entry(*e, {0, static_cast<uint64_t>(n), BinaryEntry::Kind::kStep}));
  CHECK(out.status == 1);
  CHECK(out.message.rfind("invalid_action: action " + std::to_string(n) + " is out of range", 0) ==
        0);
  CHECK(e->state().trace.empty());

  auto text = make_env({"features", "ir_text"});
  text->reset(1);
  Decoded refused = decode_record(run_binary_entry(*text, {0, 0, BinaryEntry::Kind::kStep}));
  CHECK(refused.status == 1);
  CHECK(refused.message.find("observes 'ir_text'") != std::string::npos);
  CHECK(text->state().trace.empty());

  Decoded unknown =
      decode_record(binary_error_record({ErrorType::kUnknownSession, "no session 9"}));
  CHECK(unknown.status == 1);
  CHECK(unknown.message == "unknown_session: no session 9");
  CHECK(binary_reply(3, {}).size() == kBinaryHeaderBytes);
}
