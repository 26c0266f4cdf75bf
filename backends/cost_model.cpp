#include "backends/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace perfdojo::backends {
namespace {

using ir::Annot;

constexpr double kLineBytes = 64;
constexpr double kIssueWidth = 4;       // uops issued per cycle
constexpr double kLoadsPerCycle = 2;    // load ports
constexpr double kStoresPerCycle = 1;   // store port
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
  bool registers = true;  // small_temp and every index constant once unrolled: no load/store uops
  std::vector<int64_t> row_stride;  // elements between consecutive indices, per dimension
};

struct ScopeInfo {
  int64_t extent;
  Annot annot;
  int depth;
  int parent;      // -1 at the top level
  int nest;        // index of the top-level node it belongs to
  int par;         // the parallel scope it is in (itself included), -1 if none
  bool has_par;    // a parallel scope lies inside it
  double trips;    // how often its body runs: product of the extents down to it
  int acc_begin, acc_end;  // its accesses (depth-first order makes them contiguous)
  int kids_begin, kids_end;  // into the children pool: scope index, or ~statement index
  double f1_bytes = 0;       // footprint of one iteration
  double fall_bytes = 0;     // footprint of one whole execution
  double fall_traffic = 0;   // the same with written lines counted twice (write-back)
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

struct Flat {
  std::vector<BufInfo> bufs;
  std::vector<ScopeInfo> scopes;
  std::vector<StmtInfo> stmts;
  std::vector<AccInfo> accs;
  std::vector<int> chains;      // pool
  std::vector<int64_t> coefs;   // pool
  std::vector<double> lines;    // pool
  std::vector<int> kids;        // pool
  std::vector<int> top;         // top-level children: scope index or ~statement index
  int canon_count = 0;
};

int find_buffer(const Flat& f, const std::string& name) {
  for (size_t i = 0; i < f.bufs.size(); ++i)
    if (f.bufs[i].decl->name == name) return static_cast<int>(i);
  return -1;
}

void add_access(Flat& f, const ir::Access& a, bool write, int stmt, int depth) {
  int b = find_buffer(f, a.buffer);
  if (b < 0) return;  // an unchecked program; the checker reports it
  const BufInfo& bi = f.bufs[b];
  AccInfo ai{b, stmt, write, depth, static_cast<int>(f.coefs.size()), 0, -1, -1};
  f.coefs.resize(f.coefs.size() + depth, 0);
  for (size_t d = 0; d < a.index.size() && d < bi.row_stride.size(); ++d) {
    const ir::Affine& ix = a.index[d];
    for (size_t k = 0; k < ix.coeffs.size() && static_cast<int>(k) < depth; ++k)
      f.coefs[ai.coef_off + k] += ix.coeffs[k] * bi.row_stride[d];
    ai.constant += ix.constant * bi.row_stride[d];
  }
  f.accs.push_back(ai);
}

void add_loads(Flat& f, const ir::Expr& e, int stmt, int depth) {
  if (e.kind == ir::ExprKind::kLoad) add_access(f, e.access, false, stmt, depth);
  for (const auto& a : e.args) add_loads(f, *a, stmt, depth);
}

void walk(Flat& f, const std::vector<ir::NodePtr>& body, int parent, int depth, int nest, int par,
          std::vector<int>& chain, double trips, std::vector<int>& kids_out) {
  for (size_t i = 0; i < body.size(); ++i) {
    const ir::Node& n = *body[i];
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
      s.trips = trips * static_cast<double>(s.extent);
      s.acc_begin = static_cast<int>(f.accs.size());
      f.scopes.push_back(s);
      chain.push_back(idx);
      std::vector<int> kids;
      walk(f, n.body, idx, depth + 1, my_nest, f.scopes[idx].par, chain, f.scopes[idx].trips, kids);
      chain.pop_back();
      ScopeInfo& me = f.scopes[idx];
      me.acc_end = static_cast<int>(f.accs.size());
      me.kids_begin = static_cast<int>(f.kids.size());
      f.kids.insert(f.kids.end(), kids.begin(), kids.end());
      me.kids_end = static_cast<int>(f.kids.size());
      if (me.par >= 0)
        for (int p = idx; p >= 0; p = f.scopes[p].parent) f.scopes[p].has_par = true;
      kids_out.push_back(idx);
    } else {
      int si = static_cast<int>(f.stmts.size());
      StmtInfo st{&n.stmt, depth, static_cast<int>(f.chains.size()), static_cast<int>(f.accs.size()), 0, my_nest};
      f.chains.insert(f.chains.end(), chain.begin(), chain.end());
      add_access(f, n.stmt.lhs, true, si, depth);
      if (n.stmt.op != ir::Reduce::kNone) add_access(f, n.stmt.lhs, false, si, depth);
      add_loads(f, *n.stmt.rhs, si, depth);
      st.acc_end = static_cast<int>(f.accs.size());
      f.stmts.push_back(st);
      kids_out.push_back(~si);
    }
    if (parent < 0) f.top.back() = kids_out.back();
  }
}

// Distinct cache lines one access touches while the iterators of depth >= dmin run over their
// extents and the others stay fixed. Iterators are taken in order of increasing stride: one whose
// stride stays within the contiguous run so far (or within a line) extends the run, a larger one
// repeats it as separate blocks.
double access_lines(const Flat& f, const AccInfo& a, const StmtInfo& s, int dmin) {
  struct Term {
    int64_t stride;
    int64_t span;
  };
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
  const double esz = f.bufs[a.buf].esz;
  double run = 1, blocks = 1;
  for (int j = 0; j < n; ++j) {
    double c = static_cast<double>(terms[j].stride), s2 = static_cast<double>(terms[j].span);
    if (c <= run || c * esz <= kLineBytes) {
      run += c * s2;
    } else {
      blocks *= s2 + 1;
    }
  }
  double lines = blocks * std::ceil(run * esz / kLineBytes);
  return std::min(lines, f.bufs[a.buf].lines);
}

// Footprint in bytes of the accesses [b, e) with iterators of depth >= dmin free. Identical
// accesses count once; a buffer never counts more lines than it has. `traffic` counts written
// buffers twice (the line comes in and is written back).
void footprint(const Flat& f, int b, int e, int dmin, std::vector<double>& canon_lines,
               std::vector<double>& buf_lines, std::vector<char>& buf_written, double* bytes,
               double* traffic) {
  std::fill(canon_lines.begin(), canon_lines.end(), 0.0);
  std::fill(buf_lines.begin(), buf_lines.end(), 0.0);
  std::fill(buf_written.begin(), buf_written.end(), 0);
  for (int i = b; i < e; ++i) {
    const AccInfo& a = f.accs[i];
    if (f.bufs[a.buf].small_temp) continue;
    double l = f.lines[a.lines_off + std::min(dmin, a.depth)];
    canon_lines[a.canon] = std::max(canon_lines[a.canon], l);
    if (a.write) buf_written[a.buf] = 1;
  }
  for (int i = b; i < e; ++i) {
    const AccInfo& a = f.accs[i];
    if (canon_lines[a.canon] > 0) {
      buf_lines[a.buf] += canon_lines[a.canon];
      canon_lines[a.canon] = 0;
    }
  }
  double by = 0, tr = 0;
  for (size_t k = 0; k < buf_lines.size(); ++k) {
    double l = std::min(buf_lines[k], f.bufs[k].lines) * kLineBytes;
    by += l;
    tr += buf_written[k] ? 2 * l : l;
  }
  *bytes = by;
  *traffic = tr;
}

Flat flatten(const ir::Program& p) {
  Flat f;
  f.bufs.reserve(p.buffers.size());
  for (const auto& d : p.buffers) {
    BufInfo b;
    b.decl = &d;
    b.esz = ir::dtype_bytes(d.dtype);
    double el = static_cast<double>(std::max<int64_t>(d.elements(), 1));
    b.lines = std::ceil(el * b.esz / kLineBytes);
    b.small_temp = d.role == ir::Role::kTemp && el <= kRegisterElements;
    b.registers = b.small_temp;
    b.row_stride.assign(d.shape.size(), 1);
    for (int k = static_cast<int>(d.shape.size()) - 2; k >= 0; --k)
      b.row_stride[k] = b.row_stride[k + 1] * d.shape[k + 1];
    f.bufs.push_back(std::move(b));
  }
  f.scopes.reserve(32);
  f.accs.reserve(64);
  std::vector<int> chain;
  std::vector<int> kids;
  walk(f, p.body, -1, 0, 0, -1, chain, 1.0, kids);

  // Canonical ids: accesses with the same buffer, offsets and depth touch the same elements.
  std::vector<int> reps;
  for (auto& a : f.accs) {
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
      a.canon = f.canon_count++;
      reps.push_back(static_cast<int>(&a - f.accs.data()));
    }
  }
  // Lines touched per access for every depth cut, and whether small temporaries stay in
  // registers (every index is fixed once unrolled and vector scopes are expanded).
  for (auto& a : f.accs) {
    const StmtInfo& s = f.stmts[a.stmt];
    a.lines_off = static_cast<int>(f.lines.size());
    for (int d = 0; d <= a.depth; ++d) f.lines.push_back(access_lines(f, a, s, d));
    BufInfo& b = f.bufs[a.buf];
    if (b.registers)
      for (int k = 0; k < a.depth; ++k) {
        Annot an = f.scopes[f.chains[s.chain_off + k]].annot;
        if (f.coefs[a.coef_off + k] != 0 && an != Annot::kUnroll && an != Annot::kVector) b.registers = false;
      }
  }
  std::vector<double> canon_lines(f.canon_count), buf_lines(f.bufs.size());
  std::vector<char> buf_written(f.bufs.size());
  for (auto& s : f.scopes) {
    double t = 0;
    footprint(f, s.acc_begin, s.acc_end, s.depth + 1, canon_lines, buf_lines, buf_written, &s.f1_bytes, &t);
    footprint(f, s.acc_begin, s.acc_end, s.depth, canon_lines, buf_lines, buf_written, &s.fall_bytes,
              &s.fall_traffic);
  }
  return f;
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

bool invariant_at(const Flat& f, const AccInfo& a, int k) { return f.coefs[a.coef_off + k] == 0; }

struct NestCost {
  double core_cycles = 0;   // compute and L1 (per-body maxima, threads applied)
  double l1_cycles = 0;     // the part of core_cycles where loads or stores bound
  double overhead_cycles = 0;
  double bytes[4] = {};
  double level_s[4] = {};
};

struct Model {
  const MachineProfile& m;
  const Flat& f;
  std::vector<NestCost> nests;
  double freq_hz;

  double par_speedup(int par) const {
    if (par < 0) return 1;
    double e = static_cast<double>(f.scopes[par].extent);
    double t = std::min<double>(std::max(m.cores, 1), e);
    return e / std::ceil(e / t);
  }

  // FMA-pipe instructions per cycle at a width (f32 lanes; 1 = scalar).
  double pipe_rate(int lanes) const {
    double peak = lanes >= 16 ? m.peak_gflops_avx512 : lanes > 1 ? m.peak_gflops_avx2 : m.peak_gflops_scalar;
    if (peak <= 0) peak = m.peak_gflops_avx2;
    return std::max(0.25, peak / (2.0 * std::max(lanes, 1) * m.freq_ghz));
  }

  // One group: the statements whose nearest enclosing non-vector scope is `owner` (-1: top
  // level), costed per iteration of that scope.
  void cost_group(int owner, const std::vector<int>& stmts) {
    const double iters = owner < 0 ? 1 : f.scopes[owner].trips;
    double fp = 0, ld = 0, st = 0, uops = 0, div = 0, chain = 0, l1_bytes = 0;
    int par = owner < 0 ? -1 : f.scopes[owner].par;
    int nest = f.stmts[stmts[0]].nest;
    const double hoist_regs = m.native_lanes() >= 16 ? 24 : 12;
    for (int si : stmts) {
      const StmtInfo& s = f.stmts[si];
      const ir::Stmt& stmt = *s.stmt;
      const double esz = ir::dtype_bytes(f.bufs[f.accs[s.acc_begin].buf].decl->dtype);
      // Vector scope (innermost by construction): instructions per execution of it.
      int vec_depth = -1;
      double vec_instr = 1, lanes = 1;
      if (s.depth > 0) {
        const ScopeInfo& in = f.scopes[f.chains[s.chain_off + s.depth - 1]];
        if (in.annot == Annot::kVector) {
          vec_depth = s.depth - 1;
          double native = m.native_lanes() * 4.0 / esz;
          vec_instr = std::ceil(static_cast<double>(in.extent) / native);
          lanes = std::min<double>(static_cast<double>(in.extent), native);
        }
      }
      // Instructions of this statement per iteration of the owner.
      const double n = vec_instr;
      OpCounts ops;
      bool rhs_mul = stmt.rhs->kind == ir::ExprKind::kBinary && stmt.rhs->bin == ir::BinOp::kMul;
      count_ops(*stmt.rhs, stmt.op == ir::Reduce::kAdd && rhs_mul, ops);
      if (stmt.op == ir::Reduce::kAdd && rhs_mul) {
        // The multiply was fused into the accumulation: one FMA.
        ops.fp += 1;
      } else if (stmt.op != ir::Reduce::kNone) {
        ops.fp += 1;
      }
      const int ilanes = static_cast<int>(lanes);
      fp += n * ops.fp / pipe_rate(ilanes);
      div += n * ops.div * (lanes > 1 ? m.div_cycles_vector * lanes / m.native_lanes() : m.div_cycles_scalar);
      fp += n * ops.trans * (lanes > 1 ? m.exp_cycles_vector * lanes / m.native_lanes() : m.exp_cycles_scalar);
      uops += n * (ops.fp + ops.div + ops.trans * 4);

      // Memory instructions: an access invariant in the innermost scopes is hoisted out of them
      // (a load before, a store after); small temporaries indexed by unrolled iterators are
      // registers.
      const AccInfo& target = f.accs[s.acc_begin];
      for (int i = s.acc_begin; i < s.acc_end; ++i) {
        const AccInfo& a = f.accs[i];
        if (f.bufs[a.buf].registers) continue;
        if (i == s.acc_begin + 1 && stmt.op != ir::Reduce::kNone) continue;  // the target's read: below
        // Unrolled copies that differ in the access are separate registers, so hoisting goes on
        // through unrolled scopes while the copies fit in the register file.
        const bool varies_in_vec = vec_depth >= 0 && !invariant_at(f, a, vec_depth);
        double per_owner_iter = vec_depth >= 0 && !varies_in_vec ? 1 : n;
        double regs = varies_in_vec ? n : 1;
        for (int k = (vec_depth >= 0 ? vec_depth : s.depth) - 1; k >= 0; --k) {
          const ScopeInfo& sc = f.scopes[f.chains[s.chain_off + k]];
          if (invariant_at(f, a, k)) {
            per_owner_iter /= static_cast<double>(sc.extent);
          } else if (sc.annot == Annot::kUnroll && regs * static_cast<double>(sc.extent) <= hoist_regs) {
            regs *= static_cast<double>(sc.extent);
          } else {
            break;
          }
        }
        if (vec_depth >= 0 && !varies_in_vec && a.write) uops += 2 * std::log2(std::max(2.0, lanes));  // horizontal sum
        const double width = varies_in_vec ? lanes * esz : esz;
        if (a.write) {
          st += per_owner_iter;
          if (stmt.op != ir::Reduce::kNone) ld += per_owner_iter;  // read-modify-write
          l1_bytes += per_owner_iter * width * (stmt.op != ir::Reduce::kNone ? 2 : 1);
        } else {
          ld += per_owner_iter;
          l1_bytes += per_owner_iter * width;
        }
      }
      // Dependence chain through a reduction target: carried by the innermost non-vector scope
      // in which the target is invariant; the scopes inside it over which the target varies
      // give independent chains the core overlaps.
      if (stmt.op != ir::Reduce::kNone) {
        double indep = 1;
        int k = s.depth - 1;
        bool carried = false;
        for (; k >= 0; --k) {
          const ScopeInfo& sc = f.scopes[f.chains[s.chain_off + k]];
          if (k == vec_depth) {
            if (!invariant_at(f, target, k)) indep *= vec_instr;
            continue;
          }
          if (invariant_at(f, target, k)) {
            carried = sc.extent > 1;
            break;
          }
          indep *= static_cast<double>(sc.extent);
        }
        if (carried) {
          // Executions of this statement per iteration of the owner, over the chains.
          double per_iter = (vec_depth >= 0 && invariant_at(f, target, vec_depth)) ? 1 : n;
          double lat = m.fma_latency_cycles;
          chain = std::max(chain, per_iter * lat / indep);
        }
      }
    }
    // Loop bookkeeping of the owner and its vector scopes, when they are real loops.
    double ovh = 0;
    if (owner >= 0 && f.scopes[owner].annot != Annot::kUnroll) ovh = m.loop_overhead_uops;
    uops += ld + st + ovh;
    double core = std::max({fp, div, ld / kLoadsPerCycle, st / kStoresPerCycle, uops / kIssueWidth, chain});
    double sp = par_speedup(par);
    NestCost& nc = nests[nest];
    nc.core_cycles += iters * core / sp;
    if (core == ld / kLoadsPerCycle || core == st / kStoresPerCycle) nc.l1_cycles += iters * core / sp;
    nc.bytes[0] += iters * l1_bytes;
  }

  // Bytes served from below a cache of `cap` bytes during `mult` executions of scope s.
  void traffic(int s, double mult, double cap, int level) {
    const ScopeInfo& sc = f.scopes[s];
    if (sc.f1_bytes <= cap) {
      add_traffic(sc.nest, level, mult * sc.fall_traffic, sc.par >= 0 || sc.has_par ? par_of(s) : -1);
      return;
    }
    double m2 = mult * static_cast<double>(sc.extent);
    for (int k = sc.kids_begin; k < sc.kids_end; ++k) {
      int kid = f.kids[k];
      if (kid >= 0) {
        traffic(kid, m2, cap, level);
      } else {
        add_traffic(sc.nest, level, m2 * stmt_bytes(~kid), sc.par);
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

  double stmt_bytes(int si) const {
    const StmtInfo& s = f.stmts[si];
    double b = 0;
    for (int i = s.acc_begin; i < s.acc_end; ++i) {
      const AccInfo& a = f.accs[i];
      if (f.bufs[a.buf].small_temp) continue;
      if (i == s.acc_begin + 1 && s.stmt->op != ir::Reduce::kNone) continue;
      b += kLineBytes * (a.write ? 2 : 1);
    }
    return b;
  }

  void add_traffic(int nest, int level, double bytes, int par) {
    double bw = level == 1 ? m.l2_bw_gbs : level == 2 ? m.l3_bw_gbs : m.dram_bw_gbs;
    double sp = par_speedup(par);
    if (level == 3) sp = std::min(sp, std::max(1.0, m.dram_bw_all_gbs / m.dram_bw_gbs));
    nests[nest].bytes[level] += bytes;
    nests[nest].level_s[level] += bytes / (bw * 1e9) / sp;
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

CostEstimate estimate_cost(const ir::Program& p, const MachineProfile& m) {
  CostEstimate out;
  out.flops = flop_count(p);
  Flat f = flatten(p);
  Model md{m, f, std::vector<NestCost>(f.top.size()), m.freq_ghz * 1e9};

  // Compute: group statements by their nearest non-vector enclosing scope.
  {
    std::vector<int> group;
    auto owner_of = [&](const StmtInfo& s) {
      for (int k = s.depth - 1; k >= 0; --k) {
        int sc = f.chains[s.chain_off + k];
        if (f.scopes[sc].annot != Annot::kVector) return sc;
      }
      return -1;
    };
    // Statements of a group are contiguous in depth-first order except around sibling scopes;
    // collect by owner with a linear scan per owner change.
    std::vector<char> done(f.stmts.size(), 0);
    for (size_t i = 0; i < f.stmts.size(); ++i) {
      if (done[i]) continue;
      int owner = owner_of(f.stmts[i]);
      group.clear();
      for (size_t j = i; j < f.stmts.size(); ++j) {
        if (done[j]) continue;
        if (owner < 0 ? (f.stmts[j].depth == 0 && j == i) : owner_of(f.stmts[j]) == owner) {
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
    double execs = sc.trips / static_cast<double>(sc.extent);
    NestCost& nc = md.nests[sc.nest];
    double sp = md.par_speedup(sc.par);
    if (sc.annot == Annot::kParallel) {
      nc.overhead_cycles += execs * m.fork_join_us * 1e-6 * md.freq_hz;
      sp = 1;
    }
    if (sc.annot == Annot::kUnroll || sc.annot == Annot::kVector) continue;
    bool has_stmt = false;
    for (int k = sc.kids_begin; k < sc.kids_end; ++k) has_stmt = has_stmt || f.kids[k] < 0;
    bool has_vec_kid = false;
    for (int k = sc.kids_begin; k < sc.kids_end; ++k)
      has_vec_kid = has_vec_kid || (f.kids[k] >= 0 && f.scopes[f.kids[k]].annot == Annot::kVector);
    if (!has_stmt && !has_vec_kid) nc.overhead_cycles += sc.trips * m.loop_overhead_uops / kIssueWidth / sp;
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
          md.add_traffic(static_cast<int>(t), level, md.stmt_bytes(~kid), -1);
        }
      }
    }
    // Initial values: the generated code fills those buffers on every call.
    int home = total <= caps[0] ? 0 : total <= caps[1] ? 1 : total <= caps[2] ? 2 : 3;
    const double bw[4] = {m.l1_bw_gbs, m.l2_bw_gbs, m.l3_bw_gbs, m.dram_bw_gbs};
    for (const auto& b : f.bufs) {
      if (!b.decl->init || b.registers) continue;
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
    out.time_s += t + 0.1 * rest + nc.overhead_cycles / md.freq_hz;
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
    CostEstimate e = estimate_cost(p, profile_);
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
};

}  // namespace

std::unique_ptr<Backend> make_cost_model_backend(const BackendConfig& config) {
  return std::make_unique<CostModelBackend>(config);
}

}  // namespace perfdojo::backends
