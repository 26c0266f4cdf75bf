#include "transforms/microkernel_sketch.h"

#include <algorithm>
#include <optional>
#include <set>

#include "ir/print.h"
#include "transforms/analysis.h"
#include "transforms/dot_sketch.h"
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

// Whether `buffer` holds bf16 or f16 (computed in f32): the tile reads it only packed and
// widened (widen_buffer).
bool narrow_float(const ir::Program& p, const std::string& buffer) {
  const ir::BufferDecl* d = find_decl(p, buffer);
  return d && ir::is_narrow(d->dtype) && ir::compute_type(d->dtype) == ir::DType::kF32;
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

// Applies actions to a program, recording them; a refused required step ends the expansion.
class Expander {
 public:
  Expander(const ir::Program& p, const Target& t, const ir::SourceLoc& loc)
      : cur_(p), target_(t), loc_(loc) {}

  // Applies `a`; on refusal records the diagnostic when `required`, and says false.
  bool step(const Action& a, bool required = true) {
    auto r = apply(cur_, a, target_);  // checks first; a refusal explains itself
    if (!r.ok()) {
      if (required && errors_.empty())
        errors_.push_back(
            error_at(loc_, "micro-kernel sketch step " + std::to_string(trace_.size() + 1) + " (" +
                               print_action(a) + ") refused: " + r.errors()[0].message));
      return false;
    }
    cur_ = std::move(r).value();
    trace_.push_back(a);
    return true;
  }
  bool failed() const { return !errors_.empty(); }
  const ir::Program& program() const { return cur_; }
  const Target& target() const { return target_; }
  // Ends the expansion with `why` (unless an earlier step already did).
  void fail(const std::string& why) {
    if (errors_.empty()) errors_.push_back(error_at(loc_, "micro-kernel sketch: " + why));
  }

  bool tile(const Path& p, int64_t f) { return step({Kind::kTileScope, p, "", "", f}); }
  bool swap(const Path& p) { return step({Kind::kSwapScopes, p, "", "", 0}); }
  bool temporary(const Path& p, const std::string& b, bool required) {
    return step({Kind::kCreateTemporary, p, b, "", 0}, required);
  }
  // A packing create_temporary (optional): the number of copy nests it put at the top of the
  // scope's body, 0 when refused (more than one when the scope reads `b` through several
  // indices: C = A A^T packs A's row block and its column panel apart).
  // A panel packed from a narrow buffer (bf16, f16) is widened to f32 as it is packed
  // (widen_buffer), so the tile reads it with plain vector loads.
  int pack(const Path& p, const std::string& b) {
    const size_t before = node_at(cur_, p)->body.size();
    const size_t buffers = cur_.buffers.size();
    if (!temporary(p, b, false)) return 0;
    const int nests = static_cast<int>(node_at(cur_, p)->body.size() - before);
    for (size_t i = buffers; i < cur_.buffers.size(); ++i)
      if (const std::string name = cur_.buffers[i].name; narrow_float(cur_, name))
        step({Kind::kWidenBuffer, {}, name, "", 0}, false);
    return nests;
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
  for (const ir::Node* n = node_at(prog, p);
       n && n->is_scope && n->body.size() == 1 && n->body[0]->is_scope; n = n->body[0].get())
    p.push_back(0);
  return p;
}

}  // namespace

std::string print_params(const MicrokernelParams& m) {
  std::string s = "mr=" + std::to_string(m.mr) + " nr=" + std::to_string(m.nr) +
                  " kc=" + std::to_string(m.kc) + " mc=" + std::to_string(m.mc);
  if (m.nc) s += " nc=" + std::to_string(m.nc);
  s += " lanes=" + std::to_string(m.lanes);
  if (m.transposed) s += " transposed";
  if (m.dot) s += " dot";
  return m.rows_outer ? s + " rows_outer" : s;
}

ir::Result<GemmNest> gemm_nest_at(const ir::Program& p, const Path& path, bool transposed) {
  const ir::Node* s0 = node_at(p, path);
  if (!s0) return std::vector<ir::Diagnostic>{error_at({}, "no node at " + print_path(path))};
  auto refuse = [&](const std::string& why) {
    return std::vector<ir::Diagnostic>{
        error_at(s0->loc, "the nest at " + print_path(path) + " is not GEMM-class: " + why)};
  };
  std::vector<const ir::Node*> chain;
  const ir::Node* n = s0;
  for (; n->is_scope; n = n->body[0].get()) {
    if (n->annot != ir::Annot::kNone) return refuse("a scope is annotated");
    if (n->body.size() != 1) return refuse("the scopes are not perfectly nested");
    chain.push_back(n);
  }
  if (chain.size() < 3) return refuse("fewer than three scopes");
  const ir::Stmt& st = n->stmt;
  if (st.op != ir::Reduce::kAdd) return refuse("the statement is not a += reduction");
  if (st.lhs.index.empty()) return refuse("the target is a scalar");
  const int d = static_cast<int>(path.size()) - 1;
  GemmNest g;
  g.path = path;
  g.scopes = static_cast<int>(chain.size());
  g.target = st.lhs.buffer;
  if (const ir::BufferDecl* b = p.find_buffer(g.target)) g.dtype = b->dtype;
  std::vector<const ir::Access*> loads;
  loads_of(*st.rhs, loads);
  std::vector<int> js, rows, reds;
  for (int t = 0; t < g.scopes; ++t) {
    const int depth = d + t;
    if (!uses_iterator(st.lhs, depth)) {
      reds.push_back(t);
      continue;
    }
    bool only_last = true;
    for (size_t dim = 0; dim + 1 < st.lhs.index.size(); ++dim)
      only_last &= st.lhs.index[dim].coeff(depth) == 0;
    if (only_last && st.lhs.index.back().coeff(depth) == 1)
      js.push_back(t);
    else if (st.lhs.index.back().coeff(depth) == 0)
      rows.push_back(t);
    else
      g.batch.push_back(t);  // in the last dimension with another stride: leave it outside
  }
  if (reds.empty()) return refuse("no reduction scope (every iterator indexes the target)");
  if (js.size() != 1)
    return refuse("it needs one unit-stride column iterator in the target's last dimension only");
  if (rows.empty()) return refuse("no row iterator outside the target's last dimension");
  g.j = js[0];
  // The row: used by an operand that does not use j (A's rows, conv's output channels), largest.
  auto a_like_uses = [&](int t) {
    for (const ir::Access* a : loads)
      if (a->buffer != g.target && uses_iterator(*a, d + t) && !uses_iterator(*a, d + g.j))
        return true;
    return false;
  };
  g.i = -1;
  for (int t : rows)
    if (g.i < 0 || (a_like_uses(t) && !a_like_uses(g.i)) ||
        (a_like_uses(t) == a_like_uses(g.i) && chain[t]->extent > chain[g.i]->extent))
      g.i = t;
  for (int t : rows)
    if (t != g.i) g.batch.push_back(t);
  std::sort(g.batch.begin(), g.batch.end());
  // k: the outermost reduction scope, the others inside it in their order. Two scopes of one
  // += reduction swapped would add its terms in another order (a different float sum), which
  // swap_scopes refuses: channels-last conv2d's R S C keeps R as k, where the largest, C, could
  // never be raised above R and S.
  g.k = reds[0];
  for (int t : reds)
    if (t != g.k) g.reductions.push_back(t);
  for (int t : g.reductions) g.inner *= chain[t]->extent;
  g.operands_unit_k = true;
  for (const ir::Access* a : loads) {
    if (a->buffer == g.target || a->index.empty()) continue;
    for (size_t dim = 0; dim + 1 < a->index.size(); ++dim)
      g.operands_unit_k &= a->index[dim].coeff(d + g.k) == 0;
    g.operands_unit_k &= a->index.back().coeff(d + g.k) == 1;
  }
  g.transposable = a_like_uses(g.i);
  if (transposed) {
    if (!g.transposable)
      return refuse(
          "no operand uses the row iterator without the column one (nothing to load as "
          "vectors across the transposed tile)");
    std::swap(g.i, g.j);
    g.transposed = true;
  }
  g.m = chain[g.i]->extent;
  g.n = chain[g.j]->extent;
  g.kk = chain[g.k]->extent;
  return g;
}

std::vector<GemmNest> gemm_nests(const ir::Program& p) {
  std::vector<GemmNest> out;
  std::vector<std::pair<Path, const ir::Node*>> stack;
  for (int i = static_cast<int>(p.body.size()) - 1; i >= 0; --i)
    stack.push_back({{i}, p.body[i].get()});
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

namespace {

// The scopes of the nest the sketch is reshaping, outermost first, by role: the three roles
// i, j, k before tiling, then the BLIS levels. Paths follow from the chain: below each scope the
// chain continues at child `child[q]` (0, or past the packed copies inserted before it).
enum class Level { kI, kJ, kK, kNc, kNn, kKo, kKi, kMo, kMi, kNo, kNi, kMio, kMii, kBatch, kRed };

class Chain {
 public:
  Chain(Expander& x, Path top) : x_(x), top_(std::move(top)) {}
  // The scopes of `g` in x's program, each by its role.
  Chain(Expander& x, const GemmNest& g) : Chain(x, g.path) {
    const ir::Node* n = node_at(x.program(), g.path);
    for (int t = 0; t < g.scopes; ++t, n = n->body[0].get()) {
      const bool batch = std::find(g.batch.begin(), g.batch.end(), t) != g.batch.end();
      const Level l = t == g.i   ? Level::kI
                      : t == g.j ? Level::kJ
                      : t == g.k ? Level::kK
                      : batch    ? Level::kBatch
                                 : Level::kRed;
      push(l, n->extent, t);
    }
  }
  // `id`: the scope's position in the original nest (batch and reduction scopes are raised by
  // it), -1 for scopes tiling makes.
  void push(Level l, int64_t extent, int id = -1) {
    levels_.push_back(l);
    extents_.push_back(extent);
    child_.push_back(0);
    ids_.push_back(id);
  }
  int pos_of_id(int id) const {
    return static_cast<int>(std::find(ids_.begin(), ids_.end(), id) - ids_.begin());
  }
  bool raise_id(int id, int t) {
    while (pos_of_id(id) > t)
      if (!swap(pos_of_id(id) - 1)) return false;
    return true;
  }
  int size() const { return static_cast<int>(levels_.size()); }
  bool has(Level l) const { return std::find(levels_.begin(), levels_.end(), l) != levels_.end(); }
  int pos(Level l) const {
    return static_cast<int>(std::find(levels_.begin(), levels_.end(), l) - levels_.begin());
  }
  int64_t extent(Level l) const { return extents_[pos(l)]; }
  Path path(int q) const {
    Path p = top_;
    for (int r = 0; r < q; ++r) p.push_back(child_[r]);
    return p;
  }
  Path path(Level l) const { return path(pos(l)); }
  int& child(int q) { return child_[q]; }
  void rename(Level from, Level to) { levels_[pos(from)] = to; }
  // swap_scopes of the chain's scopes q and q + 1.
  bool swap(int q) {
    if (!x_.swap(path(q))) return false;
    std::swap(levels_[q], levels_[q + 1]);
    std::swap(extents_[q], extents_[q + 1]);
    std::swap(ids_[q], ids_[q + 1]);
    return true;
  }
  // Moves `l` up to position t by adjacent swaps.
  bool raise(Level l, int t) {
    while (pos(l) > t)
      if (!swap(pos(l) - 1)) return false;
    return true;
  }
  // tile_scope of `l` by f: `outer` (extent / f) around `inner` (f).
  bool tile(Level l, int64_t f, Level outer, Level inner) {
    const int q = pos(l);
    if (!x_.tile(path(q), f)) return false;
    const int64_t e = extents_[q];
    levels_[q] = outer;
    extents_[q] = e / f;
    levels_.insert(levels_.begin() + q + 1, inner);
    extents_.insert(extents_.begin() + q + 1, f);
    child_.insert(child_.begin() + q + 1, 0);
    ids_[q] = -1;
    ids_.insert(ids_.begin() + q + 1, -1);
    return true;
  }

 private:
  Expander& x_;
  Path top_;
  std::vector<Level> levels_;
  std::vector<int64_t> extents_;
  std::vector<int> child_;
  std::vector<int> ids_;
};

// Whether the access moves by one element per step of the iterator at `depth` (in the last
// dimension only, coefficient 1): the tile loads it as whole vectors.
bool unit_stride(const ir::Access& a, int depth) {
  for (size_t dim = 0; dim + 1 < a.index.size(); ++dim)
    if (a.index[dim].coeff(depth) != 0) return false;
  return !a.index.empty() && a.index.back().coeff(depth) == 1;
}

// The loads of the statement by the roles they use: k and j, not i (B-like panels, packed at
// Ko; `b_strided`: those the tile cannot load as vectors, not unit-stride in j or of a narrow
// type, which must be packed even without Ko); i and k, not j (A-like blocks, packed at Mo).
void operand_roles(const ir::Program& p, const GemmNest& g, std::vector<std::string>& b_like,
                   std::vector<std::string>& b_strided, std::vector<std::string>& a_like) {
  const int d = static_cast<int>(g.path.size()) - 1;
  const ir::Node* leaf = node_at(p, g.path);
  while (leaf && leaf->is_scope) leaf = leaf->body[0].get();
  std::vector<const ir::Access*> loads;
  loads_of(*leaf->stmt.rhs, loads);
  for (const ir::Access* a : loads) {
    if (a->buffer == g.target) continue;
    const bool ui = uses_iterator(*a, d + g.i), uj = uses_iterator(*a, d + g.j),
               uk = uses_iterator(*a, d + g.k);
    if (!uk || ui == uj) continue;
    auto& list = uj ? b_like : a_like;
    if (std::find(list.begin(), list.end(), a->buffer) == list.end()) list.push_back(a->buffer);
    // The tile loads neither a strided panel nor a bf16 or f16 one as vectors: packed (and
    // widened) first.
    if (uj && (!unit_stride(*a, d + g.j) || narrow_float(p, a->buffer)) &&
        std::find(b_strided.begin(), b_strided.end(), a->buffer) == b_strided.end())
      b_strided.push_back(a->buffer);
  }
}

// The A-like operands (row block packed at Mo) by the names the nest's statement loads now:
// `a_like` as found before the sketch, unless packing the B-like panels renamed one (C = A A^T,
// whose A is both: each of its indices got a temporary). Then they are found again by role in
// the tiled nest: the loads that use a row level and a reduction level, no column level.
std::vector<std::string> current_a_like(const ir::Program& p, const Chain& c,
                                        const std::vector<std::string>& a_like) {
  const ir::Node* leaf = node_at(p, c.path(c.size() - 1));
  while (leaf && leaf->is_scope) leaf = leaf->body.empty() ? nullptr : leaf->body[0].get();
  if (!leaf) return a_like;
  std::vector<const ir::Access*> loads;
  loads_of(*leaf->stmt.rhs, loads);
  auto loaded = [&](const std::string& b) {
    return std::any_of(loads.begin(), loads.end(),
                       [&](const ir::Access* a) { return a->buffer == b; });
  };
  if (std::all_of(a_like.begin(), a_like.end(), loaded)) return a_like;
  auto uses_level = [&](const ir::Access& a, std::initializer_list<Level> levels) {
    for (Level l : levels)
      if (c.has(l) && uses_iterator(a, static_cast<int>(c.path(l).size()) - 1)) return true;
    return false;
  };
  std::vector<std::string> out;
  for (const ir::Access* a : loads) {
    if (a->buffer == leaf->stmt.lhs.buffer ||
        std::find(out.begin(), out.end(), a->buffer) != out.end())
      continue;
    if (uses_level(*a, {Level::kMo, Level::kMi, Level::kMio, Level::kMii}) &&
        uses_level(*a, {Level::kKo, Level::kKi}) &&
        !uses_level(*a, {Level::kNc, Level::kNn, Level::kNo, Level::kNi}))
      out.push_back(a->buffer);
  }
  return out;
}

bool is_width(const Target& t, int64_t w) {
  return std::find(t.vector_widths.begin(), t.vector_widths.end(), w) != t.vector_widths.end();
}

// The sketch on the nest `g` of x's program with sizes that divide (a level equal to its whole
// extent is left out: no Ko when kc = K, no Mo when mc = M, no No when nr = N, no Mio when
// mr = mc). Steps go through `x`.
void expand_into(Expander& x, const GemmNest& g, const MicrokernelParams& m) {
  std::vector<std::string> b_like, b_strided, a_like;
  operand_roles(x.program(), g, b_like, b_strided, a_like);
  Chain c(x, g);
  // order: batch.. i j k reductions..
  const int nbatch = static_cast<int>(g.batch.size());
  {
    int t = 0;
    for (int b : g.batch)
      if (!c.raise_id(b, t++)) return;
    if (!c.raise(Level::kI, t++) || !c.raise(Level::kJ, t++) || !c.raise(Level::kK, t++)) return;
    for (int r : g.reductions)
      if (!c.raise_id(r, t++)) return;
  }
  // K in blocks of kc, the block loop outermost
  if (m.kc < g.kk) {
    if (!c.tile(Level::kK, m.kc, Level::kKo, Level::kKi) || !c.raise(Level::kKo, nbatch)) return;
  } else {
    c.rename(Level::kK, Level::kKi);
  }
  Level j = Level::kJ;
  if (m.nc > 0 && m.nc < g.n) {
    if (!c.tile(Level::kJ, m.nc, Level::kNc, Level::kNn) || !c.raise(Level::kNc, nbatch)) return;
    j = Level::kNn;
  }
  if (m.mc < g.m) {
    if (!c.tile(Level::kI, m.mc, Level::kMo, Level::kMi)) return;
  } else {
    c.rename(Level::kI, Level::kMi);
  }
  if (m.nr < c.extent(j)) {
    if (!c.tile(j, m.nr, Level::kNo, Level::kNi)) return;
  } else {
    c.rename(j, Level::kNi);
  }
  if (m.mr < c.extent(Level::kMi)) {
    if (!c.tile(Level::kMi, m.mr, Level::kMio, Level::kMii)) return;
  } else {
    c.rename(Level::kMi, Level::kMii);
  }
  // batch.. [Nc] Ko Mo No Mio Ki reductions.. Mii Ni, without the levels left out (rows_outer:
  // Mio No)
  int t = nbatch;
  const Level panels[2] = {m.rows_outer ? Level::kMio : Level::kNo,
                           m.rows_outer ? Level::kNo : Level::kMio};
  for (Level l : {Level::kNc, Level::kKo, Level::kMo, panels[0], panels[1], Level::kKi})
    if (c.has(l) && !c.raise(l, t++)) return;
  for (int r : g.reductions)
    if (!c.raise_id(r, t++)) return;
  for (Level l : {Level::kMii, Level::kNi})
    if (c.has(l) && !c.raise(l, t++)) return;
  // pack: B-like panels at Ko; without Ko (kc = K), only those the tile could not load as
  // vectors (attention's K[{j},{k}]), at the outermost scope above Ki, once for all of k
  const int b_home = c.has(Level::kKo) ? c.pos(Level::kKo) : c.pos(Level::kKi) > 0 ? 0 : -1;
  int nb = 0;
  if (b_home >= 0) {
    for (const std::string& b : c.has(Level::kKo) ? b_like : b_strided)
      nb += x.pack(c.path(b_home), b);
    c.child(b_home) = nb;
  }
  // (without Mo or Ko, at the outermost batch scope: conv2d's filters once per image)
  auto narrow = [&](const std::string& b) { return narrow_float(x.program(), b); };
  // (a narrow block with none of them: at the outermost scope, once, as it is widened)
  const bool narrow_a = std::any_of(a_like.begin(), a_like.end(), narrow);
  const int a_home = c.has(Level::kMo)                                   ? c.pos(Level::kMo)
                     : c.has(Level::kKo)                                 ? c.pos(Level::kKo)
                     : nbatch > 0 || (narrow_a && c.pos(Level::kKi) > 0) ? 0
                                                                         : -1;
  // A block packed at Mo or Ko pays only when more than one column panel reads it: with the
  // columns in one panel (a narrow nest, or a remainder split off) each element is read once
  // and the copy is pure traffic (4096 x 20 x 256: 0.65 ms packed, 0.51 read in place).
  // A bf16 or f16 block is packed, widened, in any case: the tile broadcasts only f32.
  const bool one_panel = !c.has(Level::kNo) && !c.has(Level::kNc);
  const bool packs_all = !(one_panel && (c.has(Level::kMo) || c.has(Level::kKo)));
  if (a_home >= 0 && !g.transposed) {
    int na = 0;
    for (const std::string& a : current_a_like(x.program(), c, a_like))
      if (packs_all || narrow(a)) na += x.pack(c.path(a_home), a);
    c.child(a_home) += na;
  }
  // the register tile at the inner panel loop (Mio, or No with rows_outer), else at the scope
  // just above Ki
  const int tile_pos = c.has(panels[1]) ? c.pos(panels[1]) : c.pos(Level::kKi) - 1;
  if (tile_pos < 0) {
    x.fail("the nest is too small for a register tile (no scope above the reduction)");
    return;
  }
  const Path tile = c.path(tile_pos);
  if (!x.temporary(tile, g.target, true)) return;
  // The tile scope's body: the copy-in, what it held (packed copies, when it is also the scope
  // packing happened at, then the Ki chain), the copy-out.
  const int compute = c.child(tile_pos) + 1;
  const int copy_out = static_cast<int>(node_at(x.program(), tile)->body.size()) - 1;
  const int64_t mr = c.extent(Level::kMii), nr = c.extent(Level::kNi);
  const int64_t lanes = nr >= m.lanes ? m.lanes : is_width(x.target(), nr) ? nr : 0;
  // The update nest's Mii: below Ki and the other reductions.
  Path update = cat(tile, {compute});
  update.insert(update.end(), 1 + g.reductions.size(), 0);
  for (const Path& nest : {cat(tile, {0}), update, cat(tile, {copy_out})}) {
    if (g.transposed && nest != update) {  // element by element: the target is strided in j
      if ((nr > 1 && !x.unroll(cat(nest, {0}), nr, true)) || (mr > 1 && !x.unroll(nest, mr, true)))
        return;
      continue;
    }
    if (lanes) {
      if (!x.vectorize(cat(nest, {0}), lanes, true)) return;
      if (nr / lanes > 1 && !x.unroll(cat(nest, {0}), nr / lanes, true)) return;
    }
    if (mr > 1 && !x.unroll(nest, mr, true)) return;
  }
  // two k steps per loop iteration: fewer loop instructions between the FMAs (optional; measured
  // +0.5% on matmul-1024 with 8 x 32 on AVX-512, four steps lose 5% to code size)
  if (g.reductions.empty() && c.extent(Level::kKi) % 2 == 0)
    x.unroll(cat(tile, {compute}), 2, false);
  // the panel copies' innermost loops, where unit-stride (optional)
  if (b_home >= 0)
    for (int b = 0; b < nb; ++b) {
      const Path inner = innermost_of_chain(x.program(), cat(c.path(b_home), {b}));
      const ir::Node* n = node_at(x.program(), inner);
      if (n && n->extent % m.lanes == 0) x.vectorize(inner, m.lanes, false);
    }
}

// The dot form (MicrokernelParams::dot) on the nest `g`: batch.. No Ko Ni:unroll I:unroll
// Ki:vec, with Ki `lanes` wide, Ni = nr (left out when 1; No left out when nr = n).
void expand_dot_into(Expander& x, const GemmNest& g, const MicrokernelParams& m) {
  Chain c(x, g);
  const int nbatch = static_cast<int>(g.batch.size());
  int t = 0;
  for (int b : g.batch)
    if (!c.raise_id(b, t++)) return;
  if (!c.raise(Level::kJ, t) || !c.raise(Level::kK, t + 1) || !c.raise(Level::kI, t + 2)) return;
  // batch.. J K I: k in chunks of the lanes, the rows inside the chunk loop
  if (!c.tile(Level::kK, m.lanes, Level::kKo, Level::kKi) || !c.raise(Level::kI, c.pos(Level::kKi)))
    return;
  // batch.. J Ko I Ki: nr columns inside the chunk loop
  if (m.nr > 1 && m.nr < g.n) {
    if (!c.tile(Level::kJ, m.nr, Level::kNo, Level::kNi) || !c.raise(Level::kKo, nbatch + 1))
      return;
  } else if (m.nr == g.n) {
    c.rename(Level::kJ, Level::kNi);
    if (!c.raise(Level::kKo, nbatch)) return;
  }
  if (c.has(Level::kNi) && c.extent(Level::kNi) > 1 &&
      !x.unroll(c.path(Level::kNi), c.extent(Level::kNi), true))
    return;
  if (g.m > 1 && !x.unroll(c.path(Level::kI), g.m, true)) return;
  x.vectorize(c.path(Level::kKi), m.lanes, true);
}

// The divisor of e nearest `want` within [lo, e] (the smaller on a tie).
int64_t divisor_near(int64_t e, int64_t want, int64_t lo = 1) {
  int64_t best = e;
  for (int64_t d = std::max<int64_t>(lo, 1); d <= e; ++d)
    if (e % d == 0 && std::llabs(d - want) < std::llabs(best - want)) best = d;
  return best;
}

// kc for a reduction of kk aiming at `want`: the divisor nearest it, but a reduction of at most
// two blocks is taken whole, so the tile's C is loaded and stored once, not once per block (K =
// 512 on a Zen 4 core: matmul 512 x 768 3.77 ms against 4.04-4.12; matmul-skinny, geglu-mlp,
// attention-bias and a 384-cubed f64 GEMM 2-7% faster, the others even).
int64_t fitted_kc(int64_t kk, int64_t want) {
  return kk <= 2 * want ? kk : divisor_near(kk, want, 8);
}

// The fitted sketch on the nest at `path` of x's program (see expand_microkernel_fitted).
void fit_into(Expander& x, const Path& path, const MicrokernelParams& want, int depth) {
  auto g = gemm_nest_at(x.program(), path, want.transposed);
  if (!g.ok()) {
    x.fail(g.error_text());
    return;
  }
  // A remainder: bring the role's scope to the top of the nest, split it by f, fit both parts,
  // the remainder first (splits inside it add siblings after it, never before `path`).
  auto split_and_fit = [&](int role, int64_t f, const MicrokernelParams& rest_want,
                           const MicrokernelParams& main_want) {
    for (int q = role - 1; q >= 0; --q) {
      Path at = path;
      at.insert(at.end(), q, 0);
      if (!x.swap(at)) return;
    }
    if (!x.step({Kind::kSplitRange, path, "", "", f})) return;
    Path rest = path;
    ++rest.back();
    fit_into(x, rest, rest_want, depth + 1);
    if (!x.failed()) fit_into(x, path, main_want, depth + 1);
  };
  // The column tile: at most the columns, whole vectors when it spans one or more.
  int64_t nr = std::min(want.nr, g->n);
  if (nr >= want.lanes) nr = nr / want.lanes * want.lanes;
  if (depth < 6 && g->n > nr && g->n % nr != 0) {
    MicrokernelParams rest = want, main = want;
    rest.nr = g->n % nr;
    main.nr = nr;
    return split_and_fit(g->j, nr, rest, main);
  }
  // Narrower than the tile's vectors and not a width itself (AVX-512's 12 columns): the widest
  // narrower vector the target has takes what it divides (8 of 12 in AVX2's ymm) and only the
  // rest runs element by element. Left whole, all 12 ran scalar: a 500 x 700 x 300 matmul spent
  // as long in its 28 remainder columns as in the other 672.
  if (depth < 6 && nr < want.lanes && !is_width(x.target(), nr)) {
    int64_t w = 0;
    for (int v : x.target().vector_widths)
      if (v >= 2 && v < nr && v > w) w = v;
    if (w > 0) {
      MicrokernelParams rest = want, main = want;
      main.nr = nr / w * w;
      rest.nr = nr - main.nr;
      return split_and_fit(g->j, main.nr, rest, main);
    }
    // No vector fits the columns (AVX-512's last 4): the rows go in the vectors, a transposed
    // tile of nr columns by one vector of rows, the whole reduction at once. 500 x 4 x 300
    // measured 0.026 ms against 0.345 ms with the columns element by element.
    if (!want.transposed && g->m >= want.lanes && gemm_nest_at(x.program(), path, true).ok()) {
      MicrokernelParams t = want;
      t.transposed = true;
      t.rows_outer = false;
      t.mr = t.mc = nr;
      t.nr = want.lanes;
      t.kc = g->kk;
      t.nc = 0;
      return fit_into(x, path, t, depth + 1);
    }
  }
  // The row tile: a divisor of the rows down to 3/4 of what is wanted before a remainder (a
  // row is a broadcast, not a vector: conv2d-3x3-s2's 28 output columns as 4 x 7, 12% faster
  // than 3 x 8 + 4 measured interleaved).
  const int64_t aim = std::min(want.mr, g->m);
  int64_t mr = aim;
  for (int64_t d = aim; d > 1 && 4 * d >= 3 * aim; --d)
    if (g->m % d == 0) {
      mr = d;
      break;
    }
  if (depth < 6 && g->m > mr && g->m % mr != 0) {
    MicrokernelParams rest = want;
    rest.mr = g->m % mr;
    return split_and_fit(g->i, mr, rest, want);
  }
  MicrokernelParams m = want;
  m.mr = mr;
  m.nr = nr;
  m.kc = fitted_kc(g->kk, want.kc);
  m.mc = m.mr * divisor_near(g->m / m.mr, std::max<int64_t>(1, want.mc / m.mr));
  m.nc = 0;
  // A B-like operand the tile cannot load as vectors (C = A A^T's A[{j},{k}]) is packed even
  // without k blocks, but then inside the row-block loop, all of it once per row block; with k
  // blocks each block's panel is packed once. So such a nest keeps its k blocks (syrk 512 x 384
  // on a Zen 4 core: the sketch alone 1.93 ms with kc 192, 2.85 ms with the reduction whole).
  if (m.kc == g->kk && g->kk > want.kc && m.mc < g->m) {
    std::vector<std::string> b_like, b_strided, a_like;
    operand_roles(x.program(), *g, b_like, b_strided, a_like);
    if (!b_strided.empty()) m.kc = divisor_near(g->kk, want.kc, 8);
  }
  // Every level left out (a small remainder: one block each way) leaves no scope above the
  // reduction for the register tile: block the reduction in two or more, or leave the part as it
  // is when its extent is prime.
  if (g->batch.empty() && m.kc == g->kk && m.mc == g->m && m.nr == g->n && m.mr == g->m) {
    m.kc = 0;
    for (int64_t f = g->kk / 2; f >= 2 && m.kc == 0; --f)
      if (g->kk % f == 0) m.kc = f;
    if (m.kc == 0) return;
  }
  expand_into(x, *gemm_nest_at(x.program(), path, m.transposed), m);
}

}  // namespace

ir::Result<SketchExpansion> expand_microkernel(const ir::Program& p, const Path& path,
                                               const MicrokernelParams& m, const Target& target) {
  auto nest = gemm_nest_at(p, path, m.transposed);
  if (!nest.ok()) return nest.errors();
  const GemmNest& g = *nest;
  const ir::SourceLoc loc = node_at(p, path)->loc;
  auto refuse = [&](const std::string& why) {
    return std::vector<ir::Diagnostic>{error_at(
        loc, "micro-kernel sketch " + print_params(m) + " at " + print_path(path) + ": " + why)};
  };
  auto divides = [](int64_t f, int64_t e) { return f >= 1 && f <= e && e % f == 0; };
  if (!divides(m.kc, g.kk))
    return refuse("kc must divide the reduction extent " + std::to_string(g.kk));
  if (!divides(m.mc, g.m)) return refuse("mc must divide the row extent " + std::to_string(g.m));
  if (!divides(m.mr, m.mc)) return refuse("mr must divide mc");
  const int64_t cols = m.nc ? m.nc : g.n;
  if (m.nc && !divides(m.nc, g.n))
    return refuse("nc must divide the column extent " + std::to_string(g.n));
  if (!divides(m.nr, cols))
    return refuse("nr must divide the column extent " + std::to_string(cols));
  if (m.lanes < 2 || (m.nr >= m.lanes && m.nr % m.lanes != 0))
    return refuse("nr must be a multiple of the lanes");
  Expander x(p, target, loc);
  if (m.dot) {
    if (!g.reductions.empty() || m.mr != g.m || m.kc != g.kk || g.kk % m.lanes != 0 || g.transposed)
      return refuse(
          "the dot form takes one reduction, a multiple of the lanes, and every row (mr = m, kc = "
          "k)");
    expand_dot_into(x, g, m);
  } else {
    expand_into(x, g, m);
  }
  return std::move(x).result();
}

ir::Result<SketchExpansion> expand_microkernel_fitted(const ir::Program& p, const Path& path,
                                                      const MicrokernelParams& want,
                                                      const Target& target) {
  if (want.dot) return expand_microkernel(p, path, want, target);  // sized for the nest already
  auto nest = gemm_nest_at(p, path, want.transposed);
  if (!nest.ok()) return nest.errors();
  Expander x(p, target, node_at(p, path)->loc);
  fit_into(x, path, want, 0);
  return std::move(x).result();
}

namespace {

// For the statement at `s` (depth >= 3): the path of the outermost of its three innermost
// scopes when those three, alone, would be a GEMM-class nest that is not perfect in `p`.
std::optional<Path> hidden_gemm(const ir::Program& p, const Path& s) {
  if (s.size() < 4) return std::nullopt;
  const Path a(s.begin(), s.end() - 3);
  const ir::Node* na = node_at(p, a);
  const ir::Node* nb = node_at(p, Path(s.begin(), s.end() - 2));
  const ir::Node* nc = node_at(p, Path(s.begin(), s.end() - 1));
  const ir::Node* st = node_at(p, s);
  if (!na || !nb || !nc || !st || st->is_scope || st->stmt.op != ir::Reduce::kAdd)
    return std::nullopt;
  if (na->body.size() == 1 && nb->body.size() == 1 && nc->body.size() == 1) return std::nullopt;
  // The chain alone, its statement shared (immutable).
  const ir::NodePtr& leaf = nc->body[s.back()];
  const ir::NodePtr chain = ir::Node::scope(
      na->extent, na->extent_name, na->annot,
      {ir::Node::scope(nb->extent, nb->extent_name, nb->annot,
                       {ir::Node::scope(nc->extent, nc->extent_name, nc->annot, {leaf}, nc->loc)},
                       nb->loc)},
      na->loc);
  if (!gemm_nest_at(replace_node(p, a, {chain}), a).ok()) return std::nullopt;
  return a;
}

}  // namespace

SketchExpansion isolate_gemm_nests(const ir::Program& p, const Target& target) {
  Expander x(p, target, {});
  std::set<std::string> given_up;  // statements whose fission was refused, by text
  for (int round = 0; round < 32; ++round) {
    bool moved = false;
    for (const Path& s : node_paths(x.program())) {
      const auto a = hidden_gemm(x.program(), s);  // nullopt for scopes
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

// The share of rows x columns in full mr x nr tiles, the columns rounded to whole vectors as
// fit_into does (the rest runs in remainder tiles, narrower and slower). A row remainder of r
// rows keeps the full vectors and counts r / mr of its rows: its tile does r broadcast-FMA rows
// per load of the vectors where a full one does mr (a stride-2 conv2d's 31 output columns as the
// rows of a transposed tile, 3 x 8 + 7: 0.68 ms against 0.76 for the plain tile, which leaves 15
// of 31 columns to narrower vectors).
double covered(int64_t rows, int64_t cols, int64_t mr, int64_t nr, int64_t lanes) {
  nr = std::min(nr, cols);
  if (nr >= lanes) nr = nr / lanes * lanes;
  mr = std::min(mr, rows);
  const int64_t r = rows % mr;
  return static_cast<double>(cols / nr * nr) / cols *
         (static_cast<double>(rows - r) + static_cast<double>(r * r) / mr) / rows;
}

// The dot form's candidate for `g` (MicrokernelParams::dot), when it has one: at most 4 rows,
// one reduction, k a multiple of the lanes, every operand indexed by k in its last dimension
// only, with unit stride. Its columns fill the 8 accumulator registers the code generator keeps
// across a loop (nr x m <= 8, nr dividing n).
std::optional<MicrokernelParams> dot_candidate(const GemmNest& g, int64_t lanes) {
  if (g.transposed || !g.reductions.empty() || g.m > 4 || g.kk % lanes != 0 || !g.operands_unit_k)
    return std::nullopt;
  int64_t nr = 1;
  for (int64_t d = 8 / g.m; d >= 1; --d)
    if (g.n % d == 0) {
      nr = d;
      break;
    }
  MicrokernelParams m{g.m, nr, g.kk, g.m, 0, lanes};
  m.dot = true;
  return m;
}

}  // namespace

std::vector<MicrokernelParams> microkernel_candidates(const GemmNest& g, const Target& target) {
  std::vector<MicrokernelParams> out;
  if (target.vector_widths.empty()) return out;
  // Elements per vector register: the target's widths count f32 lanes, an f64 register holds
  // half as many. The vectorise width is the narrowest of the target's that fills a register
  // (AVX2's f64 takes 8 lanes, two ymm). Tiles sized in f32 lanes made a 384-cubed f64 GEMM's
  // first candidate 8 x 48 doubles, 48 zmm accumulators: 4.5 ms against 2.1 for 8 x 24.
  const int64_t reg = target.vector_widths.front() * 4 / ir::dtype_bytes(g.dtype);
  int64_t lanes = 0;
  for (int w : target.vector_widths)
    if (w >= reg && (lanes == 0 || w < lanes)) lanes = w;
  if (lanes == 0) return out;
  // Register tiles: mr x nr elements in mr * nr / reg accumulators, leaving registers for the
  // nr / reg loads of B and a broadcast of A. With 32 vector registers (AVX-512, NEON, SVE):
  // 24 accumulators (8 x 48 f32 on AVX-512: conv2d-3x3 +13% over 8 x 32, matmul-1024 even; 8 x 12
  // on NEON, BLIS's ARMv8 shape), or 16 (8 x 32, 4 x 64). With 16 (AVX2): 12 ymm (6 x 16) / 8 (4 x
  // 16).
  const std::vector<std::pair<int64_t, int64_t>> tiles =
      target.registers() >= 32
          ? std::vector<std::pair<int64_t, int64_t>>{{8, 3 * reg}, {8, 2 * reg}, {4, 4 * reg}}
          : std::vector<std::pair<int64_t, int64_t>>{{6, 2 * reg}, {4, 2 * reg}};
  // Panels: kc x nr of B in L1 next to the mr x kc of A (kc near 256); mc x kc of A in L2 (mc
  // near 64, then near 128). The fitted expansion takes the divisors nearest these and splits
  // off remainders the tile does not divide.
  // Each tile in both panel orders, rows outer first (matmul-1024 on a Zen 5 core: 8 x 32 went
  // from 0.95x to 1.02x OpenBLAS, 8 x 48 from 0.93x to 0.99x), the smaller mc first: the
  // optimiser proposes the first kSketchesPerNest, both orders of two tiles.
  for (int64_t mc : {64, 128}) {
    if (mc > 64 && g.m <= 64) continue;  // the same blocks as mc 64
    for (const auto& [mr, nr] : tiles)
      for (bool rows_outer : {true, false}) {
        MicrokernelParams m{mr, nr, 256, mc, 0, lanes};
        m.rows_outer = rows_outer;
        out.push_back(m);
      }
  }
  // Tiles that leave fewer columns to a remainder first (it runs in narrower vectors; a row
  // remainder keeps the vectors and loses little), the order above among equals: matmul-1024
  // takes 8 x 32 (1024 columns whole) before 8 x 48 (1008 + 16): 1.02x against 0.99x OpenBLAS
  // measured on a Zen 5 core, even on a Xeon; conv2d-3x3's 56 output columns keep 8 x 48
  // (48 + 8) first, and AVX2's 6 x 16 stays before 4 x 16 (1020 + 4 rows: 80 against 70 GFLOP/s).
  std::stable_sort(out.begin(), out.end(),
                   [&](const MicrokernelParams& x, const MicrokernelParams& y) {
                     return covered(1, g.n, 1, x.nr, x.lanes) > covered(1, g.n, 1, y.nr, y.lanes);
                   });
  // A nest with few rows whose every operand is unit-stride in k: each element of an operand is
  // used by at most m rows, so packing costs about what it saves. The dot form (partial sums in
  // the lanes, nr x m of them, kept across the k loop) comes first for up to 4 rows: a 4 x 4096
  // x 4096 GEMV, the weights 64 MiB, went from 6.2 ms (the search without it) to 4.9 ms on a
  // Zen 4 core, and gqa-attention's row sums (4 query heads) make its first sketch 6% faster.
  // With 8 rows (mqa-decode's Q K^T) it would be a single column of 8 sums, 9 loads per 8 FMAs;
  // offered second there, it displaced a plain tile and the search returned 0.161 ms against
  // 0.136, so it is not offered.
  if (auto d = dot_candidate(g, lanes)) out.insert(out.begin(), *d);
  if (!g.transposable || g.transposed) return out;
  // Transposed tiles: 16 accumulators with 32 registers, 12 with 16 (as many as the plain
  // tiles' second choice: the broadcasts read the operand where it lies, not from a packed block).
  const std::vector<std::pair<int64_t, int64_t>> ttiles =
      target.registers() >= 32
          ? std::vector<std::pair<int64_t, int64_t>>{{8, 2 * reg}, {4, 4 * reg}}
          : std::vector<std::pair<int64_t, int64_t>>{{6, 2 * reg}, {4, 2 * reg}};
  std::vector<MicrokernelParams> t;
  for (const auto& [mr, nr] : ttiles) t.push_back({mr, nr, 256, 64, 0, lanes, true});
  if (std::all_of(out.begin(), out.end(), [&](const MicrokernelParams& plain) {
        return transposed_first(g, plain, t.front());
      })) {
    t.insert(t.end(), out.begin(), out.end());
    return t;
  }
  out.insert(out.end(), t.begin(), t.end());
  return out;
}

bool transposed_first(const GemmNest& g, const MicrokernelParams& plain,
                      const MicrokernelParams& t) {
  // kc as fit_into takes it.
  const double plain_share = covered(g.m, g.n, plain.mr, plain.nr, plain.lanes);
  const double depth = static_cast<double>(fitted_kc(g.kk, t.kc)) * g.inner;
  const double t_share = covered(g.n, g.m, t.mr, t.nr, t.lanes) * (1.0 - 2.0 * t.lanes / depth);
  return t_share > plain_share;
}

namespace {
// `p` with every top-level three-scope int8 GEMM's reduction tiled by 4 (dot_blocking), where
// the target has the lanes for a dot product; the moves are appended to `trace`.
ir::Program with_dot_blocking(ir::Program p, const Target& target, std::vector<Action>* trace) {
  for (size_t k = 0; k < p.body.size(); ++k) {
    const Path at{static_cast<int>(k)};
    auto tile = dot_blocking(p, at);
    if (!tile) continue;
    auto tiled = apply(p, *tile, target);
    if (!tiled.ok()) continue;
    auto nest = dot_nest_at(tiled.value(), at);
    if (!nest || dot_candidates(*nest, target).empty()) continue;
    p = std::move(tiled).value();
    if (trace) trace->push_back(*tile);
  }
  return p;
}
}  // namespace

SketchExpansion sketch_program(const ir::Program& p, const Target& target, size_t choice) {
  const SketchExpansion isolated = isolate_gemm_nests(p, target);
  SketchExpansion out{isolated.trace, isolated.program};
  bool any = false;
  // int8 GEMMs take the dot-product sketch (dot_sketch.h), their reduction first tiled by 4
  // where it is whole; neither adds a top-level node, so the other nests' paths stay.
  out.program = with_dot_blocking(out.program, target, &out.trace);
  const auto dots = dot_nests(out.program);
  for (auto it = dots.rbegin(); it != dots.rend(); ++it) {
    const auto cands = dot_candidates(*it, target);
    if (cands.empty()) continue;
    auto e =
        expand_dot_sketch(out.program, it->path, cands[std::min(choice, cands.size() - 1)], target);
    if (!e.ok()) continue;
    out.program = std::move(e->program);
    out.trace.insert(out.trace.end(), e->trace.begin(), e->trace.end());
    any = true;
  }
  // Last nest first: an expansion may add siblings after its own nest (split_range's remainder
  // at the top level), which would move every later nest's path but never an earlier one's.
  const auto nests = gemm_nests(out.program);
  for (auto it = nests.rbegin(); it != nests.rend(); ++it) {
    const auto& nest = *it;
    const auto cands = microkernel_candidates(nest, target);
    if (cands.empty()) continue;
    auto e = expand_microkernel_fitted(out.program, nest.path,
                                       cands[std::min(choice, cands.size() - 1)], target);
    if (!e.ok()) continue;
    out.program = std::move(e->program);
    out.trace.insert(out.trace.end(), e->trace.begin(), e->trace.end());
    any = true;
  }
  return any ? out : SketchExpansion{{}, p};
}

size_t sketch_choices(const ir::Program& p, const Target& target) {
  size_t most = 0;
  const ir::Program isolated = isolate_gemm_nests(p, target).program;
  for (const auto& nest : dot_nests(with_dot_blocking(isolated, target, nullptr)))
    most = std::max(most, dot_candidates(nest, target).size());
  for (const auto& nest : gemm_nests(isolated))
    most = std::max(most, microkernel_candidates(nest, target).size());
  return most;
}

}  // namespace perfdojo::transforms
