#include "backends/cost_model_flat.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "backends/cost_model_memo.h"
#include "ir/liveness.h"

namespace perfdojo::backends::cost_detail {
namespace {

int find_buffer(const Flat& f, const std::string& name) {
  for (size_t i = 0; i < f.bufs.size(); ++i) {
    const std::string& d = f.bufs[i].decl->name;  // length and first letter tell most apart
    if (d.size() == name.size() && (d.empty() || (d[0] == name[0] && d == name)))
      return static_cast<int>(i);
  }
  return -1;
}

void add_access(Flat& f, const ir::Access& a, bool write, int stmt, int depth) {
  int b = find_buffer(f, a.buffer);
  if (b < 0) {  // an unchecked program; the checker reports it
    ++f.dropped;
    return;
  }
  const BufInfo& bi = f.bufs[b];
  AccInfo ai{b, stmt, write, depth, static_cast<int>(f.coefs.size()), 0, -1, -1};
  f.coefs.resize(f.coefs.size() + depth, 0);
  const size_t rank = bi.decl->shape.size();
  for (size_t d = 0; d < a.index.size() && d < rank; ++d) {
    const ir::Affine& ix = a.index[d];
    const int64_t stride = f.strides[bi.stride_off + d];
    for (size_t k = 0; k < ix.coeffs.size() && static_cast<int>(k) < depth; ++k)
      f.coefs[ai.coef_off + k] += ix.coeffs[k] * stride;
    ai.constant += ix.constant * stride;
    // An indirect term is priced as if the index element's position were the index: each new
    // index element a new row, rows in the order the index buffer lists them. That is the
    // gather's footprint when its rows are distinct; their real order (random, repeated) is not
    // modelled, so a gather costs what streaming the same rows costs.
    if (const ir::Gather* g = a.gather_at(d)) {
      const int gb = find_buffer(f, g->buffer);
      if (gb < 0) continue;
      const BufInfo& gi = f.bufs[gb];
      for (size_t i = 0; i < g->index.size() && i < gi.decl->shape.size(); ++i) {
        const int64_t s = f.strides[gi.stride_off + i] * stride;
        const ir::Affine& x = g->index[i];
        for (size_t k = 0; k < x.coeffs.size() && static_cast<int>(k) < depth; ++k)
          f.coefs[ai.coef_off + k] += x.coeffs[k] * s;
        ai.constant += x.constant * s;
      }
    }
  }
  f.accs.push_back(ai);
  // The index elements are loads of their own.
  for (const auto& g : a.gather) {
    if (!g) continue;
    ir::Access read;
    read.buffer = g->buffer;
    read.index = g->index;
    add_access(f, read, false, stmt, depth);
  }
}

void add_loads(Flat& f, const ir::Expr& e, int stmt, int depth) {
  if (e.kind == ir::ExprKind::kLoad) add_access(f, e.access, false, stmt, depth);
  for (const auto& a : e.args) add_loads(f, *a, stmt, depth);
}

// The mean trip count of a bounded scope of `extent`: its bounds evaluated with the enclosing
// iterators it uses spread evenly over their extents `outer` (a grid of at most 17 values each,
// the first three such iterators; any further at their midpoints).
double mean_trips(int64_t extent, const ir::ScopeBounds& b, const std::vector<int64_t>& outer) {
  std::vector<int> used;
  for (const auto* x : {&b.lo, &b.hi})
    if (*x)
      for (int k = 0; k <= (*x)->max_depth(); ++k)
        if ((*x)->coeff(k) != 0 && std::find(used.begin(), used.end(), k) == used.end())
          used.push_back(k);
  std::vector<int64_t> it(outer.size());
  for (size_t k = 0; k < outer.size(); ++k) it[k] = (outer[k] - 1) / 2;
  double sum = 0, count = 0;
  auto rec = [&](auto&& self, size_t u) -> void {
    if (u == used.size() || u == 3) {
      const auto [first, end] = ir::scope_range(extent, b, it.data());
      sum += static_cast<double>(std::max<int64_t>(0, end - first));
      count += 1;
      return;
    }
    const int k = used[u];
    const int64_t e = k < static_cast<int>(outer.size()) ? outer[k] : 1;
    const int64_t steps = std::min<int64_t>(e, 17);
    for (int64_t s = 0; s < steps; ++s) {
      it[k] = steps == 1 ? 0 : s * (e - 1) / (steps - 1);
      self(self, u + 1);
    }
  };
  rec(rec, 0);
  return count > 0 ? sum / count : static_cast<double>(extent);
}

// Children are pushed on f.stack as they complete; a scope moves its own off the stack into the
// kids pool when it completes (its grandchildren have left the stack by then).
void walk(Flat& f, const std::vector<ir::NodePtr>& body, int parent, int depth, int nest, int par,
          std::vector<int>& chain);

// One node of walk; a top-level one (parent < 0) becomes f.top's next entry.
void walk_node(Flat& f, const ir::Node& n, int parent, int depth, int nest, int par,
               std::vector<int>& chain) {
  int my_nest = parent < 0 ? static_cast<int>(f.top.size()) : nest;
  if (parent < 0) f.top.push_back(0);  // patched below
  if (n.is_scope) {
    int idx = static_cast<int>(f.scopes.size());
    ScopeInfo s{};
    s.box = std::max<int64_t>(n.extent, 1);
    s.extent = s.box;
    if (n.bounds.any()) {
      // A bounded scope: its mean trip count over the enclosing iterators' values.
      std::vector<int64_t> outer;
      for (int c : chain) outer.push_back(f.scopes[c].box);
      s.extent = std::max<int64_t>(
          1, std::llround(n.bounds.indirect() ? ir::indirect_mean_trips(n.extent, n.bounds, outer)
                                              : mean_trips(n.extent, n.bounds, outer)));
    }
    s.annot = n.annot;
    s.depth = depth;
    s.parent = parent;
    s.nest = my_nest;
    s.par = n.annot == Annot::kParallel && par < 0 ? idx : par;
    s.acc_begin = static_cast<int>(f.accs.size());
    f.scopes.push_back(s);
    chain.push_back(idx);
    const size_t base = f.stack.size();
    walk(f, n.body, idx, depth + 1, my_nest, f.scopes[idx].par, chain);
    chain.pop_back();
    ScopeInfo& me = f.scopes[idx];
    me.acc_end = static_cast<int>(f.accs.size());
    me.kids_begin = static_cast<int>(f.kids.size());
    f.kids.insert(f.kids.end(), f.stack.begin() + static_cast<long>(base), f.stack.end());
    f.stack.resize(base);
    me.kids_end = static_cast<int>(f.kids.size());
    if (me.par >= 0)
      for (int p = idx; p >= 0; p = f.scopes[p].parent) f.scopes[p].has_par = true;
    f.stack.push_back(idx);
  } else {
    int si = static_cast<int>(f.stmts.size());
    StmtInfo st{&n.stmt, depth,  static_cast<int>(f.chains.size()), static_cast<int>(f.accs.size()),
                0,       my_nest};
    f.chains.insert(f.chains.end(), chain.begin(), chain.end());
    add_access(f, n.stmt.lhs, true, si, depth);
    if (n.stmt.op != ir::Reduce::kNone) add_access(f, n.stmt.lhs, false, si, depth);
    add_loads(f, *n.stmt.rhs, si, depth);
    st.acc_end = static_cast<int>(f.accs.size());
    f.stmts.push_back(st);
    f.stack.push_back(~si);
  }
  if (parent < 0) {
    f.top.back() = f.stack.back();
    f.stack.pop_back();
  }
}

void walk(Flat& f, const std::vector<ir::NodePtr>& body, int parent, int depth, int nest, int par,
          std::vector<int>& chain) {
  for (const auto& n : body) walk_node(f, *n, parent, depth, nest, par, chain);
}

struct Term {
  int64_t stride;
  int64_t span;
};

// lines_of's state after a prefix of the terms: the contiguous run, the blocks and their
// alignment so far.
struct LinesState {
  double run, blocks, align;
};
constexpr LinesState kNoTerms{1, 1, 1};

// The state after one more term.
LinesState add_term(LinesState st, const Term& t, double esz) {
  double c = static_cast<double>(t.stride), s2 = static_cast<double>(t.span);
  if (c <= st.run || c * esz <= kLineBytes) {
    st.run += c * s2;
  } else {
    if (st.blocks == 1) {
      const int64_t bytes = t.stride * static_cast<int64_t>(esz);
      if (bytes % static_cast<int64_t>(kLineBytes) == 0) {
        int64_t l = bytes / static_cast<int64_t>(kLineBytes);
        st.align = static_cast<double>(l & -l);
      }
    }
    st.blocks *= s2 + 1;
  }
  return st;
}

// The Lines of a final state, for elements of `esz` bytes in a buffer of `buf_lines` lines.
Lines lines_of_state(const LinesState& st, double esz, double buf_lines) {
  Lines out;
  out.blocks = st.blocks;
  out.align = st.align;
  out.lines = std::min(st.blocks * std::ceil(st.run * esz / kLineBytes), buf_lines);
  out.scattered = st.blocks > 1 && st.run * esz <= kLineBytes / 2;
  return out;
}

// The Lines of `n` terms sorted by increasing stride, of an access with elements of `esz` bytes
// to a buffer of `buf_lines` lines.
Lines lines_of(const Term* terms, int n, double esz, double buf_lines) {
  LinesState st = kNoTerms;
  for (int j = 0; j < n; ++j) st = add_term(st, terms[j], esz);
  return lines_of_state(st, esz, buf_lines);
}

// Cache lines one access touches while the iterators of depth >= dmin run over their extents
// and the others stay fixed, as `blocks` separate runs. Iterators are taken in order of
// increasing stride: one whose stride stays within the contiguous run so far (or within a line)
// extends the run, a larger one repeats it as separate blocks. `align` is the largest power of
// two dividing the first block stride in lines: blocks that far apart share cache sets.
Lines access_lines(const Flat& f, const AccInfo& a, const StmtInfo& s, int dmin) {
  Term terms[64];
  int n = 0;
  for (int k = dmin; k < a.depth && n < 64; ++k) {
    int64_t c = f.coefs[a.coef_off + k];
    int64_t e = f.scopes[f.chains[s.chain_off + k]].extent;
    if (c == 0 || e <= 1) continue;
    c = c < 0 ? -c : c;
    int j = 0;
    while (j < n && terms[j].stride != c) ++j;
    if (j < n) {
      terms[j].span += e - 1;  // same stride (a stencil's h + r): the ranges add up
    } else {
      terms[n++] = {c, e - 1};
    }
  }
  std::sort(terms, terms + n, [](const Term& x, const Term& y) { return x.stride < y.stride; });
  return lines_of(terms, n, f.bufs[a.buf].esz, f.bufs[a.buf].lines);
}

// access_lines(f, a, s, d) for every d = 0..a.depth, into out[d]: cut d has the terms of cut
// d + 1 and iterator d's, so the cuts are made deepest first with one sorted list (the same
// terms in the same order as access_lines makes, so the same figures).
void all_access_lines(const Flat& f, const AccInfo& a, const StmtInfo& s, Lines* out) {
  if (a.depth > 64) {  // access_lines keeps the first 64 strides; rare enough to do its way
    for (int d = 0; d <= a.depth; ++d) out[d] = access_lines(f, a, s, d);
    return;
  }
  // states[j]: lines_of's state before term j. A cut changes the terms from some position on
  // (strides mostly grow outward, so usually only the last), and only the states after it are
  // made again: the same operations in the same order as lines_of, so the same figures.
  Term terms[64];
  LinesState states[65];  // made as needed
  states[0] = kNoTerms;
  int n = 0;
  const double esz = f.bufs[a.buf].esz, buf_lines = f.bufs[a.buf].lines;
  out[a.depth] = lines_of_state(states[0], esz, buf_lines);
  for (int d = a.depth - 1; d >= 0; --d) {
    int64_t c = f.coefs[a.coef_off + d];
    const int64_t e = f.scopes[f.chains[s.chain_off + d]].extent;
    if (c == 0 || e <= 1) {
      out[d] = out[d + 1];  // the same terms
      continue;
    }
    c = c < 0 ? -c : c;
    int j = 0;
    while (j < n && terms[j].stride < c) ++j;
    if (j < n && terms[j].stride == c) {
      terms[j].span += e - 1;
    } else {
      for (int i = n; i > j; --i) terms[i] = terms[i - 1];
      terms[j] = {c, e - 1};
      ++n;
    }
    for (int k = j; k < n; ++k) states[k + 1] = add_term(states[k], terms[k], esz);
    out[d] = lines_of_state(states[n], esz, buf_lines);
  }
}

// Footprints in bytes of the accesses [b, e): one per variant v < 4, with iterators of depth >=
// dmin[v] free, under cache geometry g[v]. Identical accesses count once; a buffer never counts
// more lines than it has (without a geometry). `traffic` counts written buffers twice (the line
// comes in and is written back). With a cache geometry, an access whose blocks crowd into fewer
// sets than they need counts as large as the share of the cache it effectively uses up. Variant
// 3 also gives `weighted`: scattered lines weighted by their extra cost. The four variants are
// computed in one pass over the accesses, each with exactly the operations (in the same order)
// it would have on its own. `canon_lines` (4 per canonical id) must be zero on entry and is zero
// on return; `buf_lines` holds 4 per buffer.
void footprints(const Flat& f, int b, int e, const int dmin[4], const CacheGeometry g[4],
                std::vector<double>& canon_lines, std::vector<double>& buf_lines,
                std::vector<char>& buf_written, std::vector<char>& scattered, double bytes[4],
                double traffic[4], double* weighted) {
  // Buffers the accesses touch, in a bit set when there are at most 64: only they contribute
  // (the others add zeros), and only their entries need clearing afterwards.
  const bool few = f.bufs.size() <= 64;
  uint64_t touched = 0;
  if (!few) {
    std::fill(buf_lines.begin(), buf_lines.end(), 0.0);
    std::fill(buf_written.begin(), buf_written.end(), 0);
    std::fill(scattered.begin(), scattered.end(), 0);
  }
  for (int i = b; i < e; ++i) {
    const AccInfo& a = f.accs[i];
    if (f.bufs[a.buf].small_temp) continue;
    if (few) touched |= uint64_t{1} << a.buf;
    double* cl = &canon_lines[4 * static_cast<size_t>(a.canon)];
    for (int v = 0; v < 4; ++v) {
      const Lines& l = f.lines[a.lines_off + std::min(dmin[v], a.depth)];
      double lines = l.lines;
      if (g[v].sets > 0 && l.align > 1) {
        double used = std::max(1.0, g[v].sets / std::min(l.align, g[v].sets));
        if (l.blocks > used * g[v].ways) lines *= g[v].sets / used;
      }
      cl[v] = std::max(cl[v], lines);
      if (v == 3 && l.scattered) scattered[a.buf] = 1;
    }
    if (a.write) buf_written[a.buf] = 1;
  }
  for (int i = b; i < e; ++i) {
    const AccInfo& a = f.accs[i];
    double* cl = &canon_lines[4 * static_cast<size_t>(a.canon)];
    for (int v = 0; v < 4; ++v) {
      if (cl[v] > 0) {
        buf_lines[4 * static_cast<size_t>(a.buf) + v] += cl[v];
        cl[v] = 0;
      }
    }
  }
  double by[4] = {}, tr[4] = {}, cost = 0;
  auto add = [&](size_t k) {
    for (int v = 0; v < 4; ++v) {
      const double bl = buf_lines[4 * k + v];
      double l = (g[v].sets > 0 ? bl : std::min(bl, f.bufs[k].lines)) * kLineBytes;
      by[v] += l;
      // A written line is read for ownership, then written back; a streamed one only written.
      const double moved = buf_written[k] && !f.bufs[k].stream ? 2 * l : l;
      tr[v] += moved;
      if (v == 3) cost += moved * (scattered[k] ? kScatteredLineCost : 1.0);
    }
  };
  if (few) {
    // In increasing order, as the full loop adds them; then left zero for the next call.
    for (uint64_t t = touched; t; t &= t - 1) {
      const size_t k = static_cast<size_t>(__builtin_ctzll(t));
      add(k);
      for (int v = 0; v < 4; ++v) buf_lines[4 * k + v] = 0;
      buf_written[k] = 0;
      scattered[k] = 0;
    }
  } else {
    for (size_t k = 0; k < f.bufs.size(); ++k) add(k);
  }
  for (int v = 0; v < 4; ++v) {
    bytes[v] = by[v];
    traffic[v] = tr[v];
  }
  *weighted = cost;
}

// Canonical ids, the lines of every access and the footprints of every scope, for the nest
// whose slices start at `b`. Canonical ids only tell apart accesses within one scope, so they
// are numbered per nest.
void finish_nest(Flat& f, const Bases& b, const CacheGeometry geo[4]) {
  // Canonical ids: accesses with the same buffer, offsets and depth touch the same elements.
  std::vector<int>& reps = f.reps;
  reps.clear();
  int canon_count = 0;
  for (auto& a : tail(f.accs, b.accs)) {
    for (int r : reps) {
      const AccInfo& o = f.accs[r];
      if (o.buf == a.buf && o.depth == a.depth && o.constant == a.constant &&
          std::equal(f.coefs.begin() + a.coef_off, f.coefs.begin() + a.coef_off + a.depth,
                     f.coefs.begin() + o.coef_off)) {
        a.canon = o.canon;
        break;
      }
    }
    if (a.canon < 0) {
      a.canon = canon_count++;
      reps.push_back(static_cast<int>(&a - f.accs.data()));
    }
  }
  // Lines touched per access for every depth cut (a scratch pool: only footprints read it).
  f.lines.clear();
  for (auto& a : tail(f.accs, b.accs)) {
    const StmtInfo& s = f.stmts[a.stmt];
    a.lines_off = static_cast<int>(f.lines.size());
    f.lines.resize(f.lines.size() + a.depth + 1);
    all_access_lines(f, a, s, f.lines.data() + a.lines_off);
  }
  // footprints() leaves canon_lines zero (it clears what it touched).
  if (f.canon_lines.size() < 4 * static_cast<size_t>(canon_count))
    f.canon_lines.resize(4 * static_cast<size_t>(canon_count), 0.0);
  for (auto& s : tail(f.scopes, b.scopes)) {
    // Variants 0-2: one iteration at each cache level; 3: one whole execution.
    const int dmin[4] = {s.depth + 1, s.depth + 1, s.depth + 1, s.depth};
    double bytes[4], traffic[4];
    footprints(f, s.acc_begin, s.acc_end, dmin, geo, f.canon_lines, f.buf_lines, f.buf_written,
               f.scattered, bytes, traffic, &s.fall_cost);
    for (int level = 0; level < 3; ++level) s.f1_bytes[level] = bytes[level];
    s.fall_bytes = bytes[3];
    s.fall_traffic = traffic[3];
  }
}

// Clears `f`'s pools (they keep their storage) and describes `p`'s buffers.
void reset_flat(const ir::Program& p, Flat& f) {
  f.bufs.clear();
  f.scopes.clear();
  f.stmts.clear();
  f.accs.clear();
  f.chains.clear();
  f.coefs.clear();
  f.lines.clear();
  f.kids.clear();
  f.strides.clear();
  f.stack.clear();
  f.top.clear();
  f.dropped = 0;
  f.bufs.reserve(p.buffers.size());
  for (const auto& d : p.buffers) {
    BufInfo b;
    b.decl = &d;
    b.esz = ir::dtype_bytes(d.dtype);
    double el = static_cast<double>(std::max<int64_t>(d.elements(), 1));
    b.lines = std::ceil(el * b.esz / kLineBytes);
    b.small_temp = d.role == ir::Role::kTemp && el <= kRegisterElements;
    b.stream = d.stream;
    b.fill = d.init && !ir::initial_value_dead(p, d);
    b.stride_off = static_cast<int>(f.strides.size());
    f.strides.resize(f.strides.size() + d.shape.size(), 1);
    for (int k = static_cast<int>(d.shape.size()) - 2; k >= 0; --k)
      f.strides[b.stride_off + k] = f.strides[b.stride_off + k + 1] * d.shape[k + 1];
    f.bufs.push_back(b);
  }
  // One allocation per pool for the usual sizes.
  f.scopes.reserve(64);
  f.stmts.reserve(32);
  f.accs.reserve(128);
  f.chains.reserve(512);
  f.coefs.reserve(2048);
  f.lines.reserve(2048);
  f.kids.reserve(128);
  f.top.reserve(16);
  f.stack.reserve(64);
  // footprints() leaves these zero (it clears what it touched).
  f.buf_lines.assign(4 * f.bufs.size(), 0.0);
  f.buf_written.assign(f.bufs.size(), 0);
  f.scattered.assign(f.bufs.size(), 0);
}

// The cache levels as the footprints see them (conflicts in L1 and L2 only).
void cache_geometry(const MachineProfile& m, CacheGeometry geo[4]) {
  geo[0] = {m.l1_bytes / (kLineBytes * m.l1_ways), m.l1_ways};
  geo[1] = {m.l2_bytes / (kLineBytes * m.l2_ways), m.l2_ways};
  geo[2] = {0, m.l3_ways};  // the last level hashes its sets
  geo[3] = CacheGeometry{};
}

}  // namespace

void flatten(const ir::Program& p, const MachineProfile& m, Flat& f, CostMemo::Impl* memo) {
  reset_flat(p, f);
  CacheGeometry geo[4];
  cache_geometry(m, geo);
  if (memo) memo_begin(*memo, geo);
  std::vector<int>& chain = f.chain;
  for (size_t t = 0; t < p.body.size(); ++t) {
    const ir::NodePtr& node = p.body[t];
    const int nest = static_cast<int>(t);
    if (memo && memo_append(*memo, node, p, f, nest)) continue;
    const Bases b = bases_of(f);
    const int dropped = f.dropped;
    chain.clear();
    walk_node(f, *node, -1, 0, nest, -1, chain);
    finish_nest(f, b, geo);
    // A nest naming an undeclared buffer is not remembered: a later declaration would change it.
    if (memo && f.dropped == dropped) memo_remember(*memo, node, p, f, b);
  }
  // Keep what this program has: the next one shares most of it (and nothing else is held).
  if (memo) memo_end(*memo);
}

}  // namespace perfdojo::backends::cost_detail
