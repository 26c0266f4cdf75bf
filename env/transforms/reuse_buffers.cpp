#include "transforms/reuse_buffers.h"

#include <algorithm>

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// First and last top-level node using `buf`, or {-1, -1} when none does.
std::pair<int, int> live_range(const ir::Program& p, const ProgramIndex* index,
                               const std::string& buf) {
  if (index) {
    const std::span<const int> sites = index->buffer_sites(buf);
    if (sites.empty()) return {-1, -1};
    return {index->node(index->site_node(sites.front())).top,
            index->node(index->site_node(sites.back())).top};
  }
  int first = -1, last = -1;
  for (int i = 0; i < static_cast<int>(p.body.size()); ++i) {
    if (!uses_buffer(p.body[i], buf)) continue;
    if (first < 0) first = i;
    last = i;
  }
  return {first, last};
}

}  // namespace

Legality check_reuse_buffers(const ir::Program& p, const Action& a, const Target&,
                             const ProgramIndex* index) {
  const ir::BufferDecl* x = find_decl(p, a.buffer);
  const ir::BufferDecl* y = find_decl(p, a.buffer2);
  if (!x) return {Reason::kNoSuchLocation, a.buffer, {}};
  if (!y) return {Reason::kNoSuchLocation, a.buffer2, {}};
  if (x == y) return {Reason::kNothingToDo, a.buffer, {}};
  if (x->role != ir::Role::kTemp) return {Reason::kNotATemporary, x->name, {}};
  if (y->role != ir::Role::kTemp) return {Reason::kNotATemporary, y->name, {}};
  if (x->dtype != y->dtype || x->shape != y->shape) return {Reason::kShapeMismatch, y->name, {}};
  if (y->init) return {Reason::kHasInitialValue, y->name, {}};
  auto [fx, lx] = live_range(p, index, x->name);
  auto [fy, ly] = live_range(p, index, y->name);
  if (fx < 0 || fy < 0) return {};
  if (lx < fy) return {};  // X, then Y: Y (no initial value) starts from X's leftovers
  if (ly < fx) {           // Y, then X: X would start from Y's leftovers
    if (x->init) return {Reason::kHasInitialValue, x->name, {}};
    return {};
  }
  return {Reason::kLifetimesOverlap, y->name, {}};
}

Precheck precheck_reuse_buffers(MaskSummary& sum, const MaskSite& at,
                                std::span<const int64_t> params) {
  // Asked a row at a time (buffer x with every later y); a pair past the summary is left to the
  // check.
  if (at.buffer2 >= 0) return check_all(params);
  const ir::Program& p = sum.program();
  const int bx = at.buffer;
  const ir::BufferDecl& x = p.buffers[bx];
  // Only a temporary can take another's storage.
  if (x.role != ir::Role::kTemp) return {};
  const auto [fx, lx] = sum.live_range(bx);
  Precheck out;
  const int n = sum.summarised_buffers();
  for (int by = bx + 1; by < n; ++by) {
    const ir::BufferDecl& y = p.buffers[by];
    if (y.role != ir::Role::kTemp || x.dtype != y.dtype || x.shape != y.shape || y.init) continue;
    const auto [fy, ly] = sum.live_range(by);
    // Live one after the other (an initial value of x would be lost when y comes first).
    if (fx < 0 || fy < 0 || lx < fy || (ly < fx && !x.init)) out.check |= uint64_t{1} << by;
  }
  return out;
}

ir::Program apply_reuse_buffers(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_reuse_buffers, p, a, t);
  ir::Program q = p;
  for (auto& n : q.body) {
    if (!uses_buffer(n, a.buffer2)) continue;
    n = map_accesses(n, [&](const ir::Access& x) -> std::optional<ir::Access> {
      if (x.buffer != a.buffer2) return std::nullopt;
      ir::Access y = x;
      y.buffer = a.buffer;
      return y;
    });
  }
  q.buffers.erase(std::remove_if(q.buffers.begin(), q.buffers.end(),
                                 [&](const ir::BufferDecl& b) { return b.name == a.buffer2; }),
                  q.buffers.end());
  return q;
}

}  // namespace perfdojo::transforms
