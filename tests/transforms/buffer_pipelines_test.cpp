// The buffer transformations together: softmax and matmul pipelines, and random trajectories
// rich in buffer transformations on every suite kernel.
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "support/scaled_kernels.h"
#include "transforms/transform_test_support.h"

using namespace perfdojo;
using namespace perfdojo::transforms_test;

// ---------------------------------------------------------------------------------------------
// Pipelines.

TEST_CASE("softmax ends with scalar row temporaries and the same outputs") {
  std::ifstream in(std::string(PERFDOJO_KERNEL_DIR) + "/softmax.pdj");
  REQUIRE(in.good());
  std::string text, line;
  bool b = false, n = false;
  while (std::getline(in, line)) {
    if (line == "B = 256") line = "B = 4", b = true;
    if (line == "N = 1024") line = "N = 16", n = true;
    text += line + "\n";
  }
  REQUIRE((b && n));
  const ir::Program p = load(text, "softmax.pdj");
  const ir::Program q = apply_all(p, {
                                         "inline_temporary x",  // e = exp(s - m)
                                         "join_scopes 0",       // one row loop
                                         "shrink_buffer m 0",   // -inf re-set per row
                                         "shrink_buffer a 0",   // 0 re-set per row
                                         "shrink_buffer i 0",
                                         "shrink_buffer e 0",  // one row of e
                                     });
  CHECK(q.find_buffer("x") == nullptr);
  CHECK(temp_elements(p) == 4 + 64 + 64 + 4 + 4);
  CHECK(temp_elements(q) == 1 + 16 + 1 + 1);
  require_same_outputs(p, q);
}

TEST_CASE("matmul with a 16-wide register tile of C computes the same product") {
  const ir::Program p = load(R"(M = 8
N = 32
K = 8
input A: f32[M, K]
input B: f32[K, N]
output C: f32[M, N] = 0

M N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]
)");
  // N -> 2 x 16, K outside the 16, cache the strip, vectorise the strip's K loop.
  const ir::Program q = apply_all(p, {"tile_scope 0.0 16", "swap_scopes 0.0.0",
                                      "create_temporary 0.0 C", "vectorize 0.0.1.0 16"});
  const auto* c = q.find_buffer("C_t0");
  REQUIRE(c != nullptr);
  CHECK(c->shape == std::vector<int64_t>{16});
  require_same_outputs(p, q);
  // And a scalar accumulator per element, with the B matrix packed transposed.
  const ir::Program s = apply_all(p, {"swap_buffer_dims B 0", "create_temporary 1.0 C"});
  CHECK(s.find_buffer("C_t0")->shape == std::vector<int64_t>{1});
  CHECK(s.find_buffer("B_p0")->shape == (std::vector<int64_t>{32, 8}));
  require_same_outputs(p, s);
}

// ---------------------------------------------------------------------------------------------
// Random trajectories that favour the buffer transformations.

TEST_CASE("random trajectories rich in buffer transformations keep every suite kernel's outputs") {
  const transforms::Target target;
  const std::vector<transforms::Kind> mine = {
      transforms::Kind::kCreateTemporary, transforms::Kind::kReuseBuffers,
      transforms::Kind::kShrinkBuffer,    transforms::Kind::kInlineTemporary,
      transforms::Kind::kHoist,           transforms::Kind::kSwapBufferDims};
  std::map<transforms::Kind, int> applied;
  for (const auto& name : testing::suite_kernels_to_walk()) {
    auto loaded = testing::load_scaled_kernel(name);
    REQUIRE_MESSAGE(loaded.ok(), loaded.error_text());
    const ir::Program& original = loaded.value();
    for (int t = 0; t < 6; ++t) {
      std::mt19937_64 rng(std::hash<std::string>{}(name)*31 + t);
      ir::Program cur = original;
      std::vector<Action> trace;
      for (int step = 0; step < 16; ++step) {
        // Half the steps pick one of the six kinds (uniformly among those with a legal action),
        // the others any legal action, so the buffer transformations meet tiled and fused code.
        std::map<transforms::Kind, std::vector<Action>> by_kind;
        std::vector<Action> all = transforms::legal_actions(cur, target);
        if (all.empty()) break;
        for (const auto& a : all)
          if (std::find(mine.begin(), mine.end(), a.kind) != mine.end())
            by_kind[a.kind].push_back(a);
        const std::vector<Action>* pool = &all;
        if (!by_kind.empty() && rng() % 2 == 0) {
          auto it = by_kind.begin();
          std::advance(it, static_cast<long>(rng() % by_kind.size()));
          pool = &it->second;
        }
        const Action a = (*pool)[rng() % pool->size()];
        auto next = transforms::apply(cur, a, target);
        REQUIRE_MESSAGE(next.ok(), next.error_text());
        cur = std::move(next).value();
        trace.push_back(a);
        ++applied[a.kind];
      }
      INFO("kernel ", name, ", trace:\n", transforms::print_trace(trace));
      require_same_outputs(original, cur);
    }
  }
  for (auto k : mine) CHECK_MESSAGE(applied[k] > 0, transforms::kind_name(k) << " never ran");
}
