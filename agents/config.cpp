#include "agents/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <variant>

#include "util/json.h"

namespace perfdojo::agents {
namespace {

using Member = std::variant<double AgentConfig::*, int64_t AgentConfig::*, uint64_t AgentConfig::*,
                            int AgentConfig::*, bool AgentConfig::*, std::string AgentConfig::*>;

struct Field {
  FieldInfo info;
  Member member;
};

constexpr FieldRole kRun = FieldRole::kRun;
constexpr FieldRole kArch = FieldRole::kArchitecture;
constexpr FieldRole kLearn = FieldRole::kLearning;

// The one table: adding a field to AgentConfig means adding one row here.
const std::vector<Field>& table() {
  using C = AgentConfig;
  static const std::vector<Field> kTable = {
      {{"minutes", "wall-clock budget in minutes (ignored when total_steps > 0)", kRun},
       &C::minutes},
      {{"total_steps", "env-step budget; > 0 makes the run reproducible", kRun}, &C::total_steps},
      {{"seed", "seed of torch, replay, exploration and envs", kRun}, &C::seed},
      {{"backend",
        "backend the envs time programs with; a comma-separated list trains on several (actor i on "
        "the i-th, the demonstrations spread over them)",
        kLearn},
       &C::backend},
      {{"measure_budget_ms",
        "measured backends: timed-run budget per program (ms; each program timed once, cached)",
        kRun},
       &C::measure_budget_ms},
      {{"compile_timeout_s",
        "measured backends: a program compiling longer fails its step (ends the episode)", kRun},
       &C::compile_timeout_s},
      {{"kernels", "train, test, all, or comma-separated URIs/.pdj paths", kRun}, &C::kernels},
      {{"num_envs", "actor envs stepped in parallel", kRun}, &C::num_envs},
      {{"learner",
        "sync (act, then learn; reproducible), async (learner thread), auto (async unless "
        "total_steps > 0)",
        kRun},
       &C::learner},
      {{"actor_sync", "async: updates between copies of the network to the actors", kRun},
       &C::actor_sync},
      {{"min_updates_per_step",
        "async: actors wait while the learner is below this many updates per step", kRun},
       &C::min_updates_per_step},
      {{"max_episode_steps", "truncation limit of an episode", kLearn}, &C::max_episode_steps},
      {{"allow_stop", "let the agent choose the stop action", kLearn}, &C::allow_stop},
      {{"sketch_actions",
        "micro-kernel sketch macro actions in the action space (0-8; 0 = atomic moves only)",
        kLearn},
       &C::sketch_actions},
      {{"out_dir", "folder for metrics, checkpoints and summary", kRun}, &C::out_dir},
      {{"checkpoint_minutes", "periodic checkpoint interval", kRun}, &C::checkpoint_minutes},
      {{"log_seconds", "interval of progress lines", kRun}, &C::log_seconds},
      {{"target", "maxq (y=max(r,g*Q')) or sum (y=r+g*Q')", kLearn}, &C::target},
      {{"reward_space", "env reward space; empty = maxq:log_speedup_total, sum:log_speedup_step",
        kLearn},
       &C::reward_space},
      {{"gamma", "discount", kLearn}, &C::gamma},
      {{"encoder", "features, or tokens (features + transformer over IR tokens)", kArch},
       &C::encoder},
      {{"head",
        "flat (one Q output per action index) or factored (actions scored from their kind and the "
        "features of the slots they name)",
        kArch},
       &C::head},
      {{"hidden", "width of hidden layers", kArch}, &C::hidden},
      {{"layers", "hidden layers of the feature encoder", kArch}, &C::layers},
      {{"token_len", "IR tokens read by the token encoder", kArch}, &C::token_len},
      {{"token_dim", "token embedding width", kArch}, &C::token_dim},
      {{"token_heads", "attention heads of the token encoder", kArch}, &C::token_heads},
      {{"token_layers", "transformer layers of the token encoder", kArch}, &C::token_layers},
      {{"lr", "Adam learning rate", kLearn}, &C::lr},
      {{"batch_size", "replay batch size", kLearn}, &C::batch_size},
      {{"buffer_size", "replay capacity (transitions)", kLearn}, &C::buffer_size},
      {{"learning_starts", "transitions before the first update", kLearn}, &C::learning_starts},
      {{"updates_per_step", "gradient updates per env transition", kLearn}, &C::updates_per_step},
      {{"target_update", "hard target sync every N updates (tau == 0)", kLearn}, &C::target_update},
      {{"tau", "Polyak factor per update (> 0 replaces hard syncs)", kLearn}, &C::tau},
      {{"grad_clip", "max gradient norm", kLearn}, &C::grad_clip},
      {{"huber_delta", "Huber loss threshold", kLearn}, &C::huber_delta},
      {{"prioritized", "prioritised replay", kLearn}, &C::prioritized},
      {{"per_alpha", "priority exponent", kLearn}, &C::per_alpha},
      {{"per_beta", "initial importance-weight exponent (annealed to 1)", kLearn}, &C::per_beta},
      {{"eps_start", "phase 1 epsilon at the start", kLearn}, &C::eps_start},
      {{"eps_phase1_end", "phase 1 epsilon at its end", kLearn}, &C::eps_phase1_end},
      {{"phase1_end", "fraction of the budget where phase 1 (epsilon-greedy) ends", kLearn},
       &C::phase1_end},
      {{"temp_start", "phase 2 Boltzmann temperature at its start", kLearn}, &C::temp_start},
      {{"temp_end", "phase 2 temperature at its end", kLearn}, &C::temp_end},
      {{"phase2_end", "fraction of the budget where phase 2 (Boltzmann) ends", kLearn},
       &C::phase2_end},
      {{"eps_final", "phase 3 (near-greedy) epsilon", kLearn}, &C::eps_final},
      {{"demos",
        "generated kernels the sketch and proposals demonstrate on, besides the training kernels "
        "(0 = no demonstrations)",
        kRun},
       &C::demos},
      {{"demo_families", "generator families of the demonstration kernels (comma-separated)", kRun},
       &C::demo_families},
      {{"demo_buffer", "demonstration transitions kept", kLearn}, &C::demo_buffer},
      {{"demo_ratio", "share of each batch drawn from the demonstrations", kLearn}, &C::demo_ratio},
      {{"demo_margin", "DQfD margin of the teacher's action over every other", kLearn},
       &C::demo_margin},
      {{"demo_weight", "weight of the large-margin loss", kLearn}, &C::demo_weight},
      {{"demo_pretrain", "updates on demonstrations alone before acting", kRun}, &C::demo_pretrain},
      {{"demo_backend", "backend the teacher's traces are timed on (empty: the run's backend)",
        kLearn},
       &C::demo_backend},
      {{"dagger_rounds",
        "DAgger passes after the pretraining (the teacher labels the states the policy reaches)",
        kRun},
       &C::dagger_rounds},
      {{"dagger_kernels", "demonstration kernels the policy plays in each DAgger pass", kRun},
       &C::dagger_kernels},
      {{"dagger_states", "states of each policy episode the teacher labels", kRun},
       &C::dagger_states},
      {{"dagger_updates", "demonstration-only updates after each DAgger pass", kRun},
       &C::dagger_updates},
      {{"curriculum", "order kernels by complexity and grow the set", kLearn}, &C::curriculum},
      {{"curriculum_start", "kernels in the first stage", kLearn}, &C::curriculum_start},
      {{"curriculum_step", "kernels added per promotion", kLearn}, &C::curriculum_step},
      {{"promote_speedup", "geomean best speed-up of the active kernels that promotes", kLearn},
       &C::promote_speedup},
      {{"curriculum_fraction", "budget share of the staged part (rest: all kernels)", kLearn},
       &C::curriculum_fraction},
      {{"eval_epsilon", "evaluation: epsilon of restarts after the greedy episode", kRun},
       &C::eval_epsilon},
  };
  return kTable;
}

const Field* find(const std::string& key) {
  for (const auto& f : table())
    if (f.info.name == key) return &f;
  return nullptr;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

template <class T>
bool parse_int(const std::string& v, T& out) {
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc() && p == v.data() + v.size();
}

// The shortest text that reads back as exactly `v` (0.95, not 0.94999999999999996).
std::string format_double(double v) {
  char buf[32];  // the longest shortest form of a double is 24 characters
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// A flat JSON object {"key": value, ...} with string, number, boolean or null values. Numbers
// keep their text, so set_field judges them exactly as it judges key=value files.
std::string parse_flat_json(AgentConfig& c, const std::string& text, const std::string& path) {
  util::json::Document d;
  util::JsonParseOptions options;
  options.numbers_as_strings = true;
  options.max_depth = 2;  // the object and one level more, so a nested value gets its own message
  if (auto e = util::parse_json(text, &d, options))
    return path + ":" + std::to_string(e->line) + ":" + std::to_string(e->column) + ": " + e->what;
  if (!d.IsObject()) return path + ": expected '{' to open a JSON object";
  for (const auto& m : d.GetObject()) {
    const std::string key(util::json_string(m.name));
    std::string value;
    if (m.value.IsString()) {
      value = util::json_string(m.value);
    } else if (m.value.IsBool()) {
      value = m.value.GetBool() ? "true" : "false";
    } else if (!m.value.IsNull()) {
      return path + ": \"" + key + "\" must be a string, number, boolean or null";
    }
    if (auto e = set_field(c, key, value); !e.empty()) return path + ": " + e;
  }
  return "";
}

}  // namespace

const std::vector<FieldInfo>& config_fields() {
  static const std::vector<FieldInfo> kInfos = [] {
    std::vector<FieldInfo> v;
    for (const auto& f : table()) v.push_back(f.info);
    return v;
  }();
  return kInfos;
}

std::string set_field(AgentConfig& c, const std::string& key, const std::string& raw) {
  const Field* f = find(key);
  if (!f) return "unknown setting '" + key + "' (train_agent --help lists them)";
  std::string v = trim(raw);
  return std::visit(
      [&](auto m) -> std::string {
        using T = std::remove_reference_t<decltype(c.*m)>;
        if constexpr (std::is_same_v<T, std::string>) {
          c.*m = v;
          return "";
        } else if constexpr (std::is_same_v<T, bool>) {
          if (v == "1" || v == "true" || v == "on" || v == "yes")
            c.*m = true;
          else if (v == "0" || v == "false" || v == "off" || v == "no")
            c.*m = false;
          else
            return key + ": expected true or false, got '" + v + "'";
          return "";
        } else if constexpr (std::is_same_v<T, double>) {
          char* end = nullptr;
          errno = 0;
          double d = std::strtod(v.c_str(), &end);
          if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(d))
            return key + ": expected a number, got '" + v + "'";
          c.*m = d;
          return "";
        } else {
          T n{};
          if (!parse_int(v, n)) return key + ": expected an integer, got '" + v + "'";
          c.*m = n;
          return "";
        }
      },
      f->member);
}

std::string get_field(const AgentConfig& c, const std::string& key) {
  const Field* f = find(key);
  if (!f) return "";
  return std::visit(
      [&](auto m) -> std::string {
        using T = std::remove_cvref_t<decltype(c.*m)>;
        if constexpr (std::is_same_v<T, std::string>)
          return c.*m;
        else if constexpr (std::is_same_v<T, bool>)
          return c.*m ? "true" : "false";
        else if constexpr (std::is_same_v<T, double>)
          return format_double(c.*m);
        else
          return std::to_string(c.*m);
      },
      f->member);
}

std::string to_text(const AgentConfig& c) {
  std::string out;
  for (const auto& f : table())
    out += std::string(f.info.name) + "=" + get_field(c, f.info.name) + "\n";
  return out;
}

std::string to_json(const AgentConfig& c) {
  util::JsonObject o;
  for (const auto& f : table()) {
    std::string v = get_field(c, f.info.name);
    std::visit(
        [&](auto m) {
          using T = std::remove_cvref_t<decltype(c.*m)>;
          if constexpr (std::is_same_v<T, std::string>)
            o.add(f.info.name, v);
          else
            o.raw(f.info.name, v);
        },
        f.member);
  }
  return o.str();
}

std::string parse_text(AgentConfig& c, const std::string& text, const std::string& origin) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    auto eq = t.find('=');
    if (eq == std::string::npos)
      return origin + ":" + std::to_string(n) + ": expected key=value, got '" + t + "'";
    if (auto e = set_field(c, trim(t.substr(0, eq)), t.substr(eq + 1)); !e.empty())
      return origin + ":" + std::to_string(n) + ": " + e;
  }
  return "";
}

std::string load_config_file(AgentConfig& c, const std::string& path) {
  std::ifstream in(path);
  if (!in) return path + ": cannot open the config file";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  std::string t = trim(text);
  if (!t.empty() && t[0] == '{') return parse_flat_json(c, text, path);
  return parse_text(c, text, path);
}

std::string effective_reward_space(const AgentConfig& c) {
  if (!c.reward_space.empty()) return c.reward_space;
  return c.target == "sum" ? "log_speedup_step" : "log_speedup_total";
}

std::string validate(const AgentConfig& c) {
  if (c.target != "maxq" && c.target != "sum")
    return "target must be maxq or sum, got '" + c.target + "'";
  if (c.encoder != "features" && c.encoder != "tokens")
    return "encoder must be features or tokens, got '" + c.encoder + "'";
  if (c.head != "flat" && c.head != "factored")
    return "head must be flat or factored, got '" + c.head + "'";
  if (c.minutes < 0) return "minutes must be >= 0";
  if (c.total_steps < 0) return "total_steps must be >= 0";
  if (c.total_steps == 0 && c.minutes <= 0) return "give a budget: minutes > 0 or total_steps > 0";
  if (c.num_envs < 1 || c.num_envs > 256) return "num_envs must be in [1, 256]";
  if (c.max_episode_steps < 1) return "max_episode_steps must be >= 1";
  if (c.sketch_actions < 0 || c.sketch_actions > 8) return "sketch_actions must be in [0, 8]";
  if (c.gamma < 0 || c.gamma > 1) return "gamma must be in [0, 1]";
  if (c.hidden < 1 || c.layers < 1) return "hidden and layers must be >= 1";
  if (c.encoder == "tokens") {
    if (c.token_len < 1 || c.token_dim < 1 || c.token_layers < 1 || c.token_heads < 1)
      return "token_len, token_dim, token_layers and token_heads must be >= 1";
    if (c.token_dim % c.token_heads != 0) return "token_dim must be divisible by token_heads";
  }
  if (c.lr <= 0) return "lr must be > 0";
  if (c.batch_size < 1) return "batch_size must be >= 1";
  if (c.buffer_size < c.batch_size) return "buffer_size must be >= batch_size";
  if (c.learning_starts < c.batch_size) return "learning_starts must be >= batch_size";
  if (c.updates_per_step < 0) return "updates_per_step must be >= 0";
  if (c.learner != "auto" && c.learner != "sync" && c.learner != "async")
    return "learner must be auto, sync or async, got '" + c.learner + "'";
  if (c.actor_sync < 1) return "actor_sync must be >= 1";
  if (c.min_updates_per_step < 0 || c.min_updates_per_step > c.updates_per_step)
    return "min_updates_per_step must be between 0 and updates_per_step";
  if (c.target_update < 1) return "target_update must be >= 1";
  if (c.tau < 0 || c.tau > 1) return "tau must be in [0, 1]";
  if (c.grad_clip <= 0 || c.huber_delta <= 0) return "grad_clip and huber_delta must be > 0";
  if (c.eps_start < 0 || c.eps_start > 1 || c.eps_phase1_end < 0 || c.eps_phase1_end > 1 ||
      c.eps_final < 0 || c.eps_final > 1 || c.eval_epsilon < 0 || c.eval_epsilon > 1)
    return "epsilons must be in [0, 1]";
  if (c.phase1_end < 0 || c.phase2_end < c.phase1_end || c.phase2_end > 1)
    return "need 0 <= phase1_end <= phase2_end <= 1";
  if (c.temp_start <= 0 || c.temp_end <= 0) return "temperatures must be > 0";
  if (c.curriculum_start < 1 || c.curriculum_step < 1)
    return "curriculum_start and curriculum_step must be >= 1";
  if (c.curriculum_fraction < 0 || c.curriculum_fraction > 1)
    return "curriculum_fraction must be in [0, 1]";
  if (c.checkpoint_minutes <= 0 || c.log_seconds <= 0)
    return "checkpoint_minutes and log_seconds must be > 0";
  if (c.out_dir.empty()) return "out_dir must not be empty";
  if (c.demos < 0 || c.demo_pretrain < 0) return "demos and demo_pretrain must be >= 0";
  if (c.dagger_rounds < 0 || c.dagger_kernels < 0 || c.dagger_states < 0 || c.dagger_updates < 0)
    return "dagger_rounds, dagger_kernels, dagger_states and dagger_updates must be >= 0";
  if (c.demo_buffer < c.batch_size) return "demo_buffer must be >= batch_size";
  if (c.demo_ratio < 0 || c.demo_ratio > 1) return "demo_ratio must be in [0, 1]";
  if (c.demo_margin < 0 || c.demo_weight < 0) return "demo_margin and demo_weight must be >= 0";
  if (!(c.measure_budget_ms > 0) || c.measure_budget_ms > 60000)
    return "measure_budget_ms must be in (0, 60000]";
  if (!(c.compile_timeout_s > 0) || c.compile_timeout_s > 3600)
    return "compile_timeout_s must be in (0, 3600]";
  return "";
}

}  // namespace perfdojo::agents
