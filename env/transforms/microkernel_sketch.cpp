#include "transforms/microkernel_sketch.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "ir/print.h"

#include "transforms/registry.h"
#include "transforms/transform.h"

namespace perfdojo::transforms {
namespace {

ir::Diagnostic error_at(const ir::SourceLoc& loc, std::string message) {
  return ir::Diagnostic{loc, std::move(message)};
}

Path cat(const Path& p, std::initializer_list<int> tail) {
  Path out = p;
  out.insert(out.end(), tail);
  return out;
}

const ir::Node* node_at(const ir::Program& p, const Path& path) {
  const std::vector<ir::NodePtr>* body = &p.body;
  const ir::Node* n = nullptr;
  for (int i : path) {
    if (i < 0 || i >= static_cast<int>(body->size())) return nullptr;
    n = (*body)[i].get();
    body = &n->body;
  }
  return n;
}

bool uses_iterator(const ir::Access& a, int depth) {
  for (const ir::Affine& f : a.index)
    if (f.coeff(depth) != 0) return true;
  return false;
}

void loads_of(const ir::Expr& e, std::vector<const ir::Access*>& out) {
  if (e.kind == ir::ExprKind::kLoad) out.push_back(&e.access);
  for (const auto& a : e.args) loads_of(*a, out);
}

// Whether f tiles an extent e into at least two blocks (tile_scope takes any such factor; the
// agent's action space offers a few of them).
bool proper_factor(int64_t f, int64_t e) { return f >= 2 && f < e && e % f == 0; }

// Applies actions to a program, recording them; a refused required step ends the expansion.
class Expander {
 public:
  Expander(const ir::Program& p, const Target& t, const ir::SourceLoc& loc)
      : cur_(p), target_(t), loc_(loc) {}

  // Applies `a`; on refusal records the diagnostic when `required`, and says false.
  bool step(const Action& a, bool required = true) {
    const Legality l = check(cur_, a, target_);
    if (!l.ok()) {
      if (required && errors_.empty())
        errors_.push_back(error_at(loc_, "micro-kernel sketch step " +
                                             std::to_string(trace_.size() + 1) + " (" +
                                             print_action(a) + ") refused: " + explain(a, l)));
      return false;
    }
    auto r = apply(cur_, a, target_);
    if (!r.ok()) {
      if (required && errors_.empty()) errors_ = r.errors();
      return false;
    }
    cur_ = std::move(r).value();
    trace_.push_back(a);
    return true;
  }
  bool failed() const { return !errors_.empty(); }
  const ir::Program& program() const { return cur_; }

  bool tile(const Path& p, int64_t f) { return step({Kind::kTileScope, p, "", "", f}); }
  bool swap(const Path& p) { return step({Kind::kSwapScopes, p, "", "", 0}); }
  bool temporary(const Path& p, const std::string& b, bool required) {
    return step({Kind::kCreateTemporary, p, b, "", 0}, required);
  }
  bool vectorize(const Path& p, int64_t w, bool required) {
    return step({Kind::kVectorize, p, "", "", w}, required);
  }
  bool unroll(const Path& p, int64_t f, bool required) {
    return step({Kind::kUnroll, p, "", "", f}, required);
  }

  ir::Result<SketchExpansion> result() && {
    if (!errors_.empty()) return errors_;
    return SketchExpansion{std::move(trace_), std::move(cur_)};
  }

 private:
  ir::Program cur_;
  Target target_;
  ir::SourceLoc loc_;
  std::vector<Action> trace_;
  std::vector<ir::Diagnostic> errors_;
};

// The innermost scope of the perfect chain starting at `p` in `prog`.
Path innermost_of_chain(const ir::Program& prog, Path p) {
  for (const ir::Node* n = node_at(prog, p); n && n->is_scope && n->body.size() == 1 &&
                                            n->body[0]->is_scope;
       n = n->body[0].get())
    p.push_back(0);
  return p;
}

}  // namespace

std::string print_params(const MicrokernelParams& m) {
  std::string s = "mr=" + std::to_string(m.mr) + " nr=" + std::to_string(m.nr) +
                  " kc=" + std::to_string(m.kc) + " mc=" + std::to_string(m.mc);
  if (m.nc) s += " nc=" + std::to_string(m.nc);
  return s + " lanes=" + std::to_string(m.lanes);
}

ir::Result<GemmNest> gemm_nest_at(const ir::Program& p, const Path& path) {
  const ir::Node* s0 = node_at(p, path);
  if (!s0) return std::vector<ir::Diagnostic>{error_at({}, "no node at " + print_path(path))};
  auto refuse = [&](const std::string& why) {
    return std::vector<ir::Diagnostic>{
        error_at(s0->loc, "the nest at " + print_path(path) + " is not GEMM-class: " + why)};
  };
  const ir::Node* chain[3] = {s0, nullptr, nullptr};
  for (int t = 0; t < 3; ++t) {
    if (!chain[t]->is_scope) return refuse("fewer than three scopes");
    if (chain[t]->annot != ir::Annot::kNone) return refuse("a scope is annotated");
    if (chain[t]->body.size() != 1) return refuse("the scopes are not perfectly nested");
    if (t < 2) chain[t + 1] = chain[t]->body[0].get();
  }
  const ir::Node* leaf = chain[2]->body[0].get();
  if (leaf->is_scope) return refuse("more than three scopes");
  const ir::Stmt& st = leaf->stmt;
  if (st.op != ir::Reduce::kAdd) return refuse("the statement is not a += reduction");
  if (st.lhs.index.empty()) return refuse("the target is a scalar");
  const int d = static_cast<int>(path.size()) - 1;
  GemmNest g;
  g.path = path;
  g.target = st.lhs.buffer;
  int ks = 0, js = 0;
  for (int t = 0; t < 3; ++t) {
    const int depth = d + t;
    if (!uses_iterator(st.lhs, depth)) {
      g.k = t;
      ++ks;
      continue;
    }
    bool only_last = true;
    for (size_t dim = 0; dim + 1 < st.lhs.index.size(); ++dim)
      only_last &= st.lhs.index[dim].coeff(depth) == 0;
    if (only_last && st.lhs.index.back().coeff(depth) == 1) {
      g.j = t;
      ++js;
    } else {
      g.i = t;
    }
  }
  if (ks != 1) return refuse("it needs exactly one reduction scope");
  if (js != 1 || g.i == g.j || g.i == g.k) return refuse("it needs one row and one unit-stride column iterator");
  if (st.lhs.index.back().coeff(d + g.i) != 0)
    return refuse("the row iterator is in the target's last dimension");
  g.m = chain[g.i]->extent;
  g.n = chain[g.j]->extent;
  g.kk = chain[g.k]->extent;
  return g;
}

std::vector<GemmNest> gemm_nests(const ir::Program& p) {
  std::vector<GemmNest> out;
  std::vector<std::pair<Path, const ir::Node*>> stack;
  for (int i = static_cast<int>(p.body.size()) - 1; i >= 0; --i) stack.push_back({{i}, p.body[i].get()});
  while (!stack.empty()) {
    auto [path, n] = stack.back();
    stack.pop_back();
    if (!n->is_scope) continue;
    if (auto g = gemm_nest_at(p, path); g.ok()) {
      out.push_back(*g);
      continue;
    }
    for (int i = static_cast<int>(n->body.size()) - 1; i >= 0; --i)
      stack.push_back({cat(path, {i}), n->body[i].get()});
  }
  return out;
}

ir::Result<SketchExpansion> expand_microkernel(const ir::Program& p, const Path& path,
                                                const MicrokernelParams& m, const Target& target) {
  auto nest = gemm_nest_at(p, path);
  if (!nest.ok()) return nest.errors();
  const GemmNest& g = *nest;
  const ir::SourceLoc loc = node_at(p, path)->loc;
  auto refuse = [&](const std::string& why) {
    return std::vector<ir::Diagnostic>{
        error_at(loc, "micro-kernel sketch " + print_params(m) + " at " + print_path(path) + ": " + why)};
  };
  if (!proper_factor(m.kc, g.kk)) return refuse("kc must properly divide the reduction extent " + std::to_string(g.kk));
  if (!proper_factor(m.mc, g.m)) return refuse("mc must properly divide the row extent " + std::to_string(g.m));
  if (!proper_factor(m.mr, m.mc)) return refuse("mr must properly divide mc");
  const int64_t cols = m.nc ? m.nc : g.n;
  if (m.nc && !proper_factor(m.nc, g.n)) return refuse("nc must properly divide the column extent " + std::to_string(g.n));
  if (!proper_factor(m.nr, cols)) return refuse("nr must properly divide the column extent " + std::to_string(cols));
  if (m.lanes < 2 || m.nr % m.lanes != 0) return refuse("nr must be a multiple of the lanes");

  // The loads of the statement, by the roles they use: B-like panels (k and j, not i) are packed
  // at Ko, A-like blocks (i and k, not j) at Mo.
  const int d = static_cast<int>(path.size()) - 1;
  const ir::Node* leaf = node_at(p, cat(path, {0, 0, 0}));
  std::vector<const ir::Access*> loads;
  loads_of(*leaf->stmt.rhs, loads);
  std::vector<std::string> b_like, a_like;
  for (const ir::Access* a : loads) {
    if (a->buffer == g.target) continue;
    const bool ui = uses_iterator(*a, d + g.i), uj = uses_iterator(*a, d + g.j),
               uk = uses_iterator(*a, d + g.k);
    if (!uk || ui == uj) continue;
    auto& list = uj ? b_like : a_like;
    if (std::find(list.begin(), list.end(), a->buffer) == list.end()) list.push_back(a->buffer);
  }

  Expander x(p, target, loc);
  // order: i j k, by adjacent swaps
  int order[3];  // role at each position: 0 = i, 1 = j, 2 = k
  order[g.i] = 0;
  order[g.j] = 1;
  order[g.k] = 2;
  for (int pass = 0; pass < 2; ++pass)
    for (int q = 0; q < 2; ++q)
      if (order[q] > order[q + 1]) {
        Path at = path;
        for (int z = 0; z < q; ++z) at.push_back(0);
        if (!x.swap(at)) return std::move(x).result();
        std::swap(order[q], order[q + 1]);
      }
  // tile: Ko i j Ki, [Nc Ko i Nn Ki], Ko Mo Mi j Ki, Ko Mo Mi No Ni Ki, Ko Mo Mio Mii No Ni Ki
  if (!x.tile(cat(path, {0, 0}), m.kc) || !x.swap(cat(path, {0})) || !x.swap(path))
    return std::move(x).result();
  Path q = path;  // Ko
  if (m.nc) {
    if (!x.tile(cat(path, {0, 0}), m.nc) || !x.swap(cat(path, {0})) || !x.swap(path))
      return std::move(x).result();
    q = cat(path, {0});
  }
  if (!x.tile(cat(q, {0}), m.mc) || !x.tile(cat(q, {0, 0, 0}), m.nr) || !x.tile(cat(q, {0, 0}), m.mr))
    return std::move(x).result();
  // Ko Mo No Mio Ki Mii Ni
  if (!x.swap(cat(q, {0, 0, 0})) || !x.swap(cat(q, {0, 0})) || !x.swap(cat(q, {0, 0, 0, 0, 0})) ||
      !x.swap(cat(q, {0, 0, 0, 0})))
    return std::move(x).result();
  // pack
  int nb = 0, na = 0;
  for (const std::string& b : b_like) nb += x.temporary(q, b, false);
  for (const std::string& a : a_like) na += x.temporary(cat(q, {nb}), a, false);
  // register tile: Mio's body becomes copy-in, Ki, copy-out
  const Path mio = cat(q, {nb, na, 0});
  if (!x.temporary(mio, g.target, true)) return std::move(x).result();
  for (const Path& nest_path : {cat(mio, {0}), cat(mio, {1, 0}), cat(mio, {2})}) {
    if (!x.vectorize(cat(nest_path, {0}), m.lanes, true)) return std::move(x).result();
    if (m.nr / m.lanes > 1 && !x.unroll(cat(nest_path, {0}), m.nr / m.lanes, true))
      return std::move(x).result();
    if (!x.unroll(nest_path, m.mr, true)) return std::move(x).result();
  }
  // two k steps per loop iteration: fewer loop instructions between the FMAs (optional; measured
  // +0.5% on matmul-1024 with 8 x 32 on AVX-512, four steps lose 5% to code size)
  if (m.kc % 2 == 0) x.unroll(cat(mio, {1}), 2, false);
  // the panel copies' innermost loops, where unit-stride (optional)
  for (int b = 0; b < nb; ++b) {
    const Path inner = innermost_of_chain(x.program(), cat(q, {b}));
    const ir::Node* n = node_at(x.program(), inner);
    if (n && n->extent % m.lanes == 0) x.vectorize(inner, m.lanes, false);
  }
  return std::move(x).result();
}

namespace {

// The paths of every statement of `p`, in program order.
void statement_paths(const std::vector<ir::NodePtr>& body, Path& at, std::vector<Path>& out) {
  for (size_t i = 0; i < body.size(); ++i) {
    at.push_back(static_cast<int>(i));
    if (body[i]->is_scope)
      statement_paths(body[i]->body, at, out);
    else
      out.push_back(at);
    at.pop_back();
  }
}

// `p` with the node at `path` replaced by `n`.
ir::Program with_node(const ir::Program& p, const Path& path, ir::NodePtr n) {
  ir::Program q = p;
  std::function<std::vector<ir::NodePtr>(const std::vector<ir::NodePtr>&, size_t)> walk =
      [&](const std::vector<ir::NodePtr>& body, size_t depth) {
        std::vector<ir::NodePtr> out = body;
        const ir::Node& old = *body[path[depth]];
        if (depth + 1 == path.size())
          out[path[depth]] = n;
        else
          out[path[depth]] = ir::Node::scope(old.extent, old.extent_name, old.annot,
                                             walk(old.body, depth + 1), old.loc);
        return out;
      };
  q.body = walk(p.body, 0);
  return q;
}

// For the statement at `s` (depth >= 3): the path of the outermost of its three innermost
// scopes when those three, alone, would be a GEMM-class nest that is not perfect in `p`.
std::optional<Path> hidden_gemm(const ir::Program& p, const Path& s) {
  if (s.size() < 4) return std::nullopt;
  const Path a(s.begin(), s.end() - 3);
  const ir::Node* na = node_at(p, a);
  const ir::Node* nb = node_at(p, Path(s.begin(), s.end() - 2));
  const ir::Node* nc = node_at(p, Path(s.begin(), s.end() - 1));
  const ir::Node* st = node_at(p, s);
  if (!na || !nb || !nc || !st || st->is_scope || st->stmt.op != ir::Reduce::kAdd) return std::nullopt;
  if (na->body.size() == 1 && nb->body.size() == 1 && nc->body.size() == 1) return std::nullopt;
  // The chain alone, its statement shared (immutable).
  const ir::NodePtr& leaf = nc->body[s.back()];
  const ir::NodePtr chain = ir::Node::scope(
      na->extent, na->extent_name, na->annot,
      {ir::Node::scope(nb->extent, nb->extent_name, nb->annot,
                       {ir::Node::scope(nc->extent, nc->extent_name, nc->annot, {leaf}, nc->loc)},
                       nb->loc)},
      na->loc);
  if (!gemm_nest_at(with_node(p, a, chain), a).ok()) return std::nullopt;
  return a;
}

}  // namespace

SketchExpansion isolate_gemm_nests(const ir::Program& p, const Target& target) {
  Expander x(p, target, {});
  std::set<std::string> given_up;  // statements whose fission was refused, by text
  for (int round = 0; round < 32; ++round) {
    std::vector<Path> stmts;
    Path at;
    statement_paths(x.program().body, at, stmts);
    bool moved = false;
    for (const Path& s : stmts) {
      const auto a = hidden_gemm(x.program(), s);
      if (!a) continue;
      const std::string text = ir::print_stmt(node_at(x.program(), s)->stmt);
      if (given_up.count(text)) continue;
      // Innermost first: the chain's child at each level of C, B, A gets a scope of its own,
      // split after it, then before it.
      for (size_t level = s.size() - 1; level > a->size() - 1 && !moved; --level) {
        const Path scope(s.begin(), s.begin() + level);
        const int child = s[level];
        const ir::Node* n = node_at(x.program(), scope);
        if (child + 1 < static_cast<int>(n->body.size())) {
          if (!x.step({Kind::kSplitScope, scope, "", "", child + 1}, false)) break;
          moved = true;
        } else if (child > 0) {
          if (!x.step({Kind::kSplitScope, scope, "", "", child}, false)) break;
          moved = true;
        }
      }
      if (moved) break;  // paths changed: scan again
      given_up.insert(text);
    }
    if (!moved) break;
  }
  return std::move(x).result().value();
}

namespace {

// The proper divisors of e in [lo, hi], increasing.
std::vector<int64_t> divisors_between(int64_t e, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (int64_t d = std::max<int64_t>(lo, 2); d <= std::min(hi, e - 1); ++d)
    if (e % d == 0) out.push_back(d);
  return out;
}

// Of `options`, the one nearest `want` (the smaller on a tie) not in `taken`; 0 when none.
int64_t nearest(const std::vector<int64_t>& options, int64_t want, const std::vector<int64_t>& taken) {
  int64_t best = 0;
  for (int64_t o : options) {
    if (std::find(taken.begin(), taken.end(), o) != taken.end()) continue;
    if (best == 0 || std::llabs(o - want) < std::llabs(best - want)) best = o;
  }
  return best;
}

}  // namespace

std::vector<MicrokernelParams> microkernel_candidates(const GemmNest& g, const Target& target) {
  std::vector<MicrokernelParams> out;
  if (target.vector_widths.empty()) return out;
  const int64_t lanes = target.vector_widths.front();
  // Register tiles: mr x nr floats in mr * nr / lanes accumulators, leaving registers for the
  // nr / lanes loads of B and a broadcast of A (32 vector registers with 16 lanes, 16 with 8):
  // 16 zmm (8 x 32, 4 x 64) or 12 ymm (6 x 16, where 6 divides the rows) / 8 ymm (4 x 16).
  std::vector<std::pair<int64_t, int64_t>> tiles =
      lanes >= 16 ? std::vector<std::pair<int64_t, int64_t>>{{8, 2 * lanes}, {4, 4 * lanes}, {16, lanes}}
                  : std::vector<std::pair<int64_t, int64_t>>{{6, 2 * lanes}, {4, 2 * lanes}, {8, lanes}, {2, 4 * lanes}};
  // Panels: kc x nr of B in L1 next to the mr x kc of A (kc near 256, then near 128); mc x kc
  // of A in L2 (mc near 64, then near 128). Any divisor: 1000 takes kc 250, mc 40 or 50.
  const std::vector<int64_t> kcs = divisors_between(g.kk, 8, 256);
  for (const auto& [mr, nr] : tiles) {
    if (!proper_factor(nr, g.n)) continue;
    std::vector<int64_t> mcs;
    for (int64_t d : divisors_between(g.m, mr + 1, 256))
      if (d % mr == 0) mcs.push_back(d);
    const int64_t kc1 = nearest(kcs, 256, {}), kc2 = nearest(kcs, 128, {kc1});
    const int64_t mc1 = nearest(mcs, 64, {}), mc2 = nearest(mcs, 128, {mc1});
    if (!kc1 || !mc1) continue;
    out.push_back({mr, nr, kc1, mc1, 0, lanes});
    if (mc2) out.push_back({mr, nr, kc1, mc2, 0, lanes});
    else if (kc2) out.push_back({mr, nr, kc2, mc1, 0, lanes});
  }
  return out;
}

}  // namespace perfdojo::transforms
