// Agent config files in JSON: read with the project's JSON module (util/json.h), numbers judged
// as in key=value files, errors naming the file, line and column.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "agents/config.h"

using namespace perfdojo::agents;
namespace fs = std::filesystem;

namespace {

std::string write_config(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() / ("perfdojo_agents_config_json_" + name + ".json");
  std::ofstream(p) << text;
  return p.string();
}

}  // namespace

TEST_CASE("a JSON config is read with positions in its errors") {
  AgentConfig c;
  std::string path = write_config("ok",
                                  "{\"lr\": 1e-4, \"seed\": 7, \"target\": \"sum\", "
                                  "\"allow_stop\": true, \"reward_space\": null}");
  CHECK(load_config_file(c, path).empty());
  CHECK(c.lr == 1e-4);
  CHECK(c.seed == 7);
  CHECK(c.target == "sum");
  CHECK(c.allow_stop);
  fs::remove(path);

  path = write_config("syntax", "{\n  \"hidden\": 32,\n  \"layers\" 2\n}");
  std::string e = load_config_file(c, path);
  CHECK(e.find(path + ":3:12: Missing a colon") == 0);
  fs::remove(path);

  path = write_config("nested", "{\"hidden\": [32]}");
  CHECK(load_config_file(c, path).find("\"hidden\" must be a string, number, boolean or null") !=
        std::string::npos);
  fs::remove(path);

  // Numbers keep their text: an integer setting refuses 32.0 as it does in key=value files.
  path = write_config("number", "{\"hidden\": 32.0}");
  CHECK(load_config_file(c, path).find("expected an integer, got '32.0'") != std::string::npos);
  fs::remove(path);

  path = write_config("unknown", "{\"hiden\": 32}");
  CHECK(load_config_file(c, path).find("unknown setting 'hiden'") != std::string::npos);
  fs::remove(path);
}
