#include "transforms/registry.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <unordered_map>

#include "ir/check.h"
#include "transforms/analysis.h"
#include "transforms/unroll.h"

namespace perfdojo::transforms {

// Each row's functions, declared from the row: a kind's file pair defines them (a signature
// that differs there fails to link).
#define PERFDOJO_X(e, n, l, p, r)                                                            \
  Legality check_##n(const ir::Program&, const Action&, const Target&, const ProgramIndex*); \
  Precheck precheck_##n(MaskSummary&, const MaskSite&, std::span<const int64_t>);            \
  ir::Program apply_##n(const ir::Program&, const Action&, const Target&);
PERFDOJO_TRANSFORM_KINDS(PERFDOJO_X)
#undef PERFDOJO_X

const std::vector<TransformInfo>& registry() {
  static const std::vector<TransformInfo> kTable = {
#define PERFDOJO_X(e, n, l, p, r) {Kind::e, check_##n, precheck_##n, apply_##n},
      PERFDOJO_TRANSFORM_KINDS(PERFDOJO_X)
#undef PERFDOJO_X
  };
  return kTable;
}

namespace {

// Whether a statement under a bounded scope (`under`: one encloses `body`) accesses `buffer`.
bool bounded_access(const std::vector<ir::NodePtr>& body, const std::string& buffer, bool under) {
  for (const auto& n : body) {
    if (n->is_scope) {
      if (bounded_access(n->body, buffer, under || n->bounds.any())) return true;
    } else if (under) {
      if (n->stmt.lhs.buffer == buffer) return true;
      BufferNames read;
      loaded_buffers(*n->stmt.rhs, read);
      if (holds_name(read, buffer)) return true;
    }
  }
  return false;
}

// Bounded (non-rectangular) scopes, docs/actions.md: the kinds whose checks reason about a
// scope's iterations through its extent see a bounded scope as running all of it, which is
// right for what may happen (dependences) and wrong for what must (a store covering a
// buffer, a hoisted statement running at least once). Until each such kind handles bounds, it
// is refused where they matter, by what its check reads (the mask's memo relies on that):
// - annotations (parallelize, clear_annotation) and buffer layout (swap_buffer_dims,
//   stream_stores, widen_buffer) change no iteration: never refused;
// - tile_scope re-indexes bounds like accesses and moves a scope's own bounds to its inner
//   scope: never refused; vectorize: allowed on an innermost bounded scope;
// - other kinds at a scope or node: refused when it, or a scope inside it, is bounded; hoist
//   also when its parent is, move_statement and join_scopes when the next sibling is;
// - kinds at a buffer: refused when a statement under a bounded scope accesses it.
Legality bounded_gate(const ir::Program& p, const Action& a) {
  switch (a.kind) {
    case Kind::kParallelize:
    case Kind::kClearAnnotation:
    case Kind::kSwapBufferDims:
    case Kind::kStreamStores:
    case Kind::kWidenBuffer:   // changes a type, no iteration
    case Kind::kMaskToBounds:  // merges with the bounds a scope has; never relies on trip counts
    case Kind::kSwapScopes:    // interchanges a bounded child exactly, or refuses (its own check)
      return {};
    default:
      break;
  }
  const LocKind lk = loc_kind(a.kind);
  if (lk == LocKind::kScope || lk == LocKind::kNode || lk == LocKind::kScopeBuffer) {
    const ir::Node* n = node_at(p, a.path);
    if (!n) return {};
    // tile_scope moves a scope's bounds to its inner scope (tile_node); vectorize, whose own
    // check has already required an innermost scope, runs a bounded one whole tiles at a time,
    // its checks over the extent over-approximating the iterations (all "may" facts).
    if (a.kind != Kind::kTileScope && a.kind != Kind::kVectorize && ir::any_bounded(*n))
      return {Reason::kNonRectangular, "", a.path};
    if (a.kind == Kind::kHoist && a.path.size() > 1) {
      const ir::Node* parent = node_at(p, Path(a.path.begin(), a.path.end() - 1));
      if (parent && parent->bounds.any()) return {Reason::kNonRectangular, "", a.path};
    }
    if (reads(a.kind) == Reads::kNextSibling) {
      Path next = a.path;
      ++next.back();
      if (const ir::Node* s = node_at(p, next); s && ir::any_bounded(*s))
        return {Reason::kNonRectangular, "", next};
    }
  }
  for (const std::string* b : {&a.buffer, &a.buffer2})
    if (!b->empty() && bounded_access(p.body, *b, false)) return {Reason::kNonRectangular, *b, {}};
  return {};
}

// Indirect indices (docs/ir.md, "Indirect indices"): they read i32 inputs and index reads of
// inputs only, so no dependence passes through them, and the moves whose rewrites go through
// map_indices (which rewrites an indirect term's indices too) and whose checks reason by
// dependences handle them: tiling, interchange, unrolling, splitting and fusing scopes,
// annotations. vectorize's own check refuses lanes that would gather. create_temporary asks
// about the accesses of its one buffer only (their common index, the statements that write it):
// it takes an output or temporary (the accumulators of an embedding bag, a sparse product's
// output rows), which the checker never lets an index read or be read through. Every other move
// asks questions of the affine indices alone (which iterators a statement uses, the form of a
// buffer's accesses) and is refused on a kernel with an indirect index until it handles one.
Legality indirect_gate(const ir::Program& p, const Action& a) {
  switch (a.kind) {
    case Kind::kCreateTemporary: {
      // Accumulators only: besides the table and the index, staging a read-only input (a
      // packing copy) of a gather kernel only widened the search (2:4: 36.8 and 40.7 ms
      // against 29.7).
      const ir::BufferDecl* b = p.find_buffer(a.buffer);
      if (!b || b->role == ir::Role::kInput) return {Reason::kIndirect, a.buffer, a.path};
      return {};
    }
    case Kind::kTileScope:
    case Kind::kSwapScopes:
    case Kind::kSplitScope:
    case Kind::kJoinScopes:
    case Kind::kVectorize:
    case Kind::kUnroll:
    case Kind::kParallelize:
    case Kind::kClearAnnotation:
    case Kind::kStreamStores:
      return {};
    default:
      return {Reason::kIndirect, a.buffer, a.path};
  }
}

Legality check_with(const ir::Program& p, const Action& a, const Target& t,
                    const ProgramIndex* index) {
  int k = static_cast<int>(a.kind);
  if (k < 0 || k >= kNumKinds) return {Reason::kNoSuchLocation, "", {}};
  if (param_kind(a.kind) == ParamKind::kNone && a.param != 0)
    return {Reason::kBadParameter, "", a.path};
  Legality l = registry()[k].check(p, a, t, index);
  if (!l.ok()) return l;
  if (index ? index->bounded() : ir::any_bounded(p.body)) {
    l = bounded_gate(p, a);
    if (!l.ok()) return l;
  }
  if (index ? index->indirect() : ir::any_indirect(p.body)) return indirect_gate(p, a);
  return l;
}
}  // namespace

Legality check(const ir::Program& p, const Action& a, const Target& t) {
  return check_with(p, a, t, nullptr);
}

Legality check(const ir::Program& p, const Action& a, const Target& t, const ProgramIndex& index) {
  return check_with(p, a, t, &index);
}

ir::Result<ir::Program> apply(const ir::Program& p, const Action& a, const Target& t) {
  Legality l = check(p, a, t);
  if (!l.ok())
    return std::vector<ir::Diagnostic>{{{}, explain(a, l) + " [" + reason_name(l.reason) + "]"}};
  return registry()[static_cast<int>(a.kind)].apply(p, a, t);
}

ir::Result<ir::Program> replay(const ir::Program& p, const std::vector<Action>& trace,
                               const Target& t) {
  ir::Program cur = p;
  for (size_t i = 0; i < trace.size(); ++i) {
    auto r = apply(cur, trace[i], t);
    if (!r.ok()) {
      auto d = r.errors()[0];
      d.loc.line = static_cast<int>(i) + 1;
      d.loc.col = 1;
      return std::vector<ir::Diagnostic>{d};
    }
    cur = std::move(r).value();
  }
  return cur;
}

namespace {

// `p` with its sizes set by `set` (name, old value -> new value), shapes and extents following;
// nullopt when the result does not check.
std::optional<ir::Program> resized(const ir::Program& p,
                                   const std::function<int64_t(const std::string&, int64_t)>& set) {
  ir::Program q = p;
  std::map<std::string, int64_t> value;
  for (auto& s : q.sizes) {
    s.value = set(s.name, s.value);
    value[s.name] = s.value;
  }
  for (auto& b : q.buffers) {
    for (size_t i = 0; i < b.shape.size(); ++i)
      if (!b.shape_names[i].empty()) b.shape[i] = value[b.shape_names[i]];
    // A range written with sizes (an index buffer's `in [0, V)`) follows them.
    if (b.range && !b.range_names.first.empty())
      b.range->first = static_cast<double>(value[b.range_names.first]);
    if (b.range && !b.range_names.second.empty())
      b.range->second = static_cast<double>(value[b.range_names.second]);
  }
  std::function<ir::NodePtr(const ir::NodePtr&)> walk = [&](const ir::NodePtr& n) -> ir::NodePtr {
    if (!n->is_scope) return n;
    std::vector<ir::NodePtr> body;
    for (const auto& c : n->body) body.push_back(walk(c));
    int64_t e = n->extent_name.empty() ? n->extent : value[n->extent_name];
    return ir::Node::scope(e, n->extent_name, n->annot, std::move(body), n->loc, n->bounds);
  };
  for (auto& n : q.body) n = walk(n);
  if (!ir::check_program(q).empty()) return std::nullopt;
  return q;
}

}  // namespace

std::optional<ir::Program> resize(const ir::Program& p,
                                  const std::function<int64_t(const std::string&, int64_t)>& set) {
  return resized(p, set);
}

std::optional<ir::Program> scale_sizes(const ir::Program& p, int64_t g, const std::string& only) {
  return resized(p, [&](const std::string& name, int64_t v) {
    return v % g == 0 && (only.empty() || name == only) ? v / g : v;
  });
}

namespace {
double work(const std::vector<ir::NodePtr>& body) {
  double w = 0;
  for (const auto& c : body)
    w += c->is_scope ? static_cast<double>(c->extent) * work(c->body) : 1.0;
  return w;
}
}  // namespace

double interpret_work(const ir::Program& p) { return work(p.body); }

namespace {

// Sizes related by small offsets or by doubling (a dynamic program's N, N - 1 and N + 1, a
// table of 2 N) as value = a * B + c over one base B per family: the family's smallest size,
// each other one reached through a chain of such relations. Sizes in no family are their own.
struct SizeFamilies {
  std::vector<int> base;      // per size: index of its family's base size
  std::vector<int64_t> a, c;  // per size: value = a * base + c
};

SizeFamilies size_families(const ir::Program& p) {
  const size_t n = p.sizes.size();
  SizeFamilies f{std::vector<int>(n, -1), std::vector<int64_t>(n, 1), std::vector<int64_t>(n, 0)};
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return p.sizes[x].value < p.sizes[y].value; });
  for (size_t root : order) {
    if (f.base[root] >= 0) continue;
    f.base[root] = static_cast<int>(root);
    std::vector<size_t> todo = {root};
    while (!todo.empty()) {
      const size_t i = todo.back();
      todo.pop_back();
      const int64_t vi = p.sizes[i].value;
      for (size_t j = 0; j < n; ++j) {
        if (f.base[j] >= 0) continue;
        const int64_t vj = p.sizes[j].value;
        if (std::abs(vj - vi) <= 8 && vi > 16) {  // an offset (sizes that small are left alone)
          f.a[j] = f.a[i], f.c[j] = f.c[i] + (vj - vi);
        } else if (vj == 2 * vi && vi > 16) {  // a doubling
          f.a[j] = 2 * f.a[i], f.c[j] = 2 * f.c[i];
        } else {
          continue;
        }
        f.base[j] = static_cast<int>(root);
        todo.push_back(j);
      }
    }
  }
  return f;
}

}  // namespace

std::optional<std::pair<ir::Program, ir::Program>> small_instance(const ir::Program& p,
                                                                  const std::vector<Action>& trace,
                                                                  const Target& t,
                                                                  double max_work) {
  for (int64_t g = 1; g <= 4096; g *= 2) {
    auto small = scale_sizes(p, g);
    if (!small) break;
    auto result = replay(*small, trace, t);
    if (!result.ok()) continue;  // a tile factor no longer divides: try another scale
    if (work(small->body) <= max_work) return std::make_pair(*small, result.value());
  }
  // Sizes related by offsets or doubling (N - 1, N + 1, 2 N) scale together: each family's base
  // divided by 2, 4, ..., the others following their relation, so the accesses that tie them
  // stay in bounds.
  {
    const SizeFamilies fam = size_families(p);
    bool related = false;
    for (size_t i = 0; i < p.sizes.size(); ++i)
      related = related || fam.base[i] != static_cast<int>(i);
    for (int64_t g = 2; related && g <= 4096; g *= 2) {
      bool shrank = false;
      auto small = resized(p, [&](const std::string& name, int64_t v) {
        for (size_t i = 0; i < p.sizes.size(); ++i) {
          if (p.sizes[i].name != name) continue;
          const int64_t b = p.sizes[fam.base[i]].value / g;
          if (b < 2) return v;
          const int64_t w = fam.a[i] * b + fam.c[i];
          if (w < 1) return v;
          shrank = shrank || w < v;
          return w;
        }
        return v;
      });
      if (!small || !shrank) continue;
      auto result = replay(*small, trace, t);
      if (!result.ok()) continue;
      if (work(small->body) <= max_work) return std::make_pair(*small, result.value());
    }
  }
  // Sizes tied by the indices (a convolution's input is H + KH - 1 wide) cannot all be halved
  // at once: halve one size at a time, the largest that keeps the program valid and the trace
  // legal, until the instance is small enough.
  ir::Program cur = p;
  for (int round = 0; round < 64; ++round) {
    if (work(cur.body) <= max_work) {
      auto result = replay(cur, trace, t);
      if (result.ok()) return std::make_pair(cur, result.value());
    }
    std::vector<size_t> order(cur.sizes.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return cur.sizes[a].value > cur.sizes[b].value; });
    bool halved = false;
    for (size_t i : order) {
      if (cur.sizes[i].value % 2 != 0) continue;
      auto smaller = scale_sizes(cur, 2, cur.sizes[i].name);
      if (!smaller || !replay(*smaller, trace, t).ok()) continue;
      cur = std::move(*smaller);
      halved = true;
      break;
    }
    if (!halved) break;
  }
  // Traces with index-set splitting or blocks that are not powers of two (a 6-row tile on 1024
  // rows: 1020 + 4, blocks of 60) replay only on sizes of their own residues: give each size,
  // largest first, the smallest value (below its own) on which the trace still replays.
  cur = p;
  std::vector<size_t> order(cur.sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return cur.sizes[a].value > cur.sizes[b].value; });
  int attempts = 3000;  // replays at most: a trace that fits no smaller size costs bounded time
  for (size_t i : order) {
    const std::string name = cur.sizes[i].name;
    const int64_t was = cur.sizes[i].value;
    for (int64_t v = 1; v < was && attempts > 0; ++v, --attempts) {
      auto smaller =
          resized(cur, [&](const std::string& n, int64_t old) { return n == name ? v : old; });
      if (!smaller || !replay(*smaller, trace, t).ok()) continue;
      cur = std::move(*smaller);
      break;
    }
  }
  if (work(cur.body) <= max_work) {
    auto result = replay(cur, trace, t);
    if (result.ok()) return std::make_pair(cur, result.value());
  }
  return std::nullopt;
}

const std::vector<int64_t>& vector_width_params() {
  static const std::vector<int64_t> kWidths = {16, 8, 4, 2};
  return kWidths;
}

const std::vector<int64_t>& vector_width_params(const Target& t) {
  // One order per native width, built once: the native width, the narrower ones descending,
  // then the wider ones ascending (which the target lacks, so the check refuses them).
  static const std::array<std::vector<int64_t>, 4> kOrders = [] {
    std::array<std::vector<int64_t>, 4> orders;
    const auto& all = vector_width_params();
    for (size_t n = 0; n < all.size(); ++n) {
      for (size_t i = n; i < all.size(); ++i) orders[n].push_back(all[i]);
      for (size_t i = n; i-- > 0;) orders[n].push_back(all[i]);
    }
    return orders;
  }();
  const int64_t native = t.widest_lanes();
  const auto& all = vector_width_params();
  for (size_t n = 0; n < all.size(); ++n)
    if (all[n] == native) return kOrders[n];
  return all;  // no vectors, or a width the space does not offer: the fixed order
}

const std::vector<int64_t>& param_values(ParamKind k, const Target& t) {
  static const std::vector<int64_t> kNone = {0};
  static const std::vector<int64_t> kFactors = {};  // derived at each scope: factor_values
  static const std::vector<int64_t> kIndices = {0, 1, 2, 3, 4, 5, 6, 7};
  switch (k) {
    case ParamKind::kNone:
      return kNone;
    case ParamKind::kFactor:
      return kFactors;
    case ParamKind::kIndex:
      return kIndices;
    case ParamKind::kWidth:
      return vector_width_params(t);
  }
  return kNone;
}

const std::vector<int64_t>& register_fit_sizes() {
  static const std::vector<int64_t> kSizes = [] {
    std::vector<int64_t> s;
    for (int64_t rows = 2; rows <= 8; ++rows) s.push_back(rows);
    for (int64_t w : vector_width_params())
      for (int64_t n = 1; n <= 4; ++n) s.push_back(n * w);
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    return s;
  }();
  return kSizes;
}

int ParamList::find(int64_t x) const {
  for (int i = 0; i < n; ++i)
    if (v[i] == x) return i;
  return -1;
}

namespace {

// How far `d` is, in log2, from the nearest register-fit size or power of two.
double distance_to_aim(int64_t d) {
  static const std::vector<double> kAims = [] {
    std::vector<double> a;
    for (int64_t f : register_fit_sizes()) a.push_back(std::log2(static_cast<double>(f)));
    return a;
  }();
  const double l = std::log2(static_cast<double>(d));
  double best = std::abs(l - std::round(l));  // the nearest power of two
  for (double a : kAims) best = std::min(best, std::abs(l - a));
  return best;
}

// `c` (ascending, any length) cut to `n`: those nearest an aim, the smaller on a tie, ascending
// again.
ParamList keep_nearest(std::vector<int64_t>& c, int n) {
  ParamList out;
  if (c.size() > static_cast<size_t>(n)) {
    std::stable_sort(c.begin(), c.end(),
                     [](int64_t a, int64_t b) { return distance_to_aim(a) < distance_to_aim(b); });
    c.resize(n);
    std::sort(c.begin(), c.end());
  }
  for (int64_t x : c) out.v[out.n++] = x;
  return out;
}

ParamList derive_factor_values(Kind k, int64_t e) {
  std::vector<int64_t> c;
  switch (k) {
    case Kind::kTileScope:
    case Kind::kUnroll: {
      const int64_t hi = k == Kind::kUnroll ? std::min(e, kMaxUnroll) : e - 1;
      std::vector<int64_t> large;  // e / d for the small divisors d, descending
      for (int64_t d = 1; d * d <= e; ++d) {
        if (e % d != 0) continue;
        if (d >= 2 && d <= hi) c.push_back(d);
        const int64_t q = e / d;
        if (q != d && q >= 2 && q <= hi) large.push_back(q);
      }
      c.insert(c.end(), large.rbegin(), large.rend());
      break;
    }
    case Kind::kSplitRange:
      for (int64_t f : register_fit_sizes())
        if (f < e && e % f != 0) c.push_back(f);
      break;
    default:
      break;
  }
  return keep_nearest(c, param_slots(k));
}

}  // namespace

ParamList factor_values(Kind k, int64_t e) {
  // The mask asks at every scope it decides, and a program has few distinct extents: each
  // (kind, extent) is derived once per thread (bounded; cleared when full).
  thread_local std::unordered_map<int64_t, ParamList> memo;
  if (param_kind(k) != ParamKind::kFactor || e < 1) return {};
  const int64_t key = e * kNumKinds + static_cast<int64_t>(k);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  if (memo.size() >= 4096) memo.clear();
  return memo.emplace(key, derive_factor_values(k, e)).first->second;
}

int param_slots(Kind k) {
  // Tiles take any divisor (1020 has 22: the sketch's row blocks of 102 among them); an unroll
  // at most 64 and a split a register-fit size, so 16 hold every value of nearly any extent.
  if (k == Kind::kTileScope) return kMaxParams;
  if (param_kind(k) == ParamKind::kFactor) return 16;
  return static_cast<int>(param_values(param_kind(k), Target{}).size());
}

ParamList params_at(Kind k, int64_t e, const Target& t) {
  if (param_kind(k) == ParamKind::kFactor) return factor_values(k, e);
  ParamList out;
  for (int64_t x : param_values(param_kind(k), t)) out.v[out.n++] = x;
  return out;
}

std::vector<Action> candidate_actions(const ir::Program& p, const Target& t) {
  std::vector<Action> out;
  auto scopes = scope_paths(p);
  auto nodes = node_paths(p);
  std::vector<std::string> bufs;
  for (const auto& b : p.buffers) bufs.push_back(b.name);
  for (int k = 0; k < kNumKinds; ++k) {
    Kind kind = static_cast<Kind>(k);
    const auto& params = param_values(param_kind(kind), t);
    auto emit = [&](Action a, std::span<const int64_t> values) {
      for (int64_t v : values) {
        a.param = v;
        out.push_back(a);
      }
    };
    switch (loc_kind(kind)) {
      case LocKind::kScope:
        for (const auto& s : scopes)
          emit({kind, s, "", "", 0}, params_at(kind, node_at(p, s)->extent, t).span());
        break;
      case LocKind::kNode:
        for (const auto& n : nodes) emit({kind, n, "", "", 0}, params);
        break;
      case LocKind::kBuffer:
        for (const auto& b : bufs) emit({kind, {}, b, "", 0}, params);
        break;
      case LocKind::kBufferPair:
        for (size_t i = 0; i < bufs.size(); ++i)
          for (size_t j = i + 1; j < bufs.size(); ++j)
            emit({kind, {}, bufs[i], bufs[j], 0}, params);
        break;
      case LocKind::kScopeBuffer:
        for (const auto& s : scopes)
          for (const auto& b : bufs) emit({kind, s, b, "", 0}, params);
        break;
    }
  }
  return out;
}

std::vector<Candidate> enumerate(const ir::Program& p, const Target& t) {
  std::vector<Candidate> out;
  const ProgramIndex index(p);
  for (auto& a : candidate_actions(p, t)) {
    Legality l = check(p, a, t, index);
    out.push_back({std::move(a), std::move(l)});
  }
  return out;
}

std::optional<Action> sample_legal_action(const ir::Program& p, const Target& t,
                                          std::mt19937_64& rng) {
  std::vector<std::vector<Action>> by_kind(kNumKinds);
  for (auto& a : candidate_actions(p, t)) by_kind[static_cast<int>(a.kind)].push_back(std::move(a));
  std::vector<int> kinds;
  for (int k = 0; k < kNumKinds; ++k)
    if (!by_kind[k].empty()) kinds.push_back(k);
  const ProgramIndex index(p);
  while (!kinds.empty()) {
    size_t ki = std::uniform_int_distribution<size_t>(0, kinds.size() - 1)(rng);
    auto& pool = by_kind[kinds[ki]];
    std::shuffle(pool.begin(), pool.end(), rng);
    for (const auto& a : pool)
      if (check(p, a, t, index).ok()) return a;
    kinds.erase(kinds.begin() + static_cast<long>(ki));
  }
  return std::nullopt;
}

std::vector<Action> legal_actions(const ir::Program& p, const Target& t) {
  std::vector<Action> out;
  for (auto& c : enumerate(p, t))
    if (c.legality.ok()) out.push_back(std::move(c.action));
  return out;
}

}  // namespace perfdojo::transforms
