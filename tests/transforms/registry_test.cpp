// The registry as the one table: each row's precheck agrees with its check at every location,
// and apply is never reached without a passing check.
#include "transforms/registry.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>

#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "support/scaled_kernels.h"
#include "transforms/analysis.h"
#include "transforms/flat_space.h"
#include "transforms/mask_summary.h"
#include "transforms/semantics_guard.h"

using namespace perfdojo;
using transforms::Action;
using transforms::Kind;

namespace {

// Every location of kind k on `ix`'s program, as the mask addresses it and as an action.
template <class F>
void for_each_location(const transforms::ProgramIndex& ix, Kind k, F&& f) {
  const ir::Program& p = ix.program();
  const int nb = std::min<int>(static_cast<int>(p.buffers.size()), 64);
  auto path_of = [&](int n) {
    const auto s = ix.path(n);
    return transforms::Path(s.begin(), s.end());
  };
  switch (transforms::loc_kind(k)) {
    case transforms::LocKind::kScope:
      for (int s = 0; s < static_cast<int>(ix.scopes().size()); ++s)
        f(transforms::MaskSite{s, ix.scopes()[s], -1, -1},
          Action{k, path_of(ix.scopes()[s]), "", "", 0});
      break;
    case transforms::LocKind::kNode:
      for (int n = 0; n < ix.size(); ++n)
        f(transforms::MaskSite{-1, n, -1, -1}, Action{k, path_of(n), "", "", 0});
      break;
    case transforms::LocKind::kBuffer:
      for (int b = 0; b < nb; ++b)
        f(transforms::MaskSite{-1, -1, b, -1}, Action{k, {}, p.buffers[b].name, "", 0});
      break;
    case transforms::LocKind::kBufferPair:
      for (int i = 0; i < nb; ++i)
        for (int j = i + 1; j < nb; ++j)
          f(transforms::MaskSite{-1, -1, i, j},
            Action{k, {}, p.buffers[i].name, p.buffers[j].name, 0});
      break;
    case transforms::LocKind::kScopeBuffer:
      for (int s = 0; s < static_cast<int>(ix.scopes().size()); ++s)
        for (int b = 0; b < nb; ++b)
          f(transforms::MaskSite{s, ix.scopes()[s], b, -1},
            Action{k, path_of(ix.scopes()[s]), p.buffers[b].name, "", 0});
      break;
  }
}

// The precheck's answer at one location. Scope + buffer and pair kinds are asked a row at a
// time (buffer, resp. buffer2, left -1), a bit per buffer: that bit is the location's answer.
transforms::Precheck verdicts(const transforms::TransformInfo& row, transforms::MaskSummary& sum,
                              transforms::MaskSite site, const std::vector<int64_t>& values) {
  int* named = nullptr;
  switch (transforms::loc_kind(row.kind)) {
    case transforms::LocKind::kScopeBuffer:
      named = &site.buffer;
      break;
    case transforms::LocKind::kBufferPair:
      named = &site.buffer2;
      break;
    default:
      return row.precheck(sum, site, values);
  }
  const int b = *named;
  *named = -1;
  const transforms::Precheck all = row.precheck(sum, site, values);
  return {(all.legal >> b) & 1, (all.check >> b) & 1};
}

// Restores the internal-check setting on scope exit.
struct InternalChecks {
  explicit InternalChecks(bool on) : before(transforms::set_internal_checks(on)) {}
  ~InternalChecks() { transforms::set_internal_checks(before); }
  bool before;
};

}  // namespace

TEST_CASE("the registry has one row per kind, in id order, each with its three functions") {
  const auto& rows = transforms::registry();
  REQUIRE(static_cast<int>(rows.size()) == transforms::kNumKinds);
  for (int k = 0; k < transforms::kNumKinds; ++k) {
    CHECK(static_cast<int>(rows[k].kind) == k);
    CHECK(bool(rows[k].check));
    CHECK(bool(rows[k].precheck));
    CHECK(bool(rows[k].apply));
  }
}

TEST_CASE("every kind's precheck agrees with its check at every location of random trajectories" *
          doctest::test_suite("slow")) {
  const transforms::Target target;
  // Per kind: verdicts the precheck decided legal, decided illegal, and left to the check.
  std::vector<int> decided_legal(transforms::kNumKinds), decided_illegal(transforms::kNumKinds),
      left(transforms::kNumKinds);
  // The suite's kernels, and those outside it (a stencil's shifted reads, C = A A^T's one buffer
  // read through two indices), at instances small enough for a quick check.
  std::vector<std::pair<std::string, ir::Program>> kernels;
  for (const auto& name : testing::suite_kernel_names()) {
    auto loaded = testing::load_scaled_kernel(name);
    REQUIRE(loaded.ok());
    kernels.emplace_back(name, loaded.value());
  }
  for (const char* name : {"syrk", "jacobi2d", "stencil1d", "bilinear", "outer-acc"}) {
    auto loaded = ir::load_file(std::string(PERFDOJO_UNSEEN_DIR) + "/" + name + ".pdj");
    REQUIRE_MESSAGE(loaded.ok(), loaded.error_text());
    auto small = transforms::guard_instance(loaded.value(), 5e4, target);
    REQUIRE(small);
    kernels.emplace_back(name, *small);
  }
  for (const auto& kernel : kernels) {
    const std::string& name = kernel.first;  // a plain name: the lambda below captures it
    std::mt19937_64 rng(std::hash<std::string>{}(name) + 7);
    ir::Program cur = kernel.second;
    for (int step = 0; step < 10; ++step) {
      const transforms::ProgramIndex ix(cur);
      transforms::MaskSummary sum(ix, 1 << 20);
      for (const auto& row : transforms::registry()) {
        for_each_location(ix, row.kind, [&](const transforms::MaskSite& site, Action a) {
          // A factor kind's values are those derived at the scope, as the mask asks them.
          const auto list =
              transforms::params_at(row.kind, site.node >= 0 ? ix.node(site.node).node->extent : 0);
          const std::vector<int64_t> values(list.begin(), list.end());
          const transforms::Precheck pc = verdicts(row, sum, site, values);
          for (size_t i = 0; i < values.size(); ++i) {
            a.param = values[i];
            // On a program with bounded scopes or indirect indices the mask asks no precheck
            // (docs/actions.md, "Bounded scopes", "Indirect indices"), and registry-level
            // refusals (non_rectangular, indirect) come after the kind's own check: there a
            // precheck answers for that check alone.
            const bool legal = ir::any_bounded(cur.body) || ir::any_indirect(cur.body)
                                   ? row.check(cur, a, target, nullptr).ok()
                                   : transforms::check(cur, a, target).ok();
            const bool said_legal = (pc.legal >> i) & 1, open = (pc.check >> i) & 1;
            INFO(name << ": " << transforms::print_action(a) << "\n" << ir::print_program(cur));
            CHECK_FALSE((said_legal && open));
            if (said_legal) CHECK(legal);
            if (!said_legal && !open) CHECK_FALSE(legal);
            const int k = static_cast<int>(row.kind);
            ++(said_legal ? decided_legal[k] : open ? left[k] : decided_illegal[k]);
          }
        });
      }
      auto next = transforms::sample_legal_action(cur, target, rng);
      if (!next) break;
      cur = transforms::apply(cur, *next, target).value();
    }
  }
  // The prechecks that decide whole verdicts did so, and every kind ruled something out cheaply.
  for (Kind k : {Kind::kTileScope, Kind::kUnroll, Kind::kCreateTemporary, Kind::kSwapBufferDims})
    CHECK_MESSAGE(decided_legal[static_cast<int>(k)] > 0, transforms::kind_name(k));
  for (int k = 0; k < transforms::kNumKinds; ++k)
    CHECK_MESSAGE(decided_illegal[k] > 0, transforms::kind_name(static_cast<Kind>(k)));
}

TEST_CASE("apply reached for an action its check refuses is an internal error when checks are on") {
  auto p = ir::parse_program(R"(M = 6
input x: f32[M]
output y: f32[M]

M y[{0}] = x[{0}]
)");
  REQUIRE(p.ok());
  const transforms::Target target;
  const Action bad{Kind::kTileScope, {0}, "", "", 4};  // 4 does not divide 6
  REQUIRE_FALSE(transforms::check(p.value(), bad, target).ok());
  const auto& row = transforms::registry()[static_cast<int>(Kind::kTileScope)];
  {
    InternalChecks on(true);
    CHECK_THROWS_WITH_AS(row.apply(p.value(), bad, target),
                         doctest::Contains("apply_tile_scope reached for an illegal action: "
                                           "tile_scope 0 4 (not_divisible)"),
                         transforms::InternalError);
    // The checked entry point refuses with a diagnostic instead.
    CHECK_FALSE(transforms::apply(p.value(), bad, target).ok());
    // A legal action goes through.
    CHECK_NOTHROW(row.apply(p.value(), Action{Kind::kTileScope, {0}, "", "", 3}, target));
  }
}

TEST_CASE(
    "the flat space is one across targets: the same size and the same action at every index") {
  // A policy trained on one backend (the cost model) proposes on another: widths a target lacks
  // are in its space and refused by the check, never left out. A width slot means the same
  // relative width everywhere: slot 0 is the target's native vector (16 lanes on AVX-512, 8 on
  // AVX2, 4 on NEON), the next ones narrower, then the wider ones it lacks.
  const transforms::FlatActionSpace ref({}, *transforms::target_by_name("x86_avx512"));
  const ir::Program p = testing::load_scaled_kernel("softmax").value();
  const std::map<std::string, std::vector<int64_t>> orders = {
      {"x86_avx2", {8, 4, 2, 16}},     {"x86_64", {16, 8, 4, 2}},
      {"aarch64_neon", {4, 2, 8, 16}}, {"aarch64_sve", {8, 4, 2, 16}},
      {"riscv64_rvv", {2, 4, 8, 16}},  {"cuda", {16, 8, 4, 2}}};
  CHECK(ref.params(transforms::Kind::kVectorize) == std::vector<int64_t>{16, 8, 4, 2});
  for (const auto& entry : orders) {
    const std::string& name = entry.first;
    const std::vector<int64_t>& order = entry.second;
    INFO(name);
    const auto t = *transforms::target_by_name(name);
    const transforms::FlatActionSpace space({}, t);
    REQUIRE(space.size() == ref.size());
    CHECK(space.params(transforms::Kind::kVectorize) == order);
    CHECK(space.params(transforms::Kind::kDotProduct) == order);
    for (int i = 0; i < ref.size(); ++i) {
      const auto a = space.parts(i), b = ref.parts(i);
      REQUIRE(a.kind == b.kind);
      REQUIRE(a.param_index == b.param_index);
      REQUIRE(a.scope == b.scope);
      REQUIRE(a.node == b.node);
      REQUIRE(a.buffer == b.buffer);
      REQUIRE(a.buffer2 == b.buffer2);
      if (transforms::param_kind(a.kind) != transforms::ParamKind::kWidth)
        REQUIRE(space.describe(i) == ref.describe(i));
    }
    // A width the target lacks: in the space, masked, refused with its reason.
    const auto mask = space.mask(p);
    for (int i = 0; i < space.size(); ++i) {
      auto a = space.decode(p, i);
      if (!a || a->kind != transforms::Kind::kVectorize) continue;
      const bool has = std::find(t.vector_widths.begin(), t.vector_widths.end(), a->param) !=
                       t.vector_widths.end();
      if (has) continue;
      CHECK(mask[i] == 0);
      CHECK(transforms::check(p, *a, t).reason == transforms::Reason::kUnsupportedByTarget);
    }
  }
}

TEST_CASE("an index's parts name the slots its action decodes to, on every index") {
  // The agents' factored Q-head scores an action from its kind, parameter and the feature rows
  // of these slots: a part that disagreed with decode would score one action as another.
  const transforms::FlatActionSpace space({}, *transforms::target_by_name("x86_avx512"));
  const ir::Program p = testing::load_scaled_kernel("attention").value();
  const auto scopes = transforms::scope_paths(p);
  const auto nodes = transforms::node_paths(p);
  auto buffer_slot = [&](const std::string& name) {
    for (size_t i = 0; i < p.buffers.size(); ++i)
      if (p.buffers[i].name == name) return static_cast<int>(i);
    return -1;
  };
  int decoded = 0;
  for (int i = 0; i < space.size(); ++i) {
    const auto parts = space.parts(i);
    const auto a = space.decode(p, i);
    if (!a) continue;
    ++decoded;
    INFO(space.describe(i));
    CHECK(a->kind == parts.kind);
    if (transforms::param_kind(parts.kind) == transforms::ParamKind::kFactor)
      CHECK(a->param ==
            transforms::factor_values(parts.kind, transforms::node_at(p, a->path)->extent)
                .v[parts.param_index]);
    else
      CHECK(a->param == space.params(parts.kind)[parts.param_index]);
    if (parts.scope >= 0) CHECK(a->path == scopes[parts.scope]);
    if (parts.node >= 0) CHECK(a->path == nodes[parts.node]);
    if (parts.buffer >= 0) CHECK(buffer_slot(a->buffer) == parts.buffer);
    if (parts.buffer2 >= 0) CHECK(buffer_slot(a->buffer2) == parts.buffer2);
    const int located = (parts.scope >= 0) + (parts.node >= 0) + (parts.buffer >= 0);
    CHECK(located >= 1);
  }
  CHECK(decoded > 100);
  CHECK(space.parts(-1).scope == -1);
  CHECK(space.parts(space.size()).buffer == -1);
}

TEST_CASE(
    "small_instance scales sizes related by offsets and doubling together (N - 1, N + 1, 2 N)") {
  // An exact integer recurrence over N - 1 steps writing a table of N + 1: halving N alone puts
  // x[{0}+1] out of bounds and the odd sizes do not halve; as one family they scale together.
  auto loaded = ir::load_program(R"(N = 4096
NM = 4095
NP = 4097
W = 8192
input x: i32[N] in [0, 9]
output y: i32[NP] = 0
output z: i32[W] = 0

NM y[{0}+2] = y[{0}+1] + x[{0}+1] - x[{0}]
| z[{0}*2] = y[{0}+2]
)");
  REQUIRE(loaded.ok());
  const ir::Program& p = *loaded;
  auto inst = transforms::small_instance(p, {}, transforms::Target{}, 2000);
  REQUIRE(inst);
  const ir::Program& s = inst->first;
  const int64_t n = s.find_size("N")->value;
  CHECK(n < 4096);
  CHECK(s.find_size("NM")->value == n - 1);
  CHECK(s.find_size("NP")->value == n + 1);
  CHECK(s.find_size("W")->value == 2 * n);
  CHECK(transforms::interpret_work(s) <= 2000);
}
