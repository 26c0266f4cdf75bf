// The bridge protocol on strings alone: frames, JSON in and out, codecs and the session
// operations' refusals (each must leave the env exactly as it was).
#include "bridge/protocol.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "bridge/handlers.h"
#include "ir/print.h"

using namespace perfdojo;
using namespace perfdojo::bridge;

namespace {

Request parsed(const std::string& body) {
  Request r;
  auto err = parse_request(body, &r);
  REQUIRE_MESSAGE(!err, err->message);
  return r;
}

json::Document doc_of(const std::string& text) {
  json::Document d;
  d.Parse(text.c_str(), text.size());
  REQUIRE(!d.HasParseError());
  return d;
}

// The error a reply carries ("" when it is an ok reply).
std::string error_type_of(const std::string& reply) {
  json::Document d = doc_of(reply);
  REQUIRE(d.IsObject());
  if (d["ok"].GetBool()) return "";
  return d["error"]["type"].GetString();
}

std::unique_ptr<env::Env> small_env() {
  env::EnvConfig c;
  c.benchmark = "perfdojo://gen/softmax?seed=3";
  c.observation_spaces = {"features", "ir_text"};
  c.max_episode_steps = 12;
  auto e = env::Env::make(c);
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  return std::move(e).value();
}

int first_legal(env::Env& e) {
  auto m = e.action_mask();
  for (int i = 0; i + 1 < static_cast<int>(m.size()); ++i)
    if (m[i]) return i;
  return -1;
}

std::string op(env::Env& e, const std::string& body, const ConfigPolicy& policy = {}) {
  return handle_session_op(e, parsed(body), policy);
}

}  // namespace

TEST_CASE("a frame is a big-endian length followed by the body") {
  std::string f = encode_frame("{}");
  REQUIRE(f.size() == 6);
  CHECK(std::memcmp(f.data(), "\0\0\0\x02{}", 6) == 0);
  const unsigned char h[4] = {0x01, 0x02, 0x03, 0x04};
  CHECK(decode_frame_length(h) == 0x01020304u);
}

TEST_CASE("the decoder finds frames however the bytes are split") {
  const std::string stream = encode_frame("{\"a\":1}") + encode_frame("") + encode_frame("[2]");
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{5}, stream.size()}) {
    FrameDecoder d(1024);
    std::vector<std::string> got;
    std::string body;
    for (size_t i = 0; i < stream.size(); i += chunk) {
      d.feed(stream.data() + i, std::min(chunk, stream.size() - i));
      while (d.next(&body) == FrameDecoder::Status::kFrame) got.push_back(body);
    }
    REQUIRE(got.size() == 3);
    CHECK(got[0] == "{\"a\":1}");
    CHECK(got[1] == "");
    CHECK(got[2] == "[2]");
    CHECK(!d.mid_frame());
  }
}

TEST_CASE("the decoder refuses an oversized frame from its header alone") {
  FrameDecoder d(100);
  const unsigned char h[4] = {0x00, 0x00, 0x00, 0x65};  // 101 bytes announced
  d.feed(reinterpret_cast<const char*>(h), 4);
  std::string body;
  CHECK(d.next(&body) == FrameDecoder::Status::kTooLarge);
  CHECK(d.refused_length() == 101);
}

TEST_CASE("a partial frame is reported as mid-frame until it completes") {
  FrameDecoder d(100);
  std::string f = encode_frame("{\"id\":1}");
  d.feed(f.data(), 2);
  std::string body;
  CHECK(d.next(&body) == FrameDecoder::Status::kNeedMore);
  CHECK(d.mid_frame());
  d.feed(f.data() + 2, f.size() - 2);
  CHECK(d.next(&body) == FrameDecoder::Status::kFrame);
  CHECK(!d.mid_frame());
}

TEST_CASE("invalid JSON, non-objects and missing fields are refused with a precise message") {
  Request r;
  auto e = parse_request("{\"id\":1,", &r);
  REQUIRE(e);
  CHECK(e->type == ErrorType::kInvalidJson);
  CHECK(e->message.find("byte") != std::string::npos);

  e = parse_request("[1,2]", &r);
  REQUIRE(e);
  CHECK(e->type == ErrorType::kInvalidJson);

  e = parse_request("{\"op\":\"ping\"}", &r);
  REQUIRE(e);
  CHECK(e->type == ErrorType::kBadRequest);
  CHECK(e->message.find("'id'") != std::string::npos);

  e = parse_request("{\"id\":[1],\"op\":\"ping\"}", &r);
  REQUIRE(e);
  CHECK(e->type == ErrorType::kBadRequest);

  e = parse_request("{\"id\":7,\"op\":3}", &r);
  REQUIRE(e);
  CHECK(e->type == ErrorType::kBadRequest);
  CHECK(r.id == "7");  // the error reply can still name the request

  e = parse_request(std::string("{\"id\":1,\"op\":\"\xff\"}"), &r);
  REQUIRE(e);
  CHECK(e->type == ErrorType::kInvalidJson);  // not UTF-8
}

TEST_CASE("deeply nested input is parsed without recursion") {
  std::string deep(200000, '[');
  Request r;
  auto e = parse_request(deep, &r);
  REQUIRE(e);
  CHECK(e->type == ErrorType::kInvalidJson);
  std::string balanced = std::string(100000, '[') + std::string(100000, ']');
  e = parse_request(balanced, &r);
  REQUIRE(e);
  CHECK(e->message == "a request must be a JSON object");
}

TEST_CASE("ids are echoed exactly, strings escaped") {
  CHECK(parsed("{\"id\":18446744073709551615,\"op\":\"x\"}").id == "18446744073709551615");
  CHECK(parsed("{\"id\":-3,\"op\":\"x\"}").id == "-3");
  CHECK(parsed("{\"id\":\"a\\\"b\",\"op\":\"x\"}").id == "\"a\\\"b\"");
  CHECK(ok_reply("5", "{}") == "{\"id\":5,\"ok\":true,\"result\":{}}");
  CHECK(error_reply("null", {ErrorType::kUnknownOp, "no"}) ==
        "{\"id\":null,\"ok\":false,\"error\":{\"type\":\"unknown_op\",\"message\":\"no\"}}");
}

TEST_CASE("the writer escapes control characters and replaces invalid UTF-8") {
  JsonWriter w;
  w.value(std::string_view("a\"\\\n\x01\xc3\xa9\xff", 8));
  CHECK(w.str() == "\"a\\\"\\\\\\n\\u0001\xc3\xa9\\ufffd\"");
  json::Document d = doc_of(w.str());  // and it parses
  CHECK(d.IsString());
}

TEST_CASE("floats written as JSON read back exactly, non-finite numbers become null") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 20000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    if (!std::isfinite(f)) continue;
    JsonWriter w;
    w.value(f);
    const double back = std::strtod(w.str().c_str(), nullptr);
    REQUIRE_MESSAGE(static_cast<float>(back) == f, w.str());
  }
  JsonWriter w;
  w.begin_array().value(std::nan("")).value(INFINITY).value(0.1).value(-0.0f).end_array();
  CHECK(w.str() == "[null,null,0.1,-0]");
}

TEST_CASE("base64 round-trips and decoding is strict") {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)})
    CHECK(base64_decode(base64_encode(s)) == s);
  CHECK(base64_encode("abc") == "YWJj");
  CHECK(!base64_decode("YWJ"));       // length
  CHECK(!base64_decode("YW*j"));      // alphabet
  CHECK(!base64_decode("Y==="));      // padding too early
  CHECK(!base64_decode("YQ==YWJj"));  // data after padding
}

TEST_CASE("masks are packed high bit first, like numpy.packbits") {
  std::vector<uint8_t> m = {1, 0, 0, 0, 0, 0, 0, 1, 1};
  auto bytes = base64_decode(mask_base64(m));
  REQUIRE(bytes);
  REQUIRE(bytes->size() == 2);
  CHECK(static_cast<unsigned char>((*bytes)[0]) == 0x81);
  CHECK(static_cast<unsigned char>((*bytes)[1]) == 0x80);
}

TEST_CASE("packing a mask keeps every entry, at every length, whatever its nonzero value") {
  std::mt19937 rng(5);
  for (size_t n = 0; n <= 70; ++n) {
    std::vector<uint8_t> m(n);
    for (auto& v : m) v = rng() % 3 == 0 ? static_cast<uint8_t>(1 + rng() % 255) : 0;
    const std::string bits = pack_mask(m);
    REQUIRE(bits.size() == (n + 7) / 8);
    for (size_t i = 0; i < 8 * bits.size(); ++i) {
      const bool set = (static_cast<unsigned char>(bits[i / 8]) >> (7 - i % 8)) & 1;
      CHECK_MESSAGE(set == (i < n && m[i] != 0), "length " << n << ", entry " << i);
    }
  }
}

TEST_CASE(
    "a config is read strictly: unknown fields, wrong types and server settings are refused") {
  ConfigPolicy policy;
  auto refuse = [&](const std::string& text, ErrorType type, const std::string& needle) {
    json::Document d = doc_of(text);
    try {
      config_from_json(d, policy);
      FAIL("accepted " << text);
    } catch (const RequestError& e) {
      CHECK(e.error.type == type);
      CHECK_MESSAGE(e.error.message.find(needle) != std::string::npos, e.error.message);
    }
  };
  refuse("{\"benchmrk\":\"x\"}", ErrorType::kConfigError, "benchmrk");
  refuse("{\"max_episode_steps\":\"9\"}", ErrorType::kConfigError, "max_episode_steps");
  refuse("{\"max_episode_steps\":0}", ErrorType::kConfigError, "max_episode_steps");
  refuse("{\"seed\":-1}", ErrorType::kConfigError, "seed");
  refuse("{\"observation_spaces\":[]}", ErrorType::kConfigError, "observation_spaces");
  refuse("{\"observation_spaces\":[\"features\",\"features\"]}", ErrorType::kConfigError, "twice");
  refuse("{\"flat\":{\"max_scopes\":1e9}}", ErrorType::kConfigError, "config.flat.max_scopes");
  refuse("{\"measure\":{\"min_reps\":5,\"max_reps\":2}}", ErrorType::kConfigError, "max_reps");
  refuse("{\"backend_config\":{\"compiler\":\"/bin/sh\"}}", ErrorType::kConfigError, "server");
  refuse("{\"benchmark\":\"/etc/passwd\"}", ErrorType::kForbidden, "--allow-files");
  refuse("{\"benchmark\":\"file://x.pdj\"}", ErrorType::kForbidden, "--allow-files");

  json::Document ok = doc_of(
      "{\"benchmark\":\"perfdojo://suite/"
      "softmax\",\"observation_spaces\":\"tokens\",\"seed\":18446744073709551615,"
      "\"flat\":{\"max_scopes\":8},\"measure\":{\"verify\":false}}");
  env::EnvConfig c = config_from_json(ok, policy);
  CHECK(c.observation_spaces == std::vector<std::string>{"tokens"});
  CHECK(c.seed == UINT64_MAX);
  CHECK(c.flat.max_scopes == 8);
  CHECK(!c.measure.verify);
  policy.allow_files = true;
  json::Document file = doc_of("{\"benchmark\":\"my.pdj\"}");
  CHECK(config_from_json(file, policy).benchmark == "my.pdj");
}

TEST_CASE("a state written as JSON reads back equal") {
  env::EpisodeState s;
  s.benchmark = "perfdojo://suite/softmax";
  s.backend = "cost_model";
  s.reward_space = "log_speedup_step";
  s.seed = 42;
  s.trace = {"tile_scope 0 2", "unroll 0.1 4"};
  s.rewards = {0.5, -0.1};
  s.initial_time_s = 1e-3;
  s.final_time_s = 5e-4;
  JsonWriter w;
  write_state(w, s);
  json::Document d = doc_of(w.str());
  env::EpisodeState t = state_from_json(d);
  CHECK(t.benchmark == s.benchmark);
  CHECK(t.seed == s.seed);
  CHECK(t.trace == s.trace);
  CHECK(t.rewards == s.rewards);
  CHECK(t.final_time_s == s.final_time_s);
}

TEST_CASE("an out-of-range action is an invalid_action error and changes nothing") {
  auto e = small_env();
  e->reset(1);
  const int n = e->action_spec().n;
  const auto before = e->state();
  CHECK(error_type_of(op(*e, "{\"id\":1,\"op\":\"step\",\"session\":1,\"action\":" +
                                 std::to_string(n) + "}")) == "invalid_action");
  CHECK(error_type_of(op(*e, "{\"id\":1,\"op\":\"step\",\"session\":1,\"action\":-1}")) ==
        "invalid_action");
  CHECK(error_type_of(op(*e, "{\"id\":1,\"op\":\"step\",\"session\":1,\"action\":1.5}")) ==
        "bad_request");
  CHECK(error_type_of(
            op(*e, "{\"id\":1,\"op\":\"step\",\"session\":1,\"action\":\"no_such_action 1\"}")) ==
        "invalid_action");
  CHECK(error_type_of(op(*e, "{\"id\":1,\"op\":\"step\",\"session\":1}")) == "bad_request");
  // A list with one bad index applies none of it.
  const int legal = first_legal(*e);
  REQUIRE(legal >= 0);
  CHECK(error_type_of(op(*e, "{\"id\":1,\"op\":\"step\",\"session\":1,\"actions\":[" +
                                 std::to_string(legal) + "," + std::to_string(n + 7) + "]}")) ==
        "invalid_action");
  const auto after = e->state();
  CHECK(after.trace == before.trace);
  CHECK(after.rewards == before.rewards);
}

TEST_CASE("a step reply carries the observation, reward, flags and info") {
  auto e = small_env();
  auto direct = small_env();
  e->reset(2);
  direct->reset(2);
  const int a = first_legal(*e);
  std::string reply =
      op(*e, "{\"id\":9,\"op\":\"step\",\"session\":1,\"action\":" + std::to_string(a) + "}");
  env::StepResult r = direct->step(a);
  json::Document d = doc_of(reply);
  REQUIRE(d["ok"].GetBool());
  const auto& res = d["result"];
  CHECK(res["reward"].GetDouble() == r.reward);
  CHECK(res["terminated"].GetBool() == r.terminated);
  CHECK(res["info"]["action"].GetString() == r.info.action);
  CHECK(res["observation"]["ir_text"].GetString() == r.observation.ir_text);
  REQUIRE(res["observation"]["features"].Size() == r.observation.features.size());
  for (size_t i = 0; i < r.observation.features.size(); ++i)
    CHECK(
        static_cast<float>(res["observation"]["features"][static_cast<unsigned>(i)].GetDouble()) ==
        r.observation.features[i]);
  CHECK(res["info"]["action_mask"].GetString() == mask_base64(r.info.action_mask));
}

TEST_CASE("observation_format base64 carries the features' exact bytes; other values are refused") {
  auto e = small_env();
  auto direct = small_env();
  const std::string reset_reply = op(
      *e, "{\"id\":1,\"op\":\"reset\",\"session\":1,\"seed\":4,\"observation_format\":\"base64\"}");
  auto [obs0, info0] = direct->reset(4);
  auto features_of = [](const std::string& reply) {
    json::Document d = doc_of(reply);
    REQUIRE(d["ok"].GetBool());
    const auto& f = d["result"]["observation"]["features"];
    REQUIRE(f.IsString());
    auto bytes = base64_decode(std::string_view(f.GetString(), f.GetStringLength()));
    REQUIRE(bytes);
    std::vector<float> out(bytes->size() / sizeof(float));
    REQUIRE(bytes->size() == out.size() * sizeof(float));
    std::memcpy(out.data(), bytes->data(), bytes->size());  // little-endian, as the machine
    return out;
  };
  CHECK(features_of(reset_reply) == obs0.features);
  const int a = first_legal(*e);
  const std::string step_reply =
      op(*e, "{\"id\":2,\"op\":\"step\",\"session\":1,\"action\":" + std::to_string(a) +
                 ",\"observation_format\":\"base64\"}");
  env::StepResult r = direct->step(a);
  CHECK(features_of(step_reply) == r.observation.features);
  // ir_text is text whatever the format.
  CHECK(doc_of(step_reply)["result"]["observation"]["ir_text"].GetString() ==
        r.observation.ir_text);
  // "list" is the default's name; anything else is refused and changes nothing.
  const auto before = e->state();
  CHECK(error_type_of(
            op(*e, "{\"id\":3,\"op\":\"step\",\"session\":1,\"action\":" + std::to_string(a) +
                       ",\"observation_format\":\"hex\"}")) == "bad_request");
  CHECK(e->state().trace == before.trace);
  json::Document listed = doc_of(op(
      *e, "{\"id\":4,\"op\":\"reset\",\"session\":1,\"seed\":4,\"observation_format\":\"list\"}"));
  CHECK(listed["result"]["observation"]["features"].IsArray());
}

TEST_CASE("reset refuses unknown options and file benchmarks without --allow-files") {
  auto e = small_env();
  e->reset(1);
  e->step(first_legal(*e));
  const auto before = e->state();
  CHECK(error_type_of(
            op(*e, "{\"id\":1,\"op\":\"reset\",\"session\":1,\"options\":{\"bench\":\"x\"}}")) ==
        "bad_request");
  CHECK(error_type_of(op(*e,
                         "{\"id\":1,\"op\":\"reset\",\"session\":1,\"options\":{\"benchmark\":\"/"
                         "tmp/x.pdj\"}}")) == "forbidden");
  CHECK(error_type_of(op(*e, "{\"id\":1,\"op\":\"reset\",\"session\":1,\"seed\":\"1\"}")) ==
        "bad_request");
  CHECK(e->state().trace == before.trace);
}

TEST_CASE(
    "a gather kernel plays through the bridge; one whose index range leaves its table "
    "is refused at reset naming the place") {
  // docs/ir.md, "Indirect indices": the suite's embedding bag plays as any kernel; a file kernel
  // declaring indices past its table is refused at reset with the checker's file:line:col.
  auto e = small_env();
  e->reset(1);
  const std::string ok = op(*e,
                            "{\"id\":1,\"op\":\"reset\",\"session\":1,\"options\":{"
                            "\"benchmark\":\"perfdojo://suite/embedding-bag-sum\"}}");
  REQUIRE_MESSAGE(doc_of(ok)["ok"].GetBool(), ok);
  CHECK(e->state().benchmark == "perfdojo://suite/embedding-bag-sum");
  CHECK(doc_of(op(*e, "{\"id\":2,\"op\":\"step\",\"session\":1,\"action\":" +
                          std::to_string(first_legal(*e)) + "}"))["ok"]
            .GetBool());
  namespace fs = std::filesystem;
  const std::string path = (fs::temp_directory_path() / "perfdojo-bad-gather.pdj").string();
  std::ofstream(path) << "V = 10\ninput W: f32[V, 4]\ninput idx: i32[3] in [0, 11)\n"
                         "output y: f32[3, 4]\n\n3 4 y[{0},{1}] = W[idx[{0}],{1}]\n";
  ConfigPolicy files;
  files.allow_files = true;
  const std::string bad = op(*e,
                             "{\"id\":3,\"op\":\"reset\",\"session\":1,\"options\":{"
                             "\"benchmark\":\"" +
                                 path + "\"}}",
                             files);
  // Reset keeps the session on its kernel and says why in info.error (docs/bridge.md).
  INFO(bad);
  const json::Document reply = doc_of(bad);
  REQUIRE(reply["ok"].GetBool());
  const std::string why = reply["result"]["info"]["error"].GetString();
  CHECK(why.find("perfdojo-bad-gather.pdj:6:18: error: index 0 of 'W[idx[{0}],{1}]' ranges over "
                 "[0, 10] but the dimension has extent 10") != std::string::npos);
  CHECK(e->state().benchmark == "perfdojo://suite/embedding-bag-sum");  // the session goes on
  fs::remove(path);
}

TEST_CASE("save and restore round-trip in both formats; a bad state changes nothing") {
  auto e = small_env();
  e->reset(5);
  for (int k = 0; k < 3; ++k) e->step(first_legal(*e));
  for (std::string format : {"json", "binary"}) {
    std::string saved =
        op(*e, "{\"id\":1,\"op\":\"save\",\"session\":1,\"format\":\"" + format + "\"}");
    json::Document d = doc_of(saved);
    REQUIRE(d["ok"].GetBool());
    auto other = small_env();
    JsonWriter req;
    req.begin_object()
        .field("id", 2)
        .field("op", "restore")
        .field("session", 1)
        .field("format", format)
        .key("state");
    if (format == "json") {
      JsonWriter s;
      write_state(s, e->state());
      req.raw(s.str());
    } else {
      req.value(std::string(d["result"]["state"].GetString()));
    }
    req.end_object();
    std::string restored = op(*other, req.str());
    CHECK(error_type_of(restored) == "");
    CHECK(other->state().trace == e->state().trace);
    CHECK(ir::print_program(other->program()) == ir::print_program(e->program()));
  }
  const auto before = e->state();
  CHECK(error_type_of(op(*e,
                         "{\"id\":3,\"op\":\"restore\",\"session\":1,\"state\":{\"benchmark\":"
                         "\"perfdojo://suite/softmax\",\"trace\":[\"tile_scope 0 3 7\"]}}")) ==
        "invalid_state");
  CHECK(error_type_of(op(*e,
                         "{\"id\":3,\"op\":\"restore\",\"session\":1,\"format\":\"binary\","
                         "\"state\":\"AAAA\"}")) == "invalid_state");
  CHECK(
      error_type_of(op(
          *e,
          "{\"id\":3,\"op\":\"restore\",\"session\":1,\"format\":\"binary\",\"state\":\"!!\"}")) ==
      "invalid_state");
  CHECK(error_type_of(
            op(*e, "{\"id\":3,\"op\":\"restore\",\"session\":1,\"state\":{\"trace\":[]}}")) ==
        "invalid_state");
  CHECK(e->state().trace == before.trace);
}

TEST_CASE("validate checks the session's own episode by default") {
  auto e = small_env();
  e->reset(4);
  e->step(first_legal(*e));
  json::Document d = doc_of(op(*e, "{\"id\":1,\"op\":\"validate\",\"session\":1}"));
  REQUIRE(d["ok"].GetBool());
  CHECK(d["result"]["trace_legal"].GetBool());
}

TEST_CASE("the action mask comes as base64 bits or as a list") {
  auto e = small_env();
  e->reset(1);
  json::Document b = doc_of(op(*e, "{\"id\":1,\"op\":\"action_mask\",\"session\":1}"));
  CHECK(b["result"]["mask"].GetString() == mask_base64(e->action_mask()));
  json::Document l =
      doc_of(op(*e, "{\"id\":1,\"op\":\"action_mask\",\"session\":1,\"format\":\"list\"}"));
  CHECK(l["result"]["mask"].Size() == e->action_mask().size());
  CHECK(
      error_type_of(op(*e, "{\"id\":1,\"op\":\"action_mask\",\"session\":1,\"format\":\"hex\"}")) ==
      "bad_request");
}

namespace {

// The `name`s in backticks on `text`, in order.
std::vector<std::string> backticked(const std::string& text) {
  std::vector<std::string> out;
  for (size_t a = text.find('`'); a != std::string::npos; a = text.find('`', a + 1)) {
    const size_t b = text.find('`', a + 1);
    if (b == std::string::npos) break;
    out.push_back(text.substr(a + 1, b - a - 1));
    a = b;
  }
  return out;
}

std::string bridge_doc() {
  // The repository root is two folders above benchmarks/unseen.
  std::ifstream in(std::string(PERFDOJO_DOCS_DIR) + "/bridge.md");
  REQUIRE_MESSAGE(in.good(), "docs/bridge.md is missing");
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

}  // namespace

TEST_CASE("the operations table is the one list: names, session ops and env ops agree") {
  std::set<std::string> seen;
  for (const Operation& o : operations()) {
    CAPTURE(o.name);
    CHECK(seen.insert(std::string(o.name)).second);  // no name twice
    CHECK(find_operation(o.name) == &o);
    // An env operation, and only one, has a function; a session op carries "session".
    CHECK((o.route == Route::kEnv) == (o.run != nullptr));
    const bool session =
        o.route == Route::kEnv || o.route == Route::kFork || o.route == Route::kClose;
    CHECK(o.session == session);
    CHECK(is_session_op(std::string(o.name)) == session);
    CHECK((!o.cheap || o.route == Route::kEnv));  // only env ops may run inline
  }
  CHECK(find_operation("frobnicate") == nullptr);
  CHECK(operation_names().size() == operations().size());
  CHECK(operation_names().front() == "hello");
  // The unknown_op message lists every operation, in table order.
  const Error e = unknown_op_error("frobnicate");
  CHECK(e.type == ErrorType::kUnknownOp);
  std::string all;
  for (const auto& n : operation_names()) all += (all.empty() ? "" : ", ") + n;
  CHECK(e.message == "unknown op 'frobnicate'; expected one of " + all);
  // The hello reply lists them too.
  json::Document hello = doc_of(hello_result(Limits{}));
  const auto& listed = hello["operations"];
  REQUIRE(listed.IsArray());
  REQUIRE(listed.Size() == operation_names().size());
  for (json::SizeType i = 0; i < listed.Size(); ++i)
    CHECK(std::string(listed[i].GetString()) == operation_names()[i]);
}

TEST_CASE("docs/bridge.md lists the operations table's operations and its inline ones") {
  const std::string doc = bridge_doc();
  // The Operations table: one row per operation but hello (the Handshake section's), in order.
  const size_t at = doc.find("### Operations");
  REQUIRE(at != std::string::npos);
  const size_t end = doc.find("\n\n", doc.find("| op |", at));
  std::istringstream rows(doc.substr(at, end - at));
  std::vector<std::string> documented;
  for (std::string line; std::getline(rows, line);)
    if (line.rfind("| `", 0) == 0) documented.push_back(backticked(line).front());
  std::vector<std::string> expected;
  for (const Operation& o : operations())
    if (o.route != Route::kHello) expected.emplace_back(o.name);
  CHECK(documented == expected);
  // "Inline steps": the cheap operations, named before "of a deterministic session".
  const size_t in = doc.find("**Inline steps.**");
  REQUIRE(in != std::string::npos);
  const size_t stop = doc.find("of a deterministic session", in);
  REQUIRE(stop != std::string::npos);
  const auto named = backticked(doc.substr(in, stop - in));
  std::set<std::string> cheap;
  for (const Operation& o : operations())
    if (o.cheap) cheap.emplace(o.name);
  CHECK(std::set<std::string>(named.begin(), named.end()) == cheap);
}
