// The measurement farm's client: replies matched by id, and a farm that garbles a line, dies,
// stalls or never says it is ready gives a clear error and a local fallback, never a crash or a
// hang. The farms here are small shell scripts.
#include "backends/remote_backend.h"

#include <doctest/doctest.h>

#include "ir/load.h"
#include "ir/parse.h"

using namespace perfdojo;
using namespace perfdojo::backends;

namespace {

const char* kReady = R"(echo '{"ready":true,"workers":3}'; )";
// Answers every request with a median of 0.5 s per program (two programs for a compare).
const char* kEcho =
    R"(while read -r l; do id=$(printf '%s\n' "$l" | sed 's/^{"id":\([0-9]*\),.*/\1/');
  m='{"median_s":0.5,"min_s":0.4,"reps":3,"verified":true,"flags":"farm"}';
  case "$l" in *'"op":"compare"'*) r="$m,$m";; *) r="$m";; esac;
  echo "{\"id\":$id,\"ok\":true,\"results\":[$r],\"worker\":\"n1\"}"; done)";

std::shared_ptr<Farm> start(const std::string& script, double timeout_s = 10) {
  auto f = Farm::start({"sh", "-c", script}, timeout_s);
  if (auto* e = std::get_if<std::string>(&f)) FAIL(*e);
  return std::get<std::shared_ptr<Farm>>(f);
}

ir::Program tiny() {
  auto p = ir::load_program("N = 8\ninput a: f32[N]\noutput b: f32[N]\n\nN b[{0}] = a[{0}] * 2\n");
  REQUIRE(p.ok());
  return *p;
}

}  // namespace

TEST_CASE("a farm's replies come back to the requests that asked, whatever their order") {
  auto farm = start(std::string(kReady) + kEcho);
  CHECK(farm->workers() == 3);
  RemoteBackend b(make_backend("interpreter"), farm);
  CHECK(b.concurrency() == 3);
  const auto p = tiny();
  auto ms = b.measure_each({&p, &p, &p}, {});
  REQUIRE(ms.size() == 3);
  for (const auto& m : ms) {
    CHECK(m.ok());
    CHECK(m.median_s == 0.5);
    CHECK(m.flags == "farm");
  }
  auto pair = b.compare({&p, &p}, {});
  REQUIRE(pair.size() == 2);
  CHECK(pair[1].median_s == 0.5);
  CHECK(b.remote());
}

TEST_CASE("a farm that refuses a request gives that request an error and keeps serving") {
  auto farm = start(std::string(kReady) +
                    R"(read -r l; echo '{"id":1,"ok":false,"error":"unknown backend"}'; )" + kEcho);
  RemoteBackend b(make_backend("interpreter"), farm);
  const auto p = tiny();
  auto m = b.measure(p, {});
  REQUIRE(m.error);
  CHECK(m.error->find("unknown backend") != std::string::npos);
  CHECK(b.measure(p, {}).median_s == 0.5);  // the next request is served
}

TEST_CASE("a garbled line from the farm stops it and the backend measures locally") {
  for (const char* reply : {"garbage", R"({"id":99,"ok":true,"results":[]})",
                            R"({"id":1,"ok":true,"results":[{"median_s":"fast"}]})",
                            R"({"id":1,"ok":true,"results":[]})"}) {
    CAPTURE(reply);
    auto farm = start(std::string(kReady) + "read -r l; echo '" + reply + "'; sleep 30");
    RemoteBackend b(make_backend("interpreter"), farm);
    const auto p = tiny();
    auto m = b.measure(p, {});
    CHECK(m.ok());
    CHECK(m.median_s != 0.5);  // the interpreter's estimate, not a farm's figure
    CHECK_FALSE(b.remote());
    CHECK(b.concurrency() == 1);
    CHECK(farm->error().find("not a reply") != std::string::npos);
  }
}

TEST_CASE("a farm that dies is noticed at once, and one that stalls at its deadline") {
  auto dead = start(std::string(kReady) + "read -r l; exit 3");
  RemoteBackend b(make_backend("interpreter"), dead);
  const auto p = tiny();
  CHECK(b.measure(p, {}).ok());  // measured locally
  CHECK(dead->error().find("exited") != std::string::npos);

  auto stalled = start(std::string(kReady) + "sleep 30");
  Farm::Request q{"measure", "interpreter", {&p}, {}};
  auto got = stalled->call({q}, 0.3);
  REQUIRE(got.size() == 1);
  CHECK_FALSE(got[0].has_value());
  CHECK(stalled->error().find("no answer within") != std::string::npos);
}

TEST_CASE("a farm that does not start or sends no ready line is an error that says so") {
  auto missing = Farm::start({"/nonexistent/farm"}, 5);
  REQUIRE(std::holds_alternative<std::string>(missing));
  CHECK(std::get<std::string>(missing).find("did not start") != std::string::npos);
  auto chatty = Farm::start({"sh", "-c", "echo hello; sleep 30"}, 5);
  REQUIRE(std::holds_alternative<std::string>(chatty));
  CHECK(std::get<std::string>(chatty).find("'hello'") != std::string::npos);
  auto no_workers = Farm::start({"sh", "-c", R"(echo '{"ready":true,"workers":0}')"}, 5);
  REQUIRE(std::holds_alternative<std::string>(no_workers));
  CHECK(std::get<std::string>(no_workers).find("workers") != std::string::npos);
}

TEST_CASE("measurements and options survive the farm protocol, and bad fields are named") {
  Measurement m;
  m.median_s = 1.5e-3;
  m.min_s = 1e-3;
  m.reps = 7;
  m.verified = true;
  m.noisy = true;
  m.flags = "cc -O3";
  util::json::Document doc;
  REQUIRE_FALSE(util::parse_json(measurement_json(m), &doc));
  Measurement back;
  REQUIRE_FALSE(parse_measurement(doc, &back));
  CHECK(back.median_s == m.median_s);
  CHECK(back.reps == 7);
  CHECK(back.noisy);
  CHECK(back.flags == "cc -O3");

  MeasureOptions o;
  o.seed = 42;
  o.verify = false;
  o.max_reps = 9;
  REQUIRE_FALSE(util::parse_json(options_json(o), &doc));
  MeasureOptions ob;
  REQUIRE_FALSE(parse_options(doc, &ob));
  CHECK(ob.seed == 42);
  CHECK_FALSE(ob.verify);
  CHECK(ob.max_reps == 9);

  REQUIRE_FALSE(util::parse_json(R"({"median_s":1,"reps":2.5})", &doc));
  CHECK(parse_measurement(doc, &back).value().find("'reps'") != std::string::npos);
  REQUIRE_FALSE(util::parse_json(R"({"min_reps":5,"max_reps":2})", &doc));
  CHECK(parse_options(doc, &ob).has_value());
}

TEST_CASE("--workers names a Ray address or local, nothing else") {
  auto ray = farm_command("ray://head:10001", "/bin/perfdojo");
  REQUIRE(std::holds_alternative<std::vector<std::string>>(ray));
  CHECK(std::get<std::vector<std::string>>(ray).back() == "ray://head:10001");
  auto direct = farm_command("ray:auto", "/bin/perfdojo");
  CHECK(std::get<std::vector<std::string>>(direct).back() == "auto");
  auto local = farm_command("local", "/bin/perfdojo");
  CHECK(std::get<std::vector<std::string>>(local) ==
        std::vector<std::string>{"/bin/perfdojo", "measure-worker"});
  CHECK(std::holds_alternative<std::string>(farm_command("tcp://x", "/bin/perfdojo")));
}
