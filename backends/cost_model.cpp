#include "backends/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <unordered_map>
#include <vector>

namespace perfdojo::backends {
namespace {

using ir::Annot;

constexpr double kLineBytes = 64;
constexpr double kIssueWidth = 4;       // uops issued per cycle
constexpr double kLoadsPerCycle = 2;    // load ports
constexpr double kStoresPerCycle = 1;   // store port
constexpr double kWindowUops = 192;     // uops the out-of-order window holds
constexpr double kCallUops = 20;        // a libm or libmvec exp/log/tanh call
// A line fetched for one element of a large stride costs this many streamed lines: the
// prefetchers do not run ahead of it and a latency-bound loop waits for each.
constexpr double kScatteredLineCost = 2;
// The parts of a nest's time below its slowest one overlap with it only partly.
constexpr double kRestShare = 0.3;
constexpr double kRegisterElements = 64;  // a temporary this small can live in registers
// Fraction of a cache that holds a working set before conflicts and other data evict it.
constexpr double kCacheShare[3] = {0.75, 0.7, 0.6};
// A loop's start and exit (setup, the exit branch), in cycles per execution of the loop.
constexpr double kLoopEntryCycles = 1;

// ---- The flattened program: scopes, statements and accesses in depth-first order. ----

struct BufInfo {
  const ir::BufferDecl* decl;
  double esz;             // bytes per element
  double lines;           // cache lines of the whole buffer
  bool small_temp;        // a temporary of at most kRegisterElements elements: no cache traffic
  int stride_off = 0;      // into Flat::strides: elements between consecutive indices, per dim
};

struct ScopeInfo {
  int64_t extent;
  Annot annot;
  int depth;
  int parent;      // -1 at the top level
  int nest;        // index of the top-level node it belongs to
  int par;         // the parallel scope it is in (itself included), -1 if none
  bool has_par;    // a parallel scope lies inside it
  int acc_begin, acc_end;  // its accesses (depth-first order makes them contiguous)
  int kids_begin, kids_end;  // into the children pool: scope index, or ~statement index
  double f1_bytes[3] = {};   // footprint of one iteration, as each cache level sees it
  double fall_bytes = 0;     // footprint of one whole execution
  double fall_traffic = 0;   // the same with written lines counted twice (write-back)
  double fall_cost = 0;      // the same with scattered lines weighted by their extra cost
};

struct AccInfo {
  int buf;
  int stmt;
  bool write;
  int depth;        // enclosing scopes of its statement
  int coef_off;     // coefficient of each depth's iterator in the linear element offset
  int64_t constant;
  int canon;        // identical accesses share it
  int lines_off;    // lines touched with iterators of depth >= d free, for d = 0..depth
};

struct StmtInfo {
  const ir::Stmt* stmt;
  int depth;
  int chain_off;   // scope index per depth
  int acc_begin, acc_end;
  int nest;
};

// Cache lines one access touches for one choice of free iterators (see access_lines).
struct Lines {
  double lines = 0;
  double blocks = 1;
  double align = 1;
  bool scattered = false;  // one line or less per block: a line fetched for a few elements
};

struct Flat {
  std::vector<BufInfo> bufs;
  std::vector<ScopeInfo> scopes;
  std::vector<StmtInfo> stmts;
  std::vector<AccInfo> accs;
  std::vector<int> chains;      // pool
  std::vector<int64_t> coefs;   // pool
  std::vector<Lines> lines;     // pool
  std::vector<int> kids;        // pool
  std::vector<int64_t> strides;  // pool
  std::vector<int> stack;       // scratch of walk: children of the scopes being walked
  std::vector<int> top;         // top-level children: scope index or ~statement index
  int dropped = 0;              // accesses naming no declared buffer (left out)
  // Scratch of flatten and footprints.
  std::vector<int> chain, reps;
  std::vector<double> canon_lines, buf_lines;
  std::vector<char> buf_written, scattered;
};

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
  }
  f.accs.push_back(ai);
}

void add_loads(Flat& f, const ir::Expr& e, int stmt, int depth) {
  if (e.kind == ir::ExprKind::kLoad) add_access(f, e.access, false, stmt, depth);
  for (const auto& a : e.args) add_loads(f, *a, stmt, depth);
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
    s.extent = std::max<int64_t>(n.extent, 1);
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

// A set-associative cache level, for conflicts: `sets` sets of `ways` lines.
struct CacheGeometry {
  double sets = 0;  // 0: ignore conflicts
  double ways = 8;
};

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
      tr[v] += buf_written[k] ? 2 * l : l;
      if (v == 3) cost += (buf_written[k] ? 2 * l : l) * (scattered[k] ? kScatteredLineCost : 1.0);
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

// What one top-level node contributes to a Flat: its slices of the pools, with every index
// relative to the slice starts (a scope index s is s - first scope, and so on), its footprints
// already computed. Valid while the node, the machine's cache geometry and the buffers its
// accesses name (position and everything the model reads of them) are the same.
struct NestSlice {
  ir::NodePtr node;  // held: the address cannot be reused while it is remembered
  std::vector<ScopeInfo> scopes;
  std::vector<StmtInfo> stmts;
  std::vector<AccInfo> accs;
  std::vector<int> chains, kids;
  std::vector<int64_t> coefs;
  int top = 0;
  struct Buf {
    int index;
    std::string name;
    ir::DType dtype;
    ir::Role role;
    std::vector<int64_t> shape;
  };
  std::vector<Buf> bufs;  // the buffers its accesses name
  uint64_t seen = 0;      // the last estimate that used it
};

// Pool offsets: where a nest's slices start in a Flat.
struct Bases {
  int scopes, stmts, accs, chains, kids, coefs;
};

Bases bases_of(const Flat& f) {
  return {static_cast<int>(f.scopes.size()), static_cast<int>(f.stmts.size()),
          static_cast<int>(f.accs.size()),   static_cast<int>(f.chains.size()),
          static_cast<int>(f.kids.size()),   static_cast<int>(f.coefs.size())};
}

// Moves the indices in a nest's slices by `d` (positive: into a Flat; negative: out of one).
void shift(std::span<ScopeInfo> scopes, std::span<StmtInfo> stmts, std::span<AccInfo> accs,
           std::span<int> chains, std::span<int> kids, int& top, const Bases& d, int nest) {
  auto kid = [&](int k) { return k >= 0 ? k + d.scopes : ~(~k + d.stmts); };
  for (auto& s : scopes) {
    if (s.parent >= 0) s.parent += d.scopes;
    if (s.par >= 0) s.par += d.scopes;
    s.nest = nest;
    s.acc_begin += d.accs;
    s.acc_end += d.accs;
    s.kids_begin += d.kids;
    s.kids_end += d.kids;
  }
  for (auto& s : stmts) {
    s.chain_off += d.chains;
    s.acc_begin += d.accs;
    s.acc_end += d.accs;
    s.nest = nest;
  }
  for (auto& a : accs) {
    a.stmt += d.stmts;
    a.coef_off += d.coefs;
  }
  for (int& c : chains) c += d.scopes;
  for (int& k : kids) k = kid(k);
  top = kid(top);
}

template <class T>
std::span<T> tail(std::vector<T>& v, int from) {
  return {v.data() + from, v.size() - static_cast<size_t>(from)};
}

}  // namespace

struct CostMemo::Impl {
  std::unordered_map<const ir::Node*, NestSlice> nests;
  double geometry[4] = {};
  uint64_t epoch = 0;
  uint64_t hits = 0, misses = 0;
};

namespace {

bool same_buffer(const NestSlice::Buf& b, const ir::BufferDecl& d) {
  return b.dtype == d.dtype && b.role == d.role && b.shape == d.shape && b.name == d.name;
}

// Appends a remembered nest as top-level node `nest`.
void append(const NestSlice& n, Flat& f, int nest) {
  const Bases b = bases_of(f);
  f.scopes.insert(f.scopes.end(), n.scopes.begin(), n.scopes.end());
  f.stmts.insert(f.stmts.end(), n.stmts.begin(), n.stmts.end());
  f.accs.insert(f.accs.end(), n.accs.begin(), n.accs.end());
  f.chains.insert(f.chains.end(), n.chains.begin(), n.chains.end());
  f.kids.insert(f.kids.end(), n.kids.begin(), n.kids.end());
  f.coefs.insert(f.coefs.end(), n.coefs.begin(), n.coefs.end());
  int top = n.top;
  shift(tail(f.scopes, b.scopes), tail(f.stmts, b.stmts), tail(f.accs, b.accs),
        tail(f.chains, b.chains), tail(f.kids, b.kids), top, b, nest);
  f.top.push_back(top);
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

// Fills `f` (whose pools keep their storage from the previous program: cleared, not freed).
// Each top-level node is flattened on its own (every index inside it stays inside it); with a
// memo, a node the previous estimate saw is copied from it instead.
void flatten(const ir::Program& p, const MachineProfile& m, Flat& f, CostMemo::Impl* memo) {
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
  const CacheGeometry geo[4] = {{m.l1_bytes / (kLineBytes * m.l1_ways), m.l1_ways},
                                {m.l2_bytes / (kLineBytes * m.l2_ways), m.l2_ways},
                                {0, m.l3_ways},  // the last level hashes its sets
                                CacheGeometry{}};
  if (memo) {
    const double g[4] = {geo[0].sets, geo[0].ways, geo[1].sets, geo[1].ways};
    if (!std::equal(g, g + 4, memo->geometry)) {
      memo->nests.clear();
      std::copy(g, g + 4, memo->geometry);
    }
    ++memo->epoch;
  }
  std::vector<int>& chain = f.chain;
  for (size_t t = 0; t < p.body.size(); ++t) {
    const ir::NodePtr& node = p.body[t];
    const int nest = static_cast<int>(t);
    if (memo) {
      auto it = memo->nests.find(node.get());
      if (it != memo->nests.end()) {
        bool valid = true;
        for (const auto& b : it->second.bufs)
          valid = valid && b.index < static_cast<int>(p.buffers.size()) &&
                  same_buffer(b, p.buffers[b.index]);
        if (valid) {
          it->second.seen = memo->epoch;
          ++memo->hits;
          append(it->second, f, nest);
          continue;
        }
        memo->nests.erase(it);
      }
      ++memo->misses;
    }
    const Bases b = bases_of(f);
    const int dropped = f.dropped;
    chain.clear();
    walk_node(f, *node, -1, 0, nest, -1, chain);
    finish_nest(f, b, geo);
    // A nest naming an undeclared buffer is not remembered: a later declaration would change it.
    if (!memo || f.dropped != dropped) continue;
    NestSlice* slice = &memo->nests[node.get()];
    slice->node = node;
    slice->seen = memo->epoch;
    slice->scopes.assign(f.scopes.begin() + b.scopes, f.scopes.end());
    slice->stmts.assign(f.stmts.begin() + b.stmts, f.stmts.end());
    slice->accs.assign(f.accs.begin() + b.accs, f.accs.end());
    slice->chains.assign(f.chains.begin() + b.chains, f.chains.end());
    slice->kids.assign(f.kids.begin() + b.kids, f.kids.end());
    slice->coefs.assign(f.coefs.begin() + b.coefs, f.coefs.end());
    slice->top = f.top.back();
    const Bases back{-b.scopes, -b.stmts, -b.accs, -b.chains, -b.kids, -b.coefs};
    shift(slice->scopes, slice->stmts, slice->accs, slice->chains, slice->kids, slice->top, back,
          0);
    slice->bufs.clear();
    for (const auto& a : slice->accs) {
      if (std::any_of(slice->bufs.begin(), slice->bufs.end(),
                      [&](const auto& x) { return x.index == a.buf; }))
        continue;
      const ir::BufferDecl& d = p.buffers[a.buf];
      slice->bufs.push_back({a.buf, d.name, d.dtype, d.role, d.shape});
    }
  }
  // Keep what this program has: the next one shares most of it (and nothing else is held).
  if (memo) std::erase_if(memo->nests, [&](const auto& e) { return e.second.seen != memo->epoch; });
}

// ---- Compute: instructions per loop body, ports and dependence chains. ----

struct OpCounts {
  double fp = 0;     // add, mul, fma, max, min, compare-select, cast: one pipe slot each
  double div = 0;    // divides and square roots (the divider)
  double trans = 0;  // exp, log, tanh
};

void count_ops(const ir::Expr& e, bool fused_into_parent, OpCounts& c) {
  switch (e.kind) {
    case ir::ExprKind::kConst:
    case ir::ExprKind::kLoad: break;
    case ir::ExprKind::kUnary:
      switch (e.un) {
        case ir::UnOp::kExp:
        case ir::UnOp::kLog: c.trans += 1; break;
        case ir::UnOp::kTanh: c.trans += 1.5; break;
        case ir::UnOp::kSqrt: c.div += 1; break;
        case ir::UnOp::kRsqrt: c.div += 2; break;
        default: c.fp += 1; break;
      }
      break;
    case ir::ExprKind::kBinary:
      if (e.bin == ir::BinOp::kDiv) {
        c.div += 1;
      } else if (!fused_into_parent) {
        c.fp += 1;
      }
      break;
    case ir::ExprKind::kSelect: c.fp += 2; break;
  }
  // A multiply feeding an add or subtract becomes one FMA with it (GCC contracts by default).
  bool is_addsub = e.kind == ir::ExprKind::kBinary && (e.bin == ir::BinOp::kAdd || e.bin == ir::BinOp::kSub);
  bool fused_one = false;
  for (const auto& a : e.args) {
    bool fuse = is_addsub && !fused_one && a->kind == ir::ExprKind::kBinary && a->bin == ir::BinOp::kMul;
    fused_one = fused_one || fuse;
    count_ops(*a, fuse, c);
  }
}

struct NestCost {
  double core_cycles = 0;   // compute and L1 (per-body maxima, threads applied)
  double l1_cycles = 0;     // the part of core_cycles where loads or stores bound
  double overhead_cycles = 0;
  double bytes[4] = {};
  double level_s[4] = {};
};

// How the generated C runs a scope's iterations: `lanes` at a time (an explicit `:vec` scope,
// or a loop GCC -O3 vectorises on its own), in `chunks` = ceil(extent / lanes) steps.
struct ScopeRun {
  double lanes = 1;
  double chunks = 1;
  double trips = 1;  // steps of this scope over the whole run: product of chunks down to it
  bool unrolled = false;  // written out as copies: no loop bookkeeping, copies can be registers
};

bool has_trans(const ir::Expr& e) {
  if (e.kind == ir::ExprKind::kUnary &&
      (e.un == ir::UnOp::kExp || e.un == ir::UnOp::kLog || e.un == ir::UnOp::kTanh))
    return true;
  for (const auto& a : e.args)
    if (has_trans(*a)) return true;
  return false;
}

// The Model's vectors, kept per thread with the Flat: their storage outlives one estimate.
struct ModelStorage {
  std::vector<NestCost> nests;
  std::vector<ScopeRun> run;
  std::vector<char> reg_early, reg;
  std::vector<std::pair<double, int>> group_cycles;
  // Scratch of plan_vectors and estimate_cost.
  std::vector<char> early, unrolled, flat, flat_late, has_vec, done;
  std::vector<double> copies;
  std::vector<int> group, owners;
};

struct Model {
  const MachineProfile& m;
  const Flat& f;
  ModelStorage& x;
  std::vector<NestCost>& nests = x.nests;
  double freq_hz = m.freq_ghz * 1e9;
  std::vector<ScopeRun>& run = x.run;
  // Small temporaries whose every index is fixed once unrolled scopes are written out (and
  // vector scopes expanded) become registers: before vectorisation (`reg_early`, GCC's scalar
  // replacement can then privatise them per lane) and in the final code (`reg`: no loads or
  // stores at all).
  std::vector<char>& reg_early = x.reg_early;
  std::vector<char>& reg = x.reg;
  // Per group: core cycles, parallel scope.
  std::vector<std::pair<double, int>>& group_cycles = x.group_cycles;

  // Cycles between two entries of parallel scope p: everything outside it, spread over its
  // entries (its threads idle that long).
  double fork_gap_cycles(int p, double entries) const {
    double outside = 0;
    for (const auto& [cycles, par] : group_cycles)
      if (par != p) outside += cycles;
    return outside / std::max(entries, 1.0);
  }

  double par_speedup(int par) const {
    if (par < 0) return 1;
    double e = static_cast<double>(f.scopes[par].extent);
    double t = std::min<double>(std::max(m.cores, 1), e);
    return std::max(0.05, e / std::ceil(e / t) * (t > 1 ? m.parallel_efficiency : 1.0));
  }

  // FMA-pipe instructions per cycle at a width (f32 lanes; 1 = scalar).
  double pipe_rate(double lanes) const {
    double peak = lanes > 8 ? m.peak_gflops_avx512 : lanes > 1 ? m.peak_gflops_avx2 : m.peak_gflops_scalar;
    double width = lanes > 8 ? 16 : lanes > 1 ? 8 : 1;
    if (peak <= 0) {
      peak = m.peak_gflops_avx2;
      width = 8;
    }
    return std::max(0.25, peak / (2.0 * width * m.freq_ghz));
  }

  // Whether GCC's vectoriser can take the iterations of depth d over every statement inside
  // `scope`: every access unit-stride or invariant in them, no libm call (no vector variants
  // without -ffast-math), and no float reduction into an element invariant in them
  // (reassociation is not allowed). A reduction into a register temporary is allowed when
  // `private_registers` (it is re-initialised per iteration of an outer vectorised loop).
  bool vectorisable(int scope, int d, bool private_registers) const {
    const ScopeInfo& sc = f.scopes[scope];
    for (int i = sc.acc_begin; i < sc.acc_end; ++i) {
      int64_t c = f.coefs[f.accs[i].coef_off + d];
      if (c != 0 && c != 1) return false;
    }
    for (int si = 0; si < static_cast<int>(f.stmts.size()); ++si) {
      const StmtInfo& st = f.stmts[si];
      if (st.acc_begin < sc.acc_begin || st.acc_begin >= sc.acc_end) continue;
      if (has_trans(*st.stmt->rhs)) return false;
      const AccInfo& t = f.accs[st.acc_begin];
      if (f.coefs[t.coef_off + d] != 0) continue;
      if (private_registers && reg_early[t.buf]) continue;
      if (st.stmt->op != ir::Reduce::kNone) return false;
      if (!reg_early[t.buf]) return false;  // every lane stores to one element
    }
    return true;
  }

  // Decides, per scope, whether its iterations are written out (`:unroll`, or a small loop GCC
  // unrolls completely) and how many lanes they run with (`:vec`, or GCC's loop, outer-loop and
  // straight-line vectorisers, tried in that order as GCC -O3 does).
  void plan_vectors() {
    const size_t n = f.scopes.size();
    run.assign(n, ScopeRun{});
    // early: written out before GCC vectorises (`:unroll`, and loops of a few iterations it
    // peels right away); unrolled: also the loops its later complete unrolling takes.
    std::vector<char>& early = x.early;
    std::vector<char>& unrolled = x.unrolled;
    std::vector<char>& flat = x.flat;
    std::vector<char>& flat_late = x.flat_late;
    std::vector<char>& has_vec = x.has_vec;
    early.assign(n, 0);
    unrolled.assign(n, 0);
    flat.assign(n, 1);
    flat_late.assign(n, 1);
    has_vec.assign(n, 0);
    std::vector<double>& copies = x.copies;  // statement copies one execution of the scope prints
    copies.assign(n, 1);
    const double native = m.native_lanes();
    auto floor_pow2 = [](double x) {
      double p = 1;
      while (p * 2 <= x) p *= 2;
      return p;
    };
    // Children come after their parent in depth-first order: walk backwards for bottom-up facts.
    for (size_t s = n; s-- > 0;) {
      const ScopeInfo& sc = f.scopes[s];
      double body = 0;
      for (int k = sc.kids_begin; k < sc.kids_end; ++k) {
        int kid = f.kids[k];
        if (kid < 0) {
          body += 1;
          continue;
        }
        body += copies[kid];
        const bool vec_kid = f.scopes[kid].annot == Annot::kVector;
        if ((!early[kid] && !vec_kid) || !flat[kid]) flat[s] = 0;
        if ((!unrolled[kid] && !vec_kid) || !flat_late[kid]) flat_late[s] = 0;
        if (has_vec[kid] || vec_kid) has_vec[s] = 1;
      }
      const double e = static_cast<double>(sc.extent);
      early[s] = sc.annot == Annot::kUnroll || (sc.annot == Annot::kNone && flat[s] && e <= 4 && e * body <= 32);
      unrolled[s] = early[s] || (sc.annot == Annot::kNone && flat_late[s] && e <= 16 && e * body <= 32);
      copies[s] = unrolled[s] ? e * body : body + 1;
    }
    reg_early.assign(f.bufs.size(), 0);
    reg.assign(f.bufs.size(), 0);
    for (size_t b = 0; b < f.bufs.size(); ++b) reg_early[b] = reg[b] = f.bufs[b].small_temp;
    for (const auto& a : f.accs) {
      if (!reg_early[a.buf] && !reg[a.buf]) continue;  // settled: flags only ever clear
      const StmtInfo& st = f.stmts[a.stmt];
      for (int k = 0; k < a.depth; ++k) {
        if (f.coefs[a.coef_off + k] == 0) continue;
        const int sc = f.chains[st.chain_off + k];
        const bool vec = f.scopes[sc].annot == Annot::kVector;
        if (!vec && !early[sc]) reg_early[a.buf] = 0;
        if (!vec && !unrolled[sc]) reg[a.buf] = 0;
      }
    }
    for (size_t s = 0; s < n; ++s) {
      const ScopeInfo& sc = f.scopes[s];
      const double e = static_cast<double>(sc.extent);
      if (sc.annot == Annot::kVector) {
        run[s].lanes = std::min(e, native);
        continue;
      }
      // The innermost real loop: everything inside it is written out.
      if (early[s] || !flat[s] || has_vec[s] || sc.acc_begin == sc.acc_end) continue;
      if (sc.annot != Annot::kNone && sc.annot != Annot::kParallel) continue;
      const int si = static_cast<int>(s);
      if (vectorisable(si, sc.depth, false)) {
        double lanes = std::min(native, floor_pow2(e));
        if (lanes >= 4) run[s].lanes = lanes;
        continue;
      }
      // Outer loop: across the parent's iterations when this is the only loop the parent holds
      // (statements around it are fine: `s = C[i]; for k ...; C[i] = s`).
      if (sc.annot == Annot::kNone && sc.parent >= 0) {
        const ScopeInfo& p = f.scopes[sc.parent];
        const double lanes = std::min(native, floor_pow2(static_cast<double>(p.extent)));
        int loops = 0;
        for (int k = p.kids_begin; k < p.kids_end; ++k) {
          const int kid = f.kids[k];
          if (kid >= 0 && (!early[kid] || has_vec[kid] || f.scopes[kid].annot == Annot::kVector)) ++loops;
        }
        // Inside an OpenMP region the parameters lose `restrict`, and GCC versions only
        // innermost loops for aliasing: no outer loop storing to a parameter there.
        if (p.annot == Annot::kNone && (p.par < 0 || !subtree_stores_to_parameter(sc.parent)) && loops == 1 &&
            lanes >= 4 && vectorisable(sc.parent, p.depth, true)) {
          run[sc.parent].lanes = lanes;
          continue;
        }
      }
      // Straight-line code: copies of an unrolled scope inside that touch consecutive elements.
      for (size_t u = s + 1; u < n && f.scopes[u].acc_begin < sc.acc_end; ++u) {
        const ScopeInfo& us = f.scopes[u];
        if (!early[u] || us.extent < 4) continue;
        bool inner_unrolled = false;
        for (int k = us.kids_begin; k < us.kids_end; ++k) inner_unrolled = inner_unrolled || f.kids[k] >= 0;
        if (!inner_unrolled && vectorisable(static_cast<int>(u), us.depth, false))
          run[u].lanes = std::min(native, floor_pow2(static_cast<double>(us.extent)));
      }
    }
    for (size_t s = 0; s < n; ++s) {
      const ScopeInfo& sc = f.scopes[s];
      run[s].chunks = std::ceil(static_cast<double>(sc.extent) / run[s].lanes);
      run[s].trips = (sc.parent >= 0 ? run[sc.parent].trips : 1.0) * run[s].chunks;
      run[s].unrolled = unrolled[s];
    }
  }

  // Whether an access invariant in the scope at depth k may be hoisted out of it: always
  // outside OpenMP regions (the kernel's pointers are `restrict`), inside only for an explicit
  // vector scope's own accumulator.
  bool unaliased_outside_par(const StmtInfo& s, int k, int vdepth) const {
    const int sc = f.chains[s.chain_off + k];
    if (f.scopes[sc].par < 0 || !stores_to_parameter(s)) return true;
    return vdepth >= 0 && k == vdepth && f.scopes[sc].annot == Annot::kVector;
  }

  // Whether a statement stores to a kernel parameter (an input or output buffer, not a
  // temporary: those are the kernel's own arrays, which GCC tells apart from any pointer).
  bool stores_to_parameter(const StmtInfo& s) const {
    const AccInfo& t = f.accs[s.acc_begin];
    return !reg[t.buf] && f.bufs[t.buf].decl->role != ir::Role::kTemp;
  }

  // Whether any statement inside scope s stores to a kernel parameter.
  bool subtree_stores_to_parameter(int s) const {
    const ScopeInfo& sc = f.scopes[s];
    for (const auto& st : f.stmts)
      if (st.acc_begin >= sc.acc_begin && st.acc_begin < sc.acc_end && stores_to_parameter(st)) return true;
    return false;
  }

  // One group: the statements whose nearest enclosing non-vector scope is `owner` (-1: top
  // level). Totals over the whole run: instructions, ports, issue and dependence chains.
  void cost_group(int owner, const std::vector<int>& stmts) {
    double fp = 0, ld = 0, st = 0, uops = 0, div = 0, chain = 0, l1_bytes = 0;
    const int par = owner < 0 ? -1 : f.scopes[owner].par;
    const int nest = f.stmts[stmts[0]].nest;
    const double hoist_regs = m.native_lanes() >= 16 ? 24 : 12;
    for (int si : stmts) {
      const StmtInfo& s = f.stmts[si];
      const ir::Stmt& stmt = *s.stmt;
      const AccInfo& target = f.accs[s.acc_begin];
      const double esz = f.bufs[target.buf].esz;
      auto scope_at = [&](int k) { return f.chains[s.chain_off + k]; };
      // The vectorised scope of this statement, if any (the innermost scope or its parent).
      int vdepth = -1;
      double lanes = 1;
      for (int k = s.depth - 1; k >= 0 && k >= s.depth - 2; --k)
        if (run[scope_at(k)].lanes > 1) {
          vdepth = k;
          lanes = std::min(run[scope_at(k)].lanes, m.native_lanes() * 4 / esz);
          break;
        }
      const double instr = s.depth > 0 ? run[scope_at(s.depth - 1)].trips : 1.0;
      OpCounts ops;
      bool rhs_mul = stmt.rhs->kind == ir::ExprKind::kBinary && stmt.rhs->bin == ir::BinOp::kMul;
      count_ops(*stmt.rhs, stmt.op == ir::Reduce::kAdd && rhs_mul, ops);
      if (stmt.op != ir::Reduce::kNone) ops.fp += 1;  // the accumulation (an FMA with a product)
      fp += instr * ops.fp / pipe_rate(lanes);
      div += instr * ops.div * (lanes > 1 ? m.div_cycles_vector * lanes / m.native_lanes() : m.div_cycles_scalar);
      // exp, log, tanh: a call per vector (libmvec) or per element, as the profile measured.
      fp += instr * ops.trans * (lanes > 1 ? lanes * m.exp_cycles_vector / m.native_lanes() : m.exp_cycles_scalar);
      uops += instr * (ops.fp + ops.div + ops.trans * kCallUops);

      // Memory instructions. An access is loaded once per iteration of the loops it varies in
      // and of every loop outside them: invariant loops inside are hoisted over, and so are
      // unrolled copies (and vector chunks) that differ in it, while they fit in registers.
      for (int i = s.acc_begin; i < s.acc_end; ++i) {
        const AccInfo& a = f.accs[i];
        if (reg[a.buf]) continue;
        if (i == s.acc_begin + 1 && stmt.op != ir::Reduce::kNone) continue;  // the target's read: below
        double count = 1, regs = 1;
        bool hoisting = true;
        for (int k = s.depth - 1; k >= 0; --k) {
          const int sc = scope_at(k);
          const bool varies = f.coefs[a.coef_off + k] != 0;
          // Inside an OpenMP region the buffers reach the code through a shared struct without
          // `restrict`: GCC cannot prove a store does not alias a load and keeps both in the
          // loop. (Explicit vector accumulators are locals: unaffected.)
          if (hoisting && !varies && unaliased_outside_par(s, k, vdepth)) continue;
          if (hoisting) {
            const bool copies = run[sc].unrolled || f.scopes[sc].annot == Annot::kVector;
            if (copies && regs * run[sc].chunks <= hoist_regs) {
              regs *= run[sc].chunks;
              count *= run[sc].chunks;
              continue;
            }
            hoisting = false;
          }
          count *= run[sc].chunks;
        }
        const bool vector = vdepth >= 0 && f.coefs[a.coef_off + vdepth] != 0;
        const double width = vector ? lanes * esz : esz;
        if (a.write) {
          st += count;
          if (stmt.op != ir::Reduce::kNone) ld += count;  // read-modify-write
          l1_bytes += count * width * (stmt.op != ir::Reduce::kNone ? 2 : 1);
          // A vector accumulation into one element ends with a sum across the lanes.
          if (vdepth >= 0 && !vector) uops += count * lanes;
        } else {
          ld += count;
          l1_bytes += count * width;
        }
      }
      // Dependence chains through a reduction target. From the statement outward: the scopes
      // in which the target stays the same make one serial segment of `seg` updates; the
      // scopes around them over which it changes (and vector chunks, separate accumulators)
      // give independent segments, which the out-of-order window overlaps as far as it
      // reaches; the next scope in which the target is again the same waits for the segments
      // of its previous iteration.
      if (stmt.op != ir::Reduce::kNone) {
        const double lat = m.fma_latency_cycles;
        int k = s.depth - 1;
        double seg = 1;
        for (; k >= 0; --k) {
          const int sc = scope_at(k);
          if (f.scopes[sc].annot == Annot::kVector || f.coefs[target.coef_off + k] != 0) break;
          seg *= run[sc].chunks;
        }
        const int inner_varying = k;
        double indep = 1;
        for (; k >= 0; --k) {
          const int sc = scope_at(k);
          if (f.scopes[sc].annot != Annot::kVector && f.coefs[target.coef_off + k] == 0) break;
          indep *= run[sc].chunks;
        }
        const int carrier = k;
        const double seg_uops = seg * (ops.fp + ops.div + 2 * ops.trans + static_cast<double>(s.acc_end - s.acc_begin));
        const double window = std::max(1.0, kWindowUops / std::max(seg_uops, 1.0));
        double bound = 0;
        if (carrier >= 0) bound = run[scope_at(carrier)].trips * seg * lat;
        if (seg > 1) {
          const double segments = inner_varying >= 0 ? run[scope_at(inner_varying)].trips : 1.0;
          bound = std::max(bound, segments * seg * lat / std::min(indep, window));
        }
        chain = std::max(chain, bound);
      }
    }
    // Loop bookkeeping of the owner, when it is a real loop.
    if (owner >= 0 && !run[owner].unrolled) uops += m.loop_overhead_uops * run[owner].trips;
    uops += ld + st;
    double core = std::max({fp, div, ld / kLoadsPerCycle, st / kStoresPerCycle, uops / kIssueWidth, chain});
    double sp = par_speedup(par);
    NestCost& nc = nests[nest];
    nc.core_cycles += core / sp;
    group_cycles.push_back({core / sp, par});
    if (core == ld / kLoadsPerCycle || core == st / kStoresPerCycle) nc.l1_cycles += core / sp;
    nc.bytes[0] += l1_bytes;
  }

  // Bytes served from below a cache of `cap` bytes during `mult` executions of scope s.
  void traffic(int s, double mult, double cap, int level) {
    const ScopeInfo& sc = f.scopes[s];
    if (sc.f1_bytes[level - 1] <= cap) {
      add_traffic(sc.nest, level, mult * sc.fall_traffic, mult * sc.fall_cost, sc.par >= 0 || sc.has_par ? par_of(s) : -1);
      return;
    }
    double m2 = mult * run[s].chunks;  // a vectorised scope steps through its lanes together
    for (int k = sc.kids_begin; k < sc.kids_end; ++k) {
      int kid = f.kids[k];
      if (kid >= 0) {
        traffic(kid, m2, cap, level);
      } else {
        add_traffic(sc.nest, level, m2 * stmt_bytes(~kid, false), m2 * stmt_bytes(~kid, true), sc.par);
      }
    }
  }

  int par_of(int s) const {
    if (f.scopes[s].par >= 0) return f.scopes[s].par;
    // The parallel scope inside s (there is at most one per path; take the first found).
    for (size_t k = s + 1; k < f.scopes.size(); ++k)
      if (f.scopes[k].annot == Annot::kParallel && f.scopes[k].par == static_cast<int>(k)) {
        for (int p = static_cast<int>(k); p >= 0; p = f.scopes[p].parent)
          if (p == s) return static_cast<int>(k);
      }
    return -1;
  }

  // Bytes one execution of a statement brings in when nothing around it stays cached: a line
  // per access (`cost`: weighted when the innermost loop strides past a line per step).
  double stmt_bytes(int si, bool cost) const {
    const StmtInfo& s = f.stmts[si];
    double b = 0;
    for (int i = s.acc_begin; i < s.acc_end; ++i) {
      const AccInfo& a = f.accs[i];
      if (f.bufs[a.buf].small_temp) continue;
      if (i == s.acc_begin + 1 && s.stmt->op != ir::Reduce::kNone) continue;
      double w = 1;
      if (cost && a.depth > 0) {
        int64_t c = f.coefs[a.coef_off + a.depth - 1];
        if ((c < 0 ? -c : c) * f.bufs[a.buf].esz >= kLineBytes) w = kScatteredLineCost;
      }
      b += kLineBytes * (a.write ? 2 : 1) * w;
    }
    return b;
  }

  void add_traffic(int nest, int level, double bytes, double cost, int par) {
    double bw = level == 1 ? m.l2_bw_gbs : level == 2 ? m.l3_bw_gbs : m.dram_bw_gbs;
    double sp = par_speedup(par);
    if (level == 3) sp = std::min(sp, std::max(1.0, m.dram_bw_all_gbs / m.dram_bw_gbs));
    nests[nest].bytes[level] += bytes;
    nests[nest].level_s[level] += cost / (bw * 1e9) / sp;
  }
};

}  // namespace

const char* bound_name(Bound b) {
  switch (b) {
    case Bound::kCompute: return "compute";
    case Bound::kL1: return "L1";
    case Bound::kL2: return "L2";
    case Bound::kL3: return "L3";
    case Bound::kDram: return "DRAM";
    case Bound::kOverhead: return "overhead";
  }
  return "?";
}

CostMemo::CostMemo() : impl_(std::make_unique<Impl>()) {}
CostMemo::~CostMemo() = default;
CostMemo::CostMemo(const CostMemo&) : impl_(std::make_unique<Impl>()) {}
CostMemo& CostMemo::operator=(const CostMemo&) {
  clear();
  return *this;
}
void CostMemo::clear() { impl_ = std::make_unique<Impl>(); }
size_t CostMemo::size() const { return impl_->nests.size(); }
uint64_t CostMemo::hits() const { return impl_->hits; }
uint64_t CostMemo::misses() const { return impl_->misses; }

CostEstimate estimate_cost(const ir::Program& p, const MachineProfile& m) {
  return estimate_cost(p, m, nullptr);
}

CostEstimate estimate_cost(const ir::Program& p, const MachineProfile& m, CostMemo* memo) {
  CostEstimate out;
  out.flops = flop_count(p);
  // One Flat per thread, reused: its pools keep their storage across estimates.
  thread_local Flat f;
  flatten(p, m, f, memo ? memo->impl_.get() : nullptr);
  thread_local ModelStorage storage;
  storage.nests.assign(f.top.size(), NestCost{});
  storage.group_cycles.clear();
  Model md{m, f, storage};
  md.plan_vectors();

  // Compute: group statements by their nearest non-vector enclosing scope.
  {
    std::vector<int>& group = storage.group;
    // The loop a statement's instructions sit in once vector scopes and unrolled scopes are
    // written out.
    auto owner_of = [&](const StmtInfo& s) {
      for (int k = s.depth - 1; k >= 0; --k) {
        int sc = f.chains[s.chain_off + k];
        if (f.scopes[sc].annot != Annot::kVector && !md.run[sc].unrolled) return sc;
      }
      return -1;
    };
    // Statements of a group are contiguous in depth-first order except around sibling scopes;
    // collect by owner with a linear scan per owner change.
    std::vector<char>& done = storage.done;
    done.assign(f.stmts.size(), 0);
    std::vector<int>& owners = storage.owners;
    owners.clear();
    for (const auto& st : f.stmts) owners.push_back(owner_of(st));
    for (size_t i = 0; i < f.stmts.size(); ++i) {
      if (done[i]) continue;
      const int owner = owners[i];
      group.clear();
      for (size_t j = i; j < f.stmts.size(); ++j) {
        if (done[j]) continue;
        if (owners[j] == owner) {
          group.push_back(static_cast<int>(j));
          done[j] = 1;
        }
      }
      md.cost_group(owner, group);
    }
  }
  // Loop overhead outside innermost bodies, loop entries and parallel forks.
  for (size_t s = 0; s < f.scopes.size(); ++s) {
    const ScopeInfo& sc = f.scopes[s];
    const double trips = md.run[s].trips, execs = trips / md.run[s].chunks;
    NestCost& nc = md.nests[sc.nest];
    double sp = md.par_speedup(sc.par);
    if (sc.annot == Annot::kParallel && sc.par == static_cast<int>(s)) {
      // Threads still spinning from the previous entry join cheaply; asleep, they cost a wake-up.
      const double gap_us = md.fork_gap_cycles(static_cast<int>(s), execs) / md.freq_hz * 1e6;
      const double idle = std::clamp(gap_us / std::max(m.fork_spin_us, 1e-9) - 0.5, 0.0, 1.0);
      const double fork_us = m.fork_join_hot_us + idle * std::max(0.0, m.fork_join_us - m.fork_join_hot_us);
      nc.overhead_cycles += execs * fork_us * 1e-6 * md.freq_hz;
      sp = 1;
    }
    if (md.run[s].unrolled || sc.annot == Annot::kVector) continue;
    bool has_stmt = false;
    for (int k = sc.kids_begin; k < sc.kids_end; ++k)
      has_stmt = has_stmt || f.kids[k] < 0 || f.scopes[f.kids[k]].annot == Annot::kVector;
    if (!has_stmt) nc.overhead_cycles += trips * m.loop_overhead_uops / kIssueWidth / sp;
    nc.overhead_cycles += execs * kLoopEntryCycles / sp;
  }
  // Memory: bytes each level serves, from the reuse model at each capacity.
  {
    const double caps[3] = {m.l1_bytes * kCacheShare[0], m.l2_bytes * kCacheShare[1], m.l3_bytes * kCacheShare[2]};
    // The whole program's footprint: what stays cached between calls.
    double total = 0;
    for (const auto& b : f.bufs)
      if (!b.small_temp) total += b.lines * kLineBytes;
    for (int level = 1; level <= 3; ++level) {
      if (total <= caps[level - 1]) continue;  // warm from the previous call
      for (size_t t = 0; t < f.top.size(); ++t) {
        int kid = f.top[t];
        if (kid >= 0) {
          md.traffic(kid, 1, caps[level - 1], level);
        } else {
          md.add_traffic(static_cast<int>(t), level, md.stmt_bytes(~kid, false), md.stmt_bytes(~kid, true), -1);
        }
      }
    }
    // Initial values: the generated code fills those buffers on every call.
    int home = total <= caps[0] ? 0 : total <= caps[1] ? 1 : total <= caps[2] ? 2 : 3;
    const double bw[4] = {m.l1_bw_gbs, m.l2_bw_gbs, m.l3_bw_gbs, m.dram_bw_gbs};
    for (const auto& b : f.bufs) {
      if (!b.decl->init || md.reg[&b - f.bufs.data()]) continue;
      double bytes = b.lines * kLineBytes;
      out.overhead_s += bytes / (bw[home] * 1e9) + bytes / kLineBytes / md.freq_hz;
    }
  }
  // Roofline per nest: the slowest of core time and each level's traffic time, plus overheads.
  double comp_total = 0, l1_total = 0, lvl_total[4] = {};
  for (const auto& nc : md.nests) {
    double core = nc.core_cycles / md.freq_hz;
    double t = std::max({core, nc.level_s[1], nc.level_s[2], nc.level_s[3]});
    double rest = core + nc.level_s[1] + nc.level_s[2] + nc.level_s[3] - t;
    out.time_s += t + kRestShare * rest + nc.overhead_cycles / md.freq_hz;
    out.overhead_s += nc.overhead_cycles / md.freq_hz;
    comp_total += (nc.core_cycles - nc.l1_cycles) / md.freq_hz;
    l1_total += nc.l1_cycles / md.freq_hz;
    for (int k = 0; k < 4; ++k) {
      out.bytes[k] += nc.bytes[k];
      lvl_total[k] += nc.level_s[k];
    }
  }
  out.overhead_s += m.call_overhead_us * 1e-6;
  out.time_s += out.overhead_s - [&] {
    double o = 0;
    for (const auto& nc : md.nests) o += nc.overhead_cycles / md.freq_hz;
    return o;
  }();
  out.compute_s = comp_total;
  out.level_s[0] = l1_total;
  for (int k = 1; k < 4; ++k) out.level_s[k] = lvl_total[k];
  double best = comp_total;
  out.bound = Bound::kCompute;
  const Bound lb[4] = {Bound::kL1, Bound::kL2, Bound::kL3, Bound::kDram};
  for (int k = 0; k < 4; ++k)
    if (out.level_s[k] > best) {
      best = out.level_s[k];
      out.bound = lb[k];
    }
  if (out.overhead_s > best) out.bound = Bound::kOverhead;
  if (!std::isfinite(out.time_s) || out.time_s < 0) out.time_s = 0;
  return out;
}

namespace {

class CostModelBackend final : public Backend {
 public:
  explicit CostModelBackend(BackendConfig c) : config_(std::move(c)) {
    if (!config_.machine_profile.empty()) {
      std::string err;
      auto p = load_profile(config_.machine_profile, &err);
      if (p) {
        profile_ = *p;
      } else {
        error_ = err;
      }
    }
    // extra["threads"]: the cores a parallel scope may use (1: a single-core target).
    if (auto it = config_.extra.find("threads"); it != config_.extra.end()) {
      int t = std::atoi(it->second.c_str());
      if (t >= 1) profile_.cores = std::min(profile_.cores, t);
    }
  }
  std::string name() const override { return "cost_model"; }
  Availability available() const override {
    if (error_) return {false, *error_};
    return {};
  }
  Capabilities capabilities() const override { return {{16, 8}, true, std::max(1, profile_.cores)}; }
  bool deterministic() const override { return true; }
  Measurement measure(const ir::Program& p, const MeasureOptions&) override {
    Measurement m;
    if (error_) {
      m.error = *error_;
      return m;
    }
    CostEstimate e = estimate_cost(p, profile_, &memo_);
    m.median_s = m.min_s = e.time_s;
    m.reps = 0;
    m.verified = false;
    m.flags = "cost_model " + profile_.name;
    return m;
  }
  std::unique_ptr<Backend> clone() const override { return std::make_unique<CostModelBackend>(*this); }

 private:
  BackendConfig config_;
  MachineProfile profile_ = default_profile();
  std::optional<std::string> error_;
  CostMemo memo_;  // the nests of the last program measured (a clone starts with none)
};

}  // namespace

std::unique_ptr<Backend> make_cost_model_backend(const BackendConfig& config) {
  return std::make_unique<CostModelBackend>(config);
}

}  // namespace perfdojo::backends
