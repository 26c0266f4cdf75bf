// Every expert move is an action: each trace the micro-kernel sketch and the optimiser's
// proposals produce, on every suite, unseen and generated kernel, replays step by step through
// the env's flat action space, each step an index the mask allows and that decodes back to the
// same action. An agent can then reach every kernel the experts reach, and learn from their
// traces as demonstrations (docs/actions.md, "Parameters"). A move outside the shipped flat
// layout (dot_product, widen_buffer) ends a trace early, counted.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gym/dataset.h"
#include "ir/parse.h"
#include "optimizer/search.h"
#include "transforms/analysis.h"
#include "transforms/flat_space.h"
#include "transforms/microkernel_sketch.h"
#include "transforms/registry.h"

using namespace perfdojo;
using transforms::Action;

namespace {

struct Kernel {
  std::string name;
  ir::Program program;
};

std::vector<Kernel> every_kernel(int seeds_per_family) {
  std::vector<Kernel> out;
  for (const auto& uri : env::suite_uris()) out.push_back({uri, env::load_benchmark(uri).value()});
  std::vector<std::string> unseen;
  for (const auto& e : std::filesystem::directory_iterator(PERFDOJO_UNSEEN_DIR))
    if (e.path().extension() == ".pdj") unseen.push_back(e.path().string());
  std::sort(unseen.begin(), unseen.end());
  for (const auto& f : unseen) out.push_back({f, env::load_benchmark(f).value()});
  for (const auto& fam : env::generator_families())
    for (int s = 1; s <= seeds_per_family; ++s) {
      const std::string uri = "perfdojo://gen/" + fam + "?seed=" + std::to_string(s);
      out.push_back({uri, env::load_benchmark(uri).value()});
    }
  return out;
}

// The traces an expert gives on `p`: the sketch at each of its choices, and every proposal the
// optimiser makes before it searches (optimizer::detail::expert_proposals).
std::vector<std::pair<std::string, std::vector<Action>>> expert_traces(
    const ir::Program& p, const transforms::Target& t) {
  std::vector<std::pair<std::string, std::vector<Action>>> out;
  const size_t choices = transforms::sketch_choices(p, t);
  for (size_t c = 0; c < choices; ++c)
    if (auto e = transforms::sketch_program(p, t, c); !e.trace.empty())
      out.emplace_back("sketch " + std::to_string(c), std::move(e.trace));
  int i = 0;
  for (auto& tr : optimizer::detail::expert_proposals(p, t).all())
    out.emplace_back("proposal " + std::to_string(i++), std::move(tr));
  return out;
}

}  // namespace

TEST_CASE(
    "every expert trace replays through the flat action space, each step allowed by the mask") {
  const auto kernels = every_kernel(8);
  int traces = 0, steps = 0, failures = 0, deepest = 0, narrow = 0;
  std::map<std::string, int> why;  // failure kind -> count
  std::ostringstream first;
  for (const char* target_name : {"x86_avx512", "x86_avx2"}) {
    const transforms::Target target = *transforms::target_by_name(target_name);
    const transforms::FlatActionSpace space(transforms::FlatSpaceConfig{}, target);
    for (const auto& k : kernels) {
      for (const auto& [what, trace] : expert_traces(k.program, target)) {
        ++traces;
        ir::Program cur = k.program;
        for (size_t i = 0; i < trace.size(); ++i) {
          const Action& a = trace[i];
          const auto scopes = transforms::scope_paths(cur);
          const int at = transforms::position_of(scopes, a.path);
          std::string fail;
          const int index = space.encode(cur, a);
          if (index < 0)
            fail = at >= space.config().max_scopes
                       ? "scope slot " + std::to_string(at) + " beyond the slots"
                       : "no index (parameter not offered)";
          else if (auto back = space.decode(cur, index); !back || !(*back == a))
            fail = "decodes to another action";
          else if (!space.mask(cur)[index])
            fail = "masked";
          if (!fail.empty()) {
            ++failures;
            ++why[fail.substr(0, 10) + " (" + transforms::kind_name(a.kind) + ")"];
            if (failures <= 12)
              first << target_name << " " << k.name << " " << what << " step " << i + 1 << ": "
                    << transforms::print_action(a) << ": " << fail << "\n";
            break;  // the rest of this trace is not reachable through the space
          }
          ++steps;
          // The int8 sketch ends with dot_product and the bf16 sketch widens its panels.
          if (a.kind == transforms::Kind::kDotProduct || a.kind == transforms::Kind::kWidenBuffer)
            ++narrow;
          if (transforms::loc_kind(a.kind) == transforms::LocKind::kScope ||
              transforms::loc_kind(a.kind) == transforms::LocKind::kScopeBuffer)
            deepest = std::max(deepest, at);
          cur = transforms::apply(cur, a, target).value();
        }
      }
    }
  }
  std::ostringstream summary;
  for (const auto& [w, n] : why) summary << "  " << n << " x " << w << "\n";
  INFO(kernels.size() << " kernels, " << traces << " traces, " << steps
                      << " steps replayed, deepest scope slot " << deepest << ", " << narrow
                      << " of them dot_product or widen_buffer\n"
                      << summary.str() << first.str());
  CHECK(traces > 2000);
  CHECK(steps > 50000);
  CHECK(failures == 0);
  CHECK(narrow > 50);  // the narrow-type kernels' traces replay to their last move
  // The sketch followed by the fused rest reaches scope slot 86 of 96 (gqa-attention on AVX2).
  CHECK(deepest < transforms::FlatSpaceConfig{}.max_scopes);
}

TEST_CASE("factor values are derived from the extent: divisors to tile, register fits to split") {
  using transforms::Kind;
  auto values = [](Kind k, int64_t e) {
    const auto l = transforms::factor_values(k, e);
    return std::vector<int64_t>(l.begin(), l.end());
  };
  CHECK(values(Kind::kTileScope, 1024) == std::vector<int64_t>{2, 4, 8, 16, 32, 64, 128, 256, 512});
  CHECK(values(Kind::kTileScope, 56) == std::vector<int64_t>{2, 4, 7, 8, 14, 28});
  CHECK(values(Kind::kTileScope, 7).empty());  // a prime has no tile
  // The sketch's blocks: 1020 rows (1024 less a 6-row remainder) in blocks of 102 and 60.
  const auto t1020 = values(Kind::kTileScope, 1020);
  CHECK(t1020.size() == 22);
  CHECK(std::count(t1020.begin(), t1020.end(), 102) == 1);
  // More divisors than slots (5040 has 58): the 32 nearest a register fit or a power of two,
  // ascending.
  const auto t5040 = values(Kind::kTileScope, 5040);
  CHECK(t5040.size() == 32);
  CHECK(std::is_sorted(t5040.begin(), t5040.end()));
  for (int64_t f : {2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 48})
    CHECK(std::count(t5040.begin(), t5040.end(), f) == 1);
  for (int64_t f : t5040) CHECK(5040 % f == 0);
  // Unroll: divisors up to 64, the whole extent included.
  CHECK(values(Kind::kUnroll, 24) == std::vector<int64_t>{2, 3, 4, 6, 8, 12, 24});
  CHECK(values(Kind::kUnroll, 256) == std::vector<int64_t>{2, 4, 8, 16, 32, 64});
  // split_range: the register-fit sizes below the extent that do not divide it.
  CHECK(values(Kind::kSplitRange, 1000) == std::vector<int64_t>{3, 6, 7, 12, 16, 24, 32, 48, 64});
  CHECK(values(Kind::kSplitRange, 20) == std::vector<int64_t>{3, 6, 7, 8, 12, 16});
  CHECK(values(Kind::kVectorize, 64).empty());  // not a factor kind
  CHECK(transforms::register_fit_sizes() ==
        std::vector<int64_t>{2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64});
}
