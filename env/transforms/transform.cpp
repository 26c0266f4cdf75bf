#include "transforms/transform.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "transforms/analysis.h"

namespace perfdojo::transforms {

namespace {
// PERFDOJO_INTERNAL_CHECKS=1 in the environment turns them on (the tests' main sets it).
bool checks_from_environment() {
  const char* v = std::getenv("PERFDOJO_INTERNAL_CHECKS");
  return v && *v != '\0' && std::strcmp(v, "0") != 0;
}
// -1 until the environment is read, at the first use (after main has started).
std::atomic<int> g_internal_checks{-1};
}  // namespace

bool internal_checks() {
  int on = g_internal_checks.load(std::memory_order_relaxed);
  if (on < 0) {
    on = checks_from_environment();
    g_internal_checks.store(on, std::memory_order_relaxed);
  }
  return on != 0;
}

bool set_internal_checks(bool on) {
  const bool before = internal_checks();
  g_internal_checks.store(on, std::memory_order_relaxed);
  return before;
}

void expect_legal(const Legality& l, const Action& a, const char* where) {
  if (l.ok()) return;
  throw InternalError(std::string("internal error: ") + where + " reached for an illegal action: " +
                      print_action(a) + " (" + reason_name(l.reason) + ")");
}

Legality scope_location(const ir::Program& p, const Path& path, const ir::Node** scope,
                        const ProgramIndex* index) {
  const ir::Node* n = nullptr;
  if (!index) {
    n = node_at(p, path);
  } else if (const int i = index->find(path); i >= 0) {
    n = index->node(i).node;
  }
  if (!n) return {Reason::kNoSuchLocation, "", path};
  if (!n->is_scope) return {Reason::kNotAScope, "", path};
  *scope = n;
  return {};
}

ir::Affine tile_index(const ir::Affine& a, int d, int64_t f) {
  ir::Affine b;
  b.constant = a.constant;
  int n = static_cast<int>(a.coeffs.size());
  if (n <= d) return a;
  b.coeffs.assign(n + 1, 0);
  for (int k = 0; k < d; ++k) b.coeffs[k] = a.coeffs[k];
  b.coeffs[d] = a.coeffs[d] * f;
  b.coeffs[d + 1] = a.coeffs[d];
  for (int k = d + 1; k < n; ++k) b.coeffs[k + 1] = a.coeffs[k];
  b.normalise();
  return b;
}

ir::NodePtr tile_node(const ir::Node& s, int d, int64_t f, ir::Annot inner_annot) {
  std::vector<ir::NodePtr> body;
  body.reserve(s.body.size());
  for (const auto& c : s.body)
    body.push_back(map_indices(c, [&](const ir::Affine& a) { return tile_index(a, d, f); }));
  // A bounded scope's bounds (in the iterators around it) go to the inner scope, less the outer
  // one's start: lo <= {d}*f + {d+1} < hi is lo - {d}*f <= {d+1} < hi - {d}*f. The outer scope
  // runs every tile, the inner one the part of it inside the bounds (none where it is outside),
  // so the iterations and their order are the same.
  ir::ScopeBounds bounds = s.bounds;
  for (auto* b : {&bounds.lo, &bounds.hi}) {
    if (!*b) continue;
    if (static_cast<int>((*b)->coeffs.size()) <= d) (*b)->coeffs.resize(d + 1, 0);
    (*b)->coeffs[d] -= f;
    (*b)->normalise();
  }
  auto inner = ir::Node::scope(f, "", inner_annot, std::move(body), s.loc, std::move(bounds));
  return ir::Node::scope(s.extent / f, "", s.annot, {inner}, s.loc);
}

Legality lanes_location(const ir::Program& p, const Action& a, const Target& t,
                        const ir::Node** scope, const ProgramIndex* index) {
  if (auto l = scope_location(p, a.path, scope, index); !l.ok()) return l;
  if (std::find(t.vector_widths.begin(), t.vector_widths.end(), a.param) == t.vector_widths.end())
    return {Reason::kUnsupportedByTarget, "", a.path};
  if ((*scope)->annot != ir::Annot::kNone) return {Reason::kAnnotated, "", a.path};
  return {};
}

ir::Program annotate_lanes(const ir::Program& p, const Path& path, int64_t w) {
  const ir::Node* s = node_at(p, path);
  if (s->extent == w)
    return replace_node(p, path, {ir::Node::scope_like(*s, ir::Annot::kVector, s->body)});
  return replace_node(p, path,
                      {tile_node(*s, static_cast<int>(path.size()) - 1, w, ir::Annot::kVector)});
}

}  // namespace perfdojo::transforms
