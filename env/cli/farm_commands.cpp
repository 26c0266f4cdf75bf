// `perfdojo measure-worker`: one measuring worker of a measurement farm (docs/ray.md). It speaks
// the farm protocol (backends/remote_backend.h) on stdin and stdout: a ready line naming this
// machine and its calibrated profile, then one reply per request, in order. A request it cannot
// read is answered with an error, never a crash; EOF on stdin ends it.
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>

#include "backends/remote_backend.h"
#include "backends/result_cache.h"
#include "backends/x86_backend.h"
#include "cli/cli.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "optimizer/optimizer.h"
#include "util/json.h"

namespace perfdojo::cli {
namespace {

using util::JsonObject;
using util::json::Value;

// The longest request line read (the farm client refuses replies beyond the same size).
constexpr size_t kMaxLineBytes = size_t{64} << 20;

enum class LineRead { kLine, kTooLong, kEnd };

// One line of `in` into `line`, at most kMaxLineBytes kept: a longer one is read to its end and
// dropped, so memory stays bounded whatever arrives.
LineRead read_line(std::istream& in, std::string& line) {
  line.clear();
  std::streambuf* sb = in.rdbuf();
  bool too_long = false, any = false;
  for (int c = sb->sbumpc(); c != std::char_traits<char>::eof(); c = sb->sbumpc()) {
    any = true;
    if (c == '\n') return too_long ? LineRead::kTooLong : LineRead::kLine;
    if (line.size() < kMaxLineBytes)
      line.push_back(static_cast<char>(c));
    else
      too_long = true;
  }
  if (too_long) return LineRead::kTooLong;
  return any ? LineRead::kLine : LineRead::kEnd;
}

std::string error_reply(const std::string& id, const std::string& why) {
  return JsonObject().raw("id", id).add("ok", false).add("error", why).str();
}

// One request line to its reply line.
std::string serve_request(const std::string& line, const backends::BackendConfig& config,
                          std::map<std::string, std::unique_ptr<backends::Backend>>& backends) {
  util::json::Document doc;
  if (auto e = util::parse_json(line, &doc))
    return error_reply("null", "not JSON: " + e->message());
  if (!doc.IsObject()) return error_reply("null", "a request is a JSON object");
  const Value* id = util::json_member(doc, "id");
  if (!id || !id->IsInt64()) return error_reply("null", "a request needs an integer 'id'");
  const std::string id_text = std::to_string(id->GetInt64());
  auto fail = [&](const std::string& why) { return error_reply(id_text, why); };
  const Value* op = util::json_member(doc, "op");
  const std::string op_name = op && op->IsString() ? std::string(util::json_string(*op)) : "";
  if (op_name != "measure" && op_name != "compare")
    return fail("'op' must be \"measure\" or \"compare\"");
  const Value* name = util::json_member(doc, "backend");
  if (!name || !name->IsString()) return fail("a request needs a 'backend' name");
  const std::string backend_name(util::json_string(*name));
  backends::MeasureOptions options;
  if (const Value* o = util::json_member(doc, "options"))
    if (auto e = backends::parse_options(*o, &options)) return fail(*e);
  const Value* texts = util::json_member(doc, "programs");
  if (!texts || !texts->IsArray() || texts->Empty())
    return fail("'programs' must be a non-empty array");
  if (op_name == "measure" && texts->Size() != 1)
    return fail("\"measure\" takes exactly one program");
  if (texts->Size() > backends::Backend::kMaxCompared)
    return fail("\"compare\" takes at most " + std::to_string(backends::Backend::kMaxCompared) +
                " programs");
  std::vector<ir::Program> programs;
  for (const Value& t : texts->GetArray()) {
    if (!t.IsString()) return fail("every program is IR text (a string)");
    auto p = ir::load_program(util::json_string(t), "<farm request>");
    if (!p.ok()) return fail("program " + std::to_string(programs.size()) + ": " + p.error_text());
    programs.push_back(std::move(*p));
  }
  auto& backend = backends[backend_name];
  if (!backend) backend = backends::make_backend(backend_name, config);
  if (!backend) {
    backends.erase(backend_name);
    return fail("unknown backend '" + backend_name + "'");
  }
  if (auto av = backend->available(); !av.ok)
    return fail(backend_name + " is not available on this machine: " + av.why);
  std::vector<const ir::Program*> ptrs;
  for (const auto& p : programs) ptrs.push_back(&p);
  auto ms = op_name == "compare"
                ? backend->compare(ptrs, options)
                : std::vector<backends::Measurement>{backend->measure(programs[0], options)};
  util::JsonArray results;
  for (const auto& m : ms) results.raw(backends::measurement_json(m));
  return JsonObject().raw("id", id_text).add("ok", true).raw("results", results.str()).str();
}

int cmd_measure_worker(const Args& a) {
  if (!a.positional.empty()) return usage_error("measure-worker takes no FILE", a.json);
  backends::BackendConfig config;
  if (!a.has("no-cache")) config.cache_dir = backends::default_cache_dir();
  if (const std::string dir = profile_dir(); !dir.empty()) config.profile_dir = dir;
  // This machine's own calibrated profile (calibrated now when it has none): what its times and
  // its peak mean, and what the farm's cache keys on beside the program.
  backends::MachineProfile profile;
  backends::BackendConfig pc = config;
  const std::string source = optimizer::resolve_machine_profile(pc, &profile);
  const std::string isa = backends::this_machine_isa();
  double peak = 0;
  if (auto x = backends::x86_isa_by_name(isa)) peak = optimizer::fma_peak_gflops(*x, profile);
  std::cout << JsonObject()
                   .add("ready", true)
                   .add("workers", 1)
                   .add("cpu", backends::cpu_identity())
                   .add("isa", isa)
                   .add("profile", profile.name)
                   .add("profile_from", source)
                   .add("peak_gflops", peak)
                   .str()
            << std::endl;
  std::map<std::string, std::unique_ptr<backends::Backend>> backends;
  std::string line;
  for (LineRead r; (r = read_line(std::cin, line)) != LineRead::kEnd;) {
    if (r == LineRead::kTooLong) {
      std::cout << error_reply("null", "a request line longer than " +
                                           std::to_string(kMaxLineBytes >> 20) + " MiB")
                << std::endl;
      continue;
    }
    if (line.empty()) continue;
    std::cout << serve_request(line, config, backends) << std::endl;
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> farm_commands() {
  return {{"measure-worker",
           "measure-worker [--no-cache]",
           "a measurement farm's worker: reads measure and compare requests as JSON lines on "
           "stdin, measures them on this machine, answers on stdout (docs/ray.md)",
           {},
           {"no-cache"},
           cmd_measure_worker}};
}

}  // namespace perfdojo::cli
