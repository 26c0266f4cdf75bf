#include "gym/env.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "backends/machine_profile.h"
#include "gym/dataset.h"
#include "gym/observation.h"
#include "gym/vector_env.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "support/skip.h"
#include "transforms/registry.h"

using namespace perfdojo;
using env::Env;
using env::EnvConfig;

namespace {

EnvConfig small_config(const std::string& benchmark = "perfdojo://gen/softmax?seed=3") {
  EnvConfig c;
  c.benchmark = benchmark;
  c.observation_spaces = {"features", "ir_text"};
  c.max_episode_steps = 12;
  return c;
}

std::unique_ptr<Env> make(const EnvConfig& c) {
  auto e = Env::make(c);
  REQUIRE_MESSAGE(e.ok(), e.error_text());
  return std::move(e).value();
}

// The first legal non-stop action of the current state.
int first_legal(Env& e) {
  auto m = e.action_mask();
  for (int i = 0; i + 1 < static_cast<int>(m.size()); ++i)
    if (m[i]) return i;
  return -1;
}

int first_illegal_existing(Env& e) {
  auto m = e.action_mask();
  for (int i = 0; i + 1 < static_cast<int>(m.size()); ++i)
    if (!m[i] && e.decode(i)) return i;
  return -1;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("perfdojo_env_test_" + name)).string();
}

}  // namespace

TEST_CASE("a bad config is refused with a message naming the problem") {
  EnvConfig c = small_config();
  c.backend = "nonesuch";
  auto e = Env::make(c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error_text().find("unknown backend 'nonesuch'") != std::string::npos);
  c = small_config();
  c.reward_space = "speed";
  CHECK(Env::make(c).error_text().find("unknown reward space") != std::string::npos);
  c = small_config();
  c.observation_spaces = {"pixels"};
  CHECK(Env::make(c).error_text().find("unknown observation space 'pixels'") != std::string::npos);
  c = small_config("perfdojo://suite/nonesuch");
  CHECK(Env::make(c).error_text().find("no kernel 'nonesuch'") != std::string::npos);
}

TEST_CASE("reset returns the declared observation spaces and a full mask") {
  auto e = make(small_config());
  auto [obs, info] = e->reset(7);
  CHECK(obs.features.size() == env::kFeatureSize);
  CHECK(obs.ir_text.find("max(") != std::string::npos);
  CHECK(obs.tokens.empty());  // not requested
  CHECK(info.action_mask.size() == static_cast<size_t>(e->action_spec().n));
  CHECK(info.action_mask.back() == 0);  // stop: not before progress (stop_after_progress)
  CHECK(info.time_s > 0);
  CHECK(info.time_s == info.initial_time_s);
  CHECK_FALSE(info.error);
}

TEST_CASE("an illegal action is refused with its reason and a penalty, the program unchanged") {
  auto c = small_config();
  c.illegal_action_penalty = -0.5;
  auto e = make(c);
  e->reset(1);
  int bad = first_illegal_existing(*e);
  REQUIRE(bad >= 0);
  uint64_t before = ir::structural_hash(e->program());
  auto r = e->step(bad);
  CHECK(r.reward == -0.5);
  CHECK(r.info.illegal_action);
  CHECK(r.info.action_had_no_effect);
  CHECK(r.info.legality != "ok");
  CHECK_FALSE(r.info.legality_message.empty());
  CHECK_FALSE(r.terminated);
  CHECK(ir::structural_hash(e->program()) == before);
}

TEST_CASE(
    "a move that changes only a declaration (stream_stores) refreshes the mask: the same "
    "action again is refused, not applied") {
  auto e = make(small_config());
  e->reset(1);
  auto m = e->action_mask();
  int stream = -1;
  for (int i = 0; i + 1 < static_cast<int>(m.size()) && stream < 0; ++i) {
    auto a = e->decode(i);
    if (m[i] && a && a->kind == transforms::Kind::kStreamStores) stream = i;
  }
  REQUIRE(stream >= 0);
  const std::vector<ir::NodePtr> body = e->program().body;
  auto r = e->step(stream);
  REQUIRE_FALSE(r.info.illegal_action);
  CHECK(e->program().body == body);  // the body's nodes are the very same
  CHECK(e->action_mask()[stream] == 0);
  r = e->step(stream);  // once threw an internal error: the cached mask still said legal
  CHECK(r.info.illegal_action);
  CHECK(r.info.legality == "nothing_to_do");
}

TEST_CASE("an out-of-range action never throws and says it is out of range") {
  auto e = make(small_config());
  e->reset(1);
  for (int a : {-1, e->action_spec().n, 1 << 30}) {
    auto r = e->step(a);
    CHECK(r.info.illegal_action);
    CHECK(r.info.legality_message.find("out of range") != std::string::npos);
  }
}

TEST_CASE("a legal action changes the program and rewards the change in time") {
  auto e = make(small_config());
  auto [obs, info] = e->reset(1);
  int a = first_legal(*e);
  REQUIRE(a >= 0);
  auto r = e->step(a);
  CHECK_FALSE(r.info.illegal_action);
  CHECK(r.info.legality == "ok");
  CHECK(std::isfinite(r.reward));
  // The default reward pays only for beating the best so far (here the initial program).
  CHECK(r.reward == doctest::Approx(std::max(0.0, std::log(info.time_s / r.info.time_s))));
}

TEST_CASE("log_speedup_best never pays for a slowdown and sums to log(initial / best)") {
  for (const char* space : {"log_speedup_best", "log_speedup_step"}) {
    EnvConfig c = small_config();
    c.reward_space = space;
    c.max_episode_steps = 40;
    auto e = make(c);
    auto [obs, info] = e->reset(2);
    std::mt19937 rng(7);
    double sum = 0, last_time = info.time_s, best = info.time_s, prev = info.time_s;
    bool negative = false;
    for (int i = 0; i < 40; ++i) {
      std::vector<int> legal;
      const auto mask = e->action_mask();
      for (int a = 0; a + 1 < static_cast<int>(mask.size()); ++a)
        if (mask[a]) legal.push_back(a);
      if (legal.empty()) break;
      auto r = e->step(legal[rng() % legal.size()]);
      REQUIRE_FALSE(r.info.illegal_action);
      const double t = r.info.time_s;
      if (std::string(space) == "log_speedup_best") {
        CHECK(r.reward >= 0);
        CHECK(r.reward == doctest::Approx(t < best ? std::log(best / t) : 0.0));
      } else {
        CHECK(r.reward == doctest::Approx(std::log(prev / t)));
        negative = negative || r.reward < 0;
      }
      best = std::min(best, t);
      prev = last_time = t;
      CHECK(r.info.best_time_s == doctest::Approx(best));
      sum += r.reward;
      if (r.terminated || r.truncated) break;
    }
    if (std::string(space) == "log_speedup_best")
      CHECK(sum == doctest::Approx(std::log(info.time_s / best)));
    else
      CHECK(sum == doctest::Approx(std::log(info.time_s / last_time)));
  }
}

TEST_CASE("stop is refused until the episode beats its start, then terminates") {
  auto e = make(small_config());
  auto [obs, info] = e->reset(1);
  const int stop = e->action_spec().stop;
  CHECK(info.action_mask[stop] == 0);
  auto refused = e->step(stop);
  CHECK(refused.info.illegal_action);
  CHECK(refused.info.legality == "no_progress");
  CHECK_FALSE(refused.terminated);
  CHECK(refused.reward == e->config().illegal_action_penalty);
  CHECK(refused.observation.ir_text == obs.ir_text);
  // The first legal action that makes the program faster (tried on a twin env); taking it makes
  // stop legal.
  int faster = -1;
  const auto mask = e->action_mask();
  for (int a = 0; a < stop && faster < 0; ++a) {
    if (!mask[a]) continue;
    auto twin = make(small_config());
    twin->reset(1);
    if (twin->step(a).info.best_time_s < info.initial_time_s) faster = a;
  }
  REQUIRE(faster >= 0);
  auto r = e->step(faster);
  CHECK(r.info.action_mask[stop] == 1);
  auto done = e->step(stop);
  CHECK(done.terminated);
  CHECK_FALSE(done.info.illegal_action);
}

TEST_CASE("the stop action terminates and the step limit truncates") {
  EnvConfig c = small_config();
  c.stop_after_progress = false;  // stop always legal
  auto e = make(c);
  e->reset(1);
  CHECK(e->action_mask().back() == 1);
  auto r = e->step(e->action_spec().stop);
  CHECK(r.terminated);
  CHECK_FALSE(r.truncated);
  auto after = e->step(0);
  CHECK(after.terminated);
  CHECK(after.info.error.has_value());  // stepping a finished episode is reported, not thrown
  e->reset(1);
  env::StepResult last;
  for (int i = 0; i < e->config().max_episode_steps; ++i) last = e->step(-1);
  CHECK(last.truncated);
  CHECK_FALSE(last.terminated);
}

TEST_CASE("a list of actions is one round trip with the summed reward") {
  auto e1 = make(small_config());
  auto e2 = make(small_config());
  e1->reset(2);
  e2->reset(2);
  std::vector<int> actions;
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    int a = first_legal(*e1);
    actions.push_back(a);
    sum += e1->step(a).reward;
  }
  auto r = e2->step(actions);
  CHECK(r.reward == doctest::Approx(sum));
  CHECK(ir::structurally_equal(e1->program(), e2->program()));
}

TEST_CASE(
    "an untimed step applies the move without timing it; the next timed step times its own "
    "program") {
  auto timed = make(small_config());
  auto untimed = make(small_config());
  auto [obs, info] = timed->reset(2);
  untimed->reset(2);
  // A move that changes the time, then one more.
  int a = -1;
  env::StepResult t1;
  for (int i = 0; i + 1 < static_cast<int>(info.action_mask.size()) && a < 0; ++i) {
    if (!info.action_mask[i]) continue;
    auto probe = timed->fork();
    t1 = probe->step(i);
    if (!t1.info.illegal_action && t1.info.time_s != info.time_s) a = i;
  }
  REQUIRE(a >= 0);
  t1 = timed->step(a);
  env::StepResult u1 = untimed->step_untimed(a);
  CHECK_FALSE(u1.info.illegal_action);
  CHECK(ir::structurally_equal(timed->program(), untimed->program()));
  CHECK(u1.info.time_s == info.time_s);  // still the last program timed
  CHECK(u1.reward == 0);
  CHECK(u1.info.step == t1.info.step);
  CHECK(u1.info.action_mask == t1.info.action_mask);
  CHECK(u1.observation.features == t1.observation.features);
  CHECK(untimed->state().trace == timed->state().trace);
  const int b = first_legal(*timed);
  REQUIRE(b >= 0);
  env::StepResult t2 = timed->step(b);
  env::StepResult u2 = untimed->step(b);
  CHECK(u2.info.time_s == t2.info.time_s);
  CHECK(u2.info.best_time_s == t2.info.best_time_s);
  // Its reward compares with the last program timed, the start: log(initial / best) as ever.
  CHECK(u2.reward == doctest::Approx(std::max(
                         0.0, std::log(info.time_s / std::min(info.time_s, t2.info.time_s)))));
  // An illegal action is refused as step() refuses it.
  const int bad = first_illegal_existing(*untimed);
  if (bad >= 0) {
    env::StepResult r = untimed->step_untimed(bad);
    CHECK(r.info.illegal_action);
    CHECK(r.reward == doctest::Approx(small_config().illegal_action_penalty));
  }
}

TEST_CASE("a list of actions untimed but for the last ends where the timed list does, timed once") {
  auto e1 = make(small_config());
  auto e2 = make(small_config());
  auto [obs, info] = e1->reset(2);
  e2->reset(2);
  std::vector<int> actions;
  env::StepResult last;
  for (int i = 0; i < 4; ++i) {
    int a = first_legal(*e1);
    actions.push_back(a);
    last = e1->step(a);
  }
  auto r = e2->step(actions, /*time_each=*/false);
  CHECK(ir::structurally_equal(e1->program(), e2->program()));
  CHECK(r.info.time_s == last.info.time_s);
  CHECK(r.info.step == last.info.step);
  // One timed program: the reward is that of going from the start to the end in one move.
  CHECK(r.reward == doctest::Approx(std::max(
                        0.0, std::log(info.time_s / std::min(info.time_s, r.info.time_s)))));
  // At the step limit the sequence ends, and the program there is timed.
  EnvConfig c = small_config();
  c.max_episode_steps = 2;
  auto e3 = make(c);
  auto e4 = make(c);
  e3->reset(2);
  e4->reset(2);
  std::vector<int> two;
  env::StepResult t;
  for (int i = 0; i < 2; ++i) {
    two.push_back(first_legal(*e3));
    t = e3->step(two.back());
  }
  std::vector<int> longer = two;
  longer.push_back(two.back());
  auto r4 = e4->step(longer, false);
  CHECK(r4.truncated);
  CHECK(r4.info.time_s == t.info.time_s);
}

TEST_CASE("with the cost model the same seed and actions give bit-identical results") {
  auto run = [](uint64_t seed) {
    auto e = make(small_config());
    e->reset(seed);
    std::mt19937 rng(seed);
    std::vector<double> out;
    for (int i = 0; i < 10; ++i) {
      auto m = e->action_mask();
      std::vector<int> legal;
      for (int j = 0; j < static_cast<int>(m.size()); ++j)
        if (m[j]) legal.push_back(j);
      auto r = e->step(legal[rng() % legal.size()]);
      out.push_back(r.reward);
      out.insert(out.end(), r.observation.features.begin(), r.observation.features.end());
      if (r.terminated || r.truncated) break;
    }
    return out;
  };
  REQUIRE(make(small_config())->deterministic());
  CHECK(run(5) == run(5));
}

TEST_CASE("save and restore an episode in binary and json") {
  auto e = make(small_config());
  e->reset(4);
  for (int i = 0; i < 3; ++i) e->step(first_legal(*e));
  auto s = e->state();
  REQUIRE(s.trace.size() == 3);
  for (std::string fmt : {"binary", "json"}) {
    std::string path = temp_path("state." + fmt);
    REQUIRE(env::save_state(s, path, fmt).empty());
    auto loaded = env::load_state(path, fmt);
    REQUIRE_MESSAGE(loaded.ok(), loaded.error_text());
    CHECK(loaded->trace == s.trace);
    CHECK(loaded->rewards == s.rewards);
    auto other = make(small_config());
    REQUIRE(other->restore(loaded.value()).ok());
    CHECK(ir::structurally_equal(other->program(), e->program()));
    std::filesystem::remove(path);
  }
}

TEST_CASE("a corrupt or truncated state file is refused, never a crash") {
  auto e = make(small_config());
  e->reset(4);
  e->step(first_legal(*e));
  std::string path = temp_path("corrupt.bin");
  REQUIRE(env::save_state(e->state(), path, "binary").empty());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 300; ++i) {
    std::string b = bytes;
    if (i % 3 == 0)
      b.resize(rng() % b.size());
    else
      b[rng() % b.size()] = static_cast<char>(rng());
    {
      std::ofstream out(path, std::ios::binary);
      out << b;
    }
    auto r = env::load_state(path, "binary");
    if (r.ok()) {
      // A flip that still parses must at least restore cleanly or be refused.
      auto other = make(small_config());
      (void)other->restore(r.value());
    }
  }
  {
    std::ofstream out(path);
    out << "{\"format\": \"nope\"}";
  }
  CHECK_FALSE(env::load_state(path, "json").ok());
  {
    std::ofstream out(path);
    out << "\x01\x02";
  }
  CHECK(env::load_state(path, "binary").error_text().find("bad magic") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("a state whose trace names an illegal action does not restore and loses nothing") {
  auto e = make(small_config());
  e->reset(4);
  e->step(first_legal(*e));
  uint64_t before = ir::structural_hash(e->program());
  env::EpisodeState s = e->state();
  s.trace.push_back("tile_scope 9.9.9 4");
  CHECK_FALSE(e->restore(s).ok());
  CHECK(ir::structural_hash(e->program()) == before);
}

TEST_CASE("fork gives an independent env in the same state") {
  auto e = make(small_config());
  e->reset(3);
  e->step(first_legal(*e));
  auto f = e->fork();
  CHECK(ir::structurally_equal(f->program(), e->program()));
  f->step(first_legal(*f));
  CHECK_FALSE(ir::structurally_equal(f->program(), e->program()));
  e.reset();  // the parent goes away; the fork lives on
  auto r = f->step(first_legal(*f));
  CHECK_FALSE(r.info.error);
}

TEST_CASE("validate replays a state, reproduces its time and proves the semantics" *
          doctest::test_suite("slow")) {
  auto e = make(small_config("perfdojo://gen/matmul?seed=3"));
  e->reset(0);
  for (int i = 0; i < 5; ++i) e->step(first_legal(*e));
  auto v = env::validate(e->state(), small_config());
  CHECK_MESSAGE(v.ok, v.message);
  CHECK(v.trace_legal);
  CHECK(v.reward_reproduced);
  CHECK(v.semantics_checked);
  CHECK(v.semantics_equal);
  auto s = e->state();
  s.final_time_s *= 2;
  CHECK_FALSE(env::validate(s, small_config()).reward_reproduced);
}

TEST_CASE("benchmark URIs: suite, generators, files, and precise errors") {
  CHECK(env::suite_uris().size() >= 18);
  CHECK(env::test_split().size() + env::train_split().size() == env::suite_uris().size());
  auto a = env::load_benchmark("perfdojo://gen/matmul?seed=7");
  auto b = env::load_benchmark("perfdojo://gen/matmul?seed=7");
  REQUIRE(a.ok());
  CHECK(ir::structurally_equal(a.value(), b.value()));
  for (const auto& f : env::generator_families())
    for (int s = 0; s < 5; ++s) {
      auto g = env::load_benchmark("perfdojo://gen/" + f + "?seed=" + std::to_string(s));
      CHECK_MESSAGE(g.ok(), f << ": " << g.error_text());
    }
  CHECK(env::load_benchmark("perfdojo://gen/fft?seed=1")
            .error_text()
            .find("unknown generator family") != std::string::npos);
  CHECK(env::load_benchmark("perfdojo://gen/matmul?seed=x").error_text().find("seed") !=
        std::string::npos);
  CHECK(env::load_benchmark("perfdojo://gen/matmul?seed=99999999999999999999999")
            .error_text()
            .find("seed") != std::string::npos);
  CHECK(env::load_benchmark("perfdojo://suite/../etc").error_text().find("expected") !=
        std::string::npos);
  CHECK(env::load_benchmark("http://x").error_text().find("scheme") != std::string::npos);
}

TEST_CASE("every reset reports its own starting program's time, across benchmark switches") {
  // Env remembers the cost model's estimate of the episodes' start: it must follow the start.
  auto time_on_fresh_env = [](const std::string& uri, uint64_t seed) {
    return make(small_config(uri))->reset(seed).second.initial_time_s;
  };
  auto e = make(small_config("perfdojo://suite/softmax"));
  for (const std::string uri :
       {"perfdojo://suite/softmax", "perfdojo://suite/matmul-1024", "perfdojo://suite/softmax"}) {
    env::ResetOptions o;
    o.benchmark = uri;
    const double expected = time_on_fresh_env(uri, 0);
    auto [obs, info] = e->reset(0, o);
    CHECK(info.initial_time_s == expected);
    CHECK(info.time_s == expected);
    e->step(first_legal(*e));
    CHECK(e->reset().second.initial_time_s == expected);
  }
  // A generator without a seed draws a new starting program from each reset's seed.
  auto g = make(small_config("perfdojo://gen/matmul"));
  const double t1 = time_on_fresh_env("perfdojo://gen/matmul", 1);
  const double t2 = time_on_fresh_env("perfdojo://gen/matmul", 2);
  REQUIRE(t1 != t2);
  CHECK(g->reset(1).second.initial_time_s == t1);
  CHECK(g->reset(2).second.initial_time_s == t2);
  CHECK(g->reset(1).second.initial_time_s == t1);
}

TEST_CASE("feature rows classify each scope's accesses as invariant, unit-stride or strided") {
  // Scope rows hold (invariant, unit, strided) shares of the accesses below the scope, by its
  // iterator: unit = stride 1 in the last dimension only.
  auto p = ir::load_program(
      "M = 4\nN = 4\nK = 4\n"
      "input A: f32[M, K]\ninput B: f32[K, 8]\ninput D: f32[K, K]\noutput C: f32[M, N] = 0\n"
      "M N K C[{0},{1}] += A[{0},{2}] * B[{2},2*{1}] * D[{2},{2}]\n");
  REQUIRE_MESSAGE(p.ok(), p.error_text());
  const auto f = env::features(p.value(), -1);
  auto shares = [&](int scope) {
    const float* row = &f[env::kGlobalFeatures + scope * env::kScopeFeatures];
    return std::vector<float>{row[8], row[9], row[10]};
  };
  // M: C and A use {0} in a dimension other than the last; B and D do not use it.
  CHECK(shares(0) == std::vector<float>{0.5f, 0.0f, 0.5f});
  // N: C has unit stride; B strides by 2; A and D do not use it.
  CHECK(shares(1) == std::vector<float>{0.5f, 0.25f, 0.25f});
  // K: A has unit stride; B uses {2} in its first dimension, and D in both (so not unit
  // stride in the last alone); C does not use it.
  CHECK(shares(2) == std::vector<float>{0.25f, 0.25f, 0.5f});
}

TEST_CASE("the cursor action space moves a cursor and applies at it") {
  auto c = small_config();
  c.action_space = "cursor";
  auto e = make(c);
  auto [obs, info] = e->reset(1);
  CHECK(info.cursor == 0);
  auto r = e->step(1);  // down
  CHECK(r.info.cursor == 1);
  CHECK_FALSE(r.info.illegal_action);
  auto up = e->step(0);
  CHECK(up.info.cursor == 0);
  auto again = e->step(0);  // cannot go further up
  CHECK(again.info.illegal_action);
}

TEST_CASE("observation spaces: tokens and graph have their declared shapes") {
  auto c = small_config();
  c.observation_spaces = {"tokens", "graph"};
  auto e = make(c);
  auto [obs, info] = e->reset(0);
  CHECK(obs.tokens.size() == env::kMaxTokens);
  for (int t : obs.tokens) CHECK((t >= 0 && t < env::token_vocabulary_size()));
  CHECK(obs.graph.num_nodes > 0);
  CHECK(obs.graph.node_features.size() ==
        static_cast<size_t>(obs.graph.num_nodes * env::kGraphNodeFeatures));
  CHECK(obs.graph.edge_src.size() == obs.graph.edge_dst.size());
  for (int s : obs.graph.edge_src) CHECK(s < obs.graph.num_nodes);
}

TEST_CASE("vector env: same-step auto-reset never drops an action") {
  auto c = small_config();
  c.max_episode_steps = 3;
  auto v = env::VectorEnv::make(c, 4);
  REQUIRE(v.ok());
  auto& ve = *v.value();
  ve.reset(10);
  int ends = 0;
  for (int t = 0; t < 7; ++t) {
    std::vector<int> actions;
    for (int i = 0; i < ve.size(); ++i) actions.push_back(first_legal(ve.at(i)));
    auto out = ve.step(actions);
    for (auto& o : out) {
      CHECK_FALSE(o.autoreset_ignored_action);
      CHECK_FALSE(o.result.info.error);
      if (o.result.truncated) {
        ++ends;
        CHECK(o.final_observation.has_value());
        CHECK(o.result.info.step == 0);  // already reset
      }
    }
  }
  CHECK(ends == 8);  // 4 envs x 2 episodes of 3 steps in 7 steps
}

TEST_CASE("vector env: next-step auto-reset reports the ignored action") {
  auto c = small_config();
  c.max_episode_steps = 2;
  auto v = env::VectorEnv::make(c, 2, env::AutoReset::kNextStep);
  REQUIRE(v.ok());
  auto& ve = *v.value();
  ve.reset(0);
  std::vector<int> a(2, -1);
  ve.step(a);
  auto second = ve.step(a);
  CHECK(second[0].result.truncated);
  auto third = ve.step(a);
  CHECK(third[0].autoreset_ignored_action);
  CHECK(third[0].result.info.step == 0);
  auto wrong = ve.step({1});
  CHECK(wrong[0].result.info.error.has_value());
}

TEST_CASE("the mask is recomputed exactly when the program changes") {
  auto e = make(small_config());
  e->reset(1);
  auto before = e->action_mask();
  int bad = first_illegal_existing(*e);
  REQUIRE(bad >= 0);
  auto refused = e->step(bad);
  CHECK(refused.info.action_mask == before);  // unchanged program, same mask
  auto r = e->step(first_legal(*e));
  REQUIRE_FALSE(r.info.illegal_action);
  // The cached mask after a change equals a mask computed from scratch on a fresh env.
  auto fresh = make(small_config());
  REQUIRE(fresh->restore(e->state()).ok());
  CHECK(e->action_mask() == fresh->action_mask());
  e->reset(1);
  CHECK(e->action_mask() == before);
}

TEST_CASE(
    "features from an env's memo of unchanged nests equal fresh ones on random trajectories") {
  // The env's observation reuses the rows of nests a step did not rebuild; the free function
  // without a memo makes everything anew. Both spaces: the cursor marks its scope's row.
  uint64_t checked = 0;
  for (const char* space : {"flat", "cursor"}) {
    for (const char* kernel : {"softmax", "attention", "conv2d-3x3", "layernorm", "mlp"}) {
      auto c = small_config(std::string("perfdojo://suite/") + kernel);
      c.action_space = space;
      c.max_episode_steps = 25;
      auto e = make(c);
      std::mt19937 rng(7);
      auto [obs, info] = e->reset(0);
      const env::TargetTraits traits = e->target_traits();
      auto fresh = [&](int cursor) {
        return env::features(e->program(), cursor, nullptr, &traits);
      };
      CHECK(obs.features == fresh(info.cursor));
      for (int s = 0; s < 60; ++s) {
        std::vector<int> legal;
        for (int i = 0; i + 1 < static_cast<int>(info.action_mask.size()); ++i)
          if (info.action_mask[i]) legal.push_back(i);
        if (legal.empty()) break;
        auto r = e->step(legal[rng() % legal.size()]);
        REQUIRE_MESSAGE(r.observation.features == fresh(r.info.cursor),
                        kernel << " " << space << " step " << s);
        ++checked;
        info = r.info;
        if (r.terminated || r.truncated) {
          std::tie(obs, info) = e->reset();
          REQUIRE(obs.features == fresh(info.cursor));
        }
      }
    }
  }
  CHECK(checked > 300);
}

TEST_CASE("the features' last block describes the env's target, and only that block differs") {
  // The same program on an AVX-512 and an AVX2 target: a policy that plays on both sees which.
  auto wide = small_config("perfdojo://suite/softmax");
  auto narrow = wide;
  narrow.backend = "cost_model:zen3";
  auto a = make(wide), b = make(narrow);
  const auto fa = a->reset(0).first.features, fb = b->reset(0).first.features;
  REQUIRE(fa.size() == static_cast<size_t>(env::kFeatureSize));
  REQUIRE(fb.size() == fa.size());
  CHECK(std::equal(fa.begin(), fa.begin() + env::kTargetFeaturesAt, fb.begin()));
  const float* ta = &fa[env::kTargetFeaturesAt];
  const float* tb = &fb[env::kTargetFeaturesAt];
  CHECK(ta[0] == 1.0f);  // 16 lanes
  CHECK(tb[0] == 0.5f);  // 8 lanes
  CHECK(ta[1] == 1.0f);  // 32 registers
  CHECK(tb[1] == 0.5f);  // 16 registers
  CHECK(ta[3] == 1.0f);
  CHECK(tb[3] == 1.0f);
  // Without a target the block is zeros, and the bounds hold either way.
  const auto none = env::features(a->program(), -1);
  for (int i = env::kTargetFeaturesAt; i < env::kFeatureSize; ++i) CHECK(none[i] == 0.0f);
  const auto bounds = env::feature_bounds();
  for (int i = env::kTargetFeaturesAt; i < env::kFeatureSize; ++i) {
    CHECK(ta[i - env::kTargetFeaturesAt] <= bounds.high[i]);
    CHECK(tb[i - env::kTargetFeaturesAt] >= bounds.low[i]);
  }
}

TEST_CASE("cost_model:FILE is the cost model on a profile file, with its ISA's vectors") {
  // A calibrated AVX2 core's profile (no vector_lanes of its own): 8-lane vectors only.
  backends::MachineProfile avx2 = backends::default_profile();
  avx2.isa = "x86_avx2";
  const std::string path =
      (std::filesystem::temp_directory_path() / "perfdojo-env-test-avx2.profile").string();
  std::string err;
  REQUIRE_MESSAGE(backends::save_profile(avx2, path, &err), err);
  auto c = small_config("perfdojo://suite/softmax");
  c.backend = "cost_model:" + path;
  auto e = make(c);
  CHECK(e->target().vector_widths == std::vector<int>{8});
  CHECK(e->target_traits().lanes == 8);
  CHECK(e->reset(0).second.initial_time_s > 0);
  std::filesystem::remove(path);
  // A built-in profile by name, and a file that is not there: refused, saying why.
  c.backend = "cost_model:builtin:zen3";
  CHECK(make(c)->target().vector_widths == std::vector<int>{8});
  c.backend = "cost_model:/nonexistent/perfdojo.profile";
  auto bad = Env::make(c);
  REQUIRE_FALSE(bad.ok());
  CHECK_MESSAGE(bad.error_text().find("/nonexistent/perfdojo.profile") != std::string::npos,
                bad.error_text());
  c.backend = "no_such_backend";
  bad = Env::make(c);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error_text().find("cost_model:FILE") != std::string::npos);
}

TEST_CASE("a feature memo copies only nests it saw and starts empty when copied") {
  auto e = make(small_config("perfdojo://suite/attention"));
  const ir::Program p = e->program();
  env::FeatureMemo memo;
  const auto fresh = env::features(p, -1);
  CHECK(env::features(p, -1, &memo) == fresh);
  CHECK(memo.hits() == 0);
  CHECK(memo.size() == p.body.size());
  CHECK(env::features(p, 2, &memo) == env::features(p, 2));  // the cursor row is not remembered
  CHECK(memo.hits() == p.body.size());
  env::FeatureMemo copy = memo;
  CHECK(copy.size() == 0);
}

TEST_CASE(
    "sketch actions expand the micro-kernel sketch in one step, its atomic actions in the trace") {
  EnvConfig c = small_config("perfdojo://suite/matmul-256");
  c.sketch_actions = 2;
  auto plain = make(small_config("perfdojo://suite/matmul-256"));
  auto e = make(c);
  const auto spec = e->action_spec();
  CHECK(spec.n == plain->action_spec().n + 2);
  CHECK(spec.stop == spec.n - 1);
  e->reset(1);
  const int base = spec.stop - 2;
  auto m = e->action_mask();
  REQUIRE(m.size() == static_cast<size_t>(spec.n));
  CHECK(m[base] == 1);
  CHECK(m[base + 1] == 1);
  auto r = e->step(base);
  CHECK_FALSE(r.info.illegal_action);
  CHECK(r.info.action == "microkernel_sketch 0");
  CHECK(e->program().find_buffer("C_t0") != nullptr);  // the register tile
  // The episode's trace holds the atomic actions: restore replays them.
  const auto state = e->state();
  CHECK(state.trace.size() > 10);
  auto again = make(c);
  auto restored = again->restore(state);
  REQUIRE_MESSAGE(restored.ok(), restored.error_text());
  CHECK(ir::structurally_equal(again->program(), e->program()));
  // Nothing GEMM-class is left: the sketch actions are masked off, and refused if taken.
  m = e->action_mask();
  CHECK(m[base] == 0);
  auto refused = e->step(base);
  CHECK(refused.info.illegal_action);
  CHECK(refused.info.legality == "nothing_to_do");
}

TEST_CASE("sketch actions are masked off where no GEMM-class nest exists, and bounded in number") {
  EnvConfig c = small_config();
  c.sketch_actions = 1;
  auto e = make(c);
  e->reset(1);
  const auto m = e->action_mask();
  CHECK(m[e->action_spec().stop - 1] == 0);
  c.sketch_actions = 9;
  CHECK_FALSE(Env::make(c).ok());
}

TEST_CASE("features stay within the documented finite bounds on every suite kernel") {
  const env::FeatureBounds b = env::feature_bounds();
  REQUIRE(b.low.size() == static_cast<size_t>(env::kFeatureSize));
  REQUIRE(b.high.size() == static_cast<size_t>(env::kFeatureSize));
  for (size_t i = 0; i < b.low.size(); ++i) {
    CHECK(std::isfinite(b.low[i]));
    CHECK(std::isfinite(b.high[i]));
    CHECK(b.low[i] < b.high[i]);
  }
  std::mt19937 rng(11);
  for (const std::string& uri : env::suite_uris()) {
    EnvConfig c;
    c.benchmark = uri;
    c.max_episode_steps = 15;
    auto e = make(c);
    auto [obs, info] = e->reset(0);
    auto in_bounds = [&](const std::vector<float>& f) {
      for (size_t i = 0; i < f.size(); ++i)
        if (!(f[i] >= b.low[i] && f[i] <= b.high[i])) return false;
      return true;
    };
    CHECK_MESSAGE(in_bounds(obs.features), uri);
    for (int s = 0; s < 15; ++s) {
      const auto mask = e->action_mask();
      std::vector<int> legal;
      for (int a = 0; a + 1 < static_cast<int>(mask.size()); ++a)
        if (mask[a]) legal.push_back(a);
      if (legal.empty()) break;
      auto r = e->step(legal[rng() % legal.size()]);
      CHECK_MESSAGE(in_bounds(r.observation.features), uri << " step " << s);
      if (r.terminated || r.truncated) break;
    }
  }
}

TEST_CASE("every suite kernel belongs to a family, and family splits partition the suite") {
  const auto all = env::suite_uris();
  for (const auto& u : all)
    CHECK_MESSAGE(!env::kernel_family(u).empty(), u << " has no family in kernel_families()");
  CHECK(env::kernel_families().size() == all.size());
  const auto held = env::family_kernels({"attention", "ffn"}, true);
  const auto rest = env::family_kernels({"attention", "ffn"}, false);
  CHECK(held.size() + rest.size() == all.size());
  CHECK(std::find(held.begin(), held.end(), "perfdojo://suite/gqa-attention") != held.end());
  CHECK(std::find(held.begin(), held.end(), "perfdojo://suite/swiglu-mlp") != held.end());
  for (const auto& u : rest) CHECK(env::kernel_family(u) != "attention");
  CHECK(env::kernel_family("perfdojo://suite/no-such") == "");
}

TEST_CASE("a measured env counts its timings and times a program, good or failed, once" *
          doctest::test_suite("hw")) {
  // x86_64 with the crash hook on programs declaring `crashme` (the backends' test hook).
  const std::string good = temp_path("timing_good.pdj"), bad = temp_path("timing_bad.pdj");
  std::ofstream(good) << "input x: f32[64]\noutput y: f32[64]\n\n64 y[{0}] = x[{0}] * 2\n";
  std::ofstream(bad) << "input x: f32[64]\noutput crashme: f32[64]\n\n64 crashme[{0}] = x[{0}]\n";
  EnvConfig c = small_config(good);
  c.backend = "x86_64";
  c.backend_config.inject = "segv:crashme";
  auto probe = backends::make_backend(c.backend, c.backend_config);
  if (!probe->available().ok) PERFDOJO_SKIP("x86_64 cannot run here: " << probe->available().why);
  auto e = make(c);
  CHECK(e->timing_stats().measured == 0);
  CHECK_FALSE(e->reset(0).second.error);
  CHECK(e->timing_stats().measured == 1);
  CHECK(e->timing_stats().seconds > 0);
  CHECK_FALSE(e->reset(0).second.error);  // the same start: from the env's cache
  CHECK(e->timing_stats().measured == 1);
  CHECK(e->timing_stats().cached == 1);

  // A program that crashes fails again from the cache, not from a second run.
  EnvConfig cb = c;
  cb.benchmark = bad;
  auto f = make(cb);
  const auto first = f->reset(0).second;
  REQUIRE(first.error);
  CHECK(f->timing_stats().measured == 1);
  const auto second = f->reset(0).second;
  REQUIRE(second.error);
  CHECK(*second.error == *first.error);
  CHECK(f->timing_stats().measured == 1);
  CHECK(f->timing_stats().cached == 1);
}
