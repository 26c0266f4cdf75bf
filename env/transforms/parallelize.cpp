#include "transforms/parallelize.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ir/liveness.h"
#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

bool contains_parallel(const ir::Node& n) {
  if (!n.is_scope) return false;
  if (n.annot == ir::Annot::kParallel) return true;
  for (const auto& c : n.body)
    if (contains_parallel(*c)) return true;
  return false;
}

// The temporaries parallelize gives each iteration a copy of (ir::iteration_private_buffers),
// unless the copies together would pass kMaxPrivateElements.
constexpr int64_t kMaxPrivateElements = int64_t{1} << 24;
std::vector<std::string> privatised(const ir::Program& p, const Path& path, const ir::Node& s) {
  std::vector<std::string> out;
  for (std::string& b : ir::iteration_private_buffers(p, path))
    if (p.find_buffer(b)->elements() * s.extent <= kMaxPrivateElements) out.push_back(std::move(b));
  return out;
}

}  // namespace

Legality check_parallelize(const ir::Program& p, const Action& a, const Target& t,
                           const ProgramIndex* index) {
  const ir::Node* s = nullptr;
  if (auto l = scope_location(p, a.path, &s, index); !l.ok()) return l;
  if (!t.parallel) return {Reason::kUnsupportedByTarget, "", a.path};
  if (s->annot != ir::Annot::kNone) return {Reason::kAnnotated, "", a.path};
  if (s->extent < 2) return {Reason::kNothingToDo, "", a.path};
  if (any_enclosing_annot(p, a.path, [](ir::Annot x) { return x == ir::Annot::kParallel; }))
    return {Reason::kNestedParallel, "", a.path};
  if (contains_parallel(*s)) return {Reason::kNestedParallel, "", a.path};
  int d = static_cast<int>(a.path.size()) - 1;
  const ChildSites body(index, p, a.path, 0, static_cast<int>(s->body.size()));
  // Temporaries each iteration writes wholly before reading (a GEMM's packed blocks, its
  // register tile) carry nothing between iterations: apply gives every iteration its own copy,
  // so their accesses order nothing.
  const std::vector<std::string> own = privatised(p, a.path, *s);
  std::vector<AccessSite> shared;
  std::span<const AccessSite> sites = body.sites();
  if (!own.empty()) {
    for (const AccessSite& site : sites)
      if (!std::binary_search(own.begin(), own.end(), site.access->buffer)) shared.push_back(site);
    sites = shared;
  }
  const DirList dirs = eq_dirs(d, {Dir::kLt});
  if (auto b = find_dependence(sites, sites, dirs)) return {Reason::kDependence, *b, a.path};
  return {};
}

Precheck precheck_parallelize(MaskSummary& sum, const MaskSite& at,
                               std::span<const int64_t> params) {
  // A plain scope of more than one iteration, with no :par scope around or inside it.
  const ir::Node& s = sum.scope(at.scope);
  if (s.annot != ir::Annot::kNone || s.extent <= 1 || sum.near_parallel(at.scope)) return {};
  return check_all(params);
}

ir::Program apply_parallelize(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_parallelize, p, a, t);
  const ir::Node* s = node_at(p, a.path);
  const std::vector<std::string> own = privatised(p, a.path, *s);
  ir::NodePtr par = ir::Node::scope(s->extent, s->extent_name, ir::Annot::kParallel, s->body, s->loc);
  if (own.empty()) return replace_node(p, a.path, {par});
  // Each private temporary gains a first dimension, the scope's iterator: every iteration its
  // own copy (the code generator keeps one per thread, ir::iteration_slices).
  const ir::Affine mine = ir::Affine::iter(static_cast<int>(a.path.size()) - 1);
  par = map_accesses(par, [&](const ir::Access& x) -> std::optional<ir::Access> {
    if (!std::binary_search(own.begin(), own.end(), x.buffer)) return std::nullopt;
    ir::Access y = x;
    y.index.insert(y.index.begin(), mine);
    return y;
  });
  ir::Program q = replace_node(p, a.path, {par});
  for (ir::BufferDecl& b : q.buffers) {
    if (!std::binary_search(own.begin(), own.end(), b.name)) continue;
    b.shape_names.resize(b.shape.size());
    b.shape.insert(b.shape.begin(), s->extent);
    b.shape_names.insert(b.shape_names.begin(), s->extent_name);
  }
  return q;
}

}  // namespace perfdojo::transforms
