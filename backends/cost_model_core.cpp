#include "backends/cost_model_core.h"

#include <algorithm>
#include <cmath>

#include "backends/codegen_c.h"

namespace perfdojo::backends::cost_detail {
namespace {

void count_ops(const ir::Expr& e, bool fused_into_parent, OpCounts& c) {
  switch (e.kind) {
    case ir::ExprKind::kConst:
    case ir::ExprKind::kLoad:
      break;
    case ir::ExprKind::kUnary:
      switch (e.un) {
        case ir::UnOp::kExp:
        case ir::UnOp::kLog:
          c.trans += 1;
          break;
        case ir::UnOp::kTanh:
          c.trans += 1.5;
          break;
        case ir::UnOp::kSin:
        case ir::UnOp::kCos:
          c.trans += 1.5;
          break;
        case ir::UnOp::kSqrt:
          c.div += 1;
          break;
        case ir::UnOp::kRsqrt:
          c.div += 2;
          break;
        default:
          c.fp += 1;
          break;
      }
      break;
    case ir::ExprKind::kBinary:
      if (e.bin == ir::BinOp::kDiv) {
        c.div += 1;
      } else if (!fused_into_parent) {
        c.fp += 1;
      }
      break;
    case ir::ExprKind::kSelect:
      c.fp += 2;
      break;
    case ir::ExprKind::kIndex:
      c.fp += 1;
      break;  // an integer-to-float conversion (an iota add)
    case ir::ExprKind::kFma:
      c.fp += 1;
      break;  // one instruction (the code is built without
              // implicit contraction: only fma fuses)
  }
  for (const auto& a : e.args) count_ops(*a, false, c);
}

bool has_trans(const ir::Expr& e) {
  if (e.kind == ir::ExprKind::kUnary &&
      (e.un == ir::UnOp::kExp || e.un == ir::UnOp::kLog || e.un == ir::UnOp::kTanh ||
       e.un == ir::UnOp::kSin || e.un == ir::UnOp::kCos))
    return true;
  for (const auto& a : e.args)
    if (has_trans(*a)) return true;
  return false;
}

double floor_pow2(double x) {
  double p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

}  // namespace

bool Model::vectorisable(int scope, int d, bool private_registers) const {
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

void Model::plan_vectors() {
  plan_unrolling();
  plan_registers();
  plan_lanes();
  plan_trips();
}

// early: written out before GCC vectorises (`:unroll`, and loops of a few iterations it peels
// right away); unrolled: also the loops its later complete unrolling takes.
void Model::plan_unrolling() {
  const size_t n = f.scopes.size();
  run.assign(n, ScopeRun{});
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
    early[s] = sc.annot == Annot::kUnroll ||
               (sc.annot == Annot::kNone && flat[s] && e <= 4 && e * body <= 32);
    unrolled[s] =
        early[s] || (sc.annot == Annot::kNone && flat_late[s] && e <= 16 && e * body <= 32);
    copies[s] = unrolled[s] ? e * body : body + 1;
  }
}

void Model::plan_registers() {
  const std::vector<char>& early = x.early;
  const std::vector<char>& unrolled = x.unrolled;
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
}

bool Model::dot_scope(int q) const {
  const ScopeInfo& sc = f.scopes[q];
  if (sc.extent != 4 || sc.box != 4 || sc.annot != Annot::kNone ||
      sc.kids_end - sc.kids_begin != 1 || f.kids[sc.kids_begin] >= 0)
    return false;
  const StmtInfo& st = f.stmts[~f.kids[sc.kids_begin]];
  const ir::Stmt& s = *st.stmt;
  if (s.op != ir::Reduce::kAdd || st.acc_end - st.acc_begin != 4) return false;
  const ir::Expr& e = *s.rhs;
  if (e.kind != ir::ExprKind::kBinary || e.bin != ir::BinOp::kMul ||
      e.args[0]->kind != ir::ExprKind::kLoad || e.args[1]->kind != ir::ExprKind::kLoad)
    return false;
  // Accesses: the target, its read, then the operands in order.
  auto type = [&](int i) { return f.bufs[f.accs[st.acc_begin + i].buf].decl->dtype; };
  const ir::DType a = type(2), b = type(3);
  return type(0) == ir::DType::kI32 && ((a == ir::DType::kU8 && b == ir::DType::kI8) ||
                                        (a == ir::DType::kI8 && b == ir::DType::kU8));
}

void Model::plan_lanes() {
  const size_t n = f.scopes.size();
  const std::vector<char>& early = x.early;
  const std::vector<char>& flat = x.flat;
  const std::vector<char>& has_vec = x.has_vec;
  const double native = m.native_lanes();
  for (size_t s = 0; s < n; ++s) {
    const ScopeInfo& sc = f.scopes[s];
    const double e = static_cast<double>(sc.extent);
    if (sc.annot == Annot::kVector) {
      run[s].lanes = std::min(e, native);
      // A vector of 4-term dot products: the scope of 4 is inside the instruction.
      if (sc.kids_end - sc.kids_begin == 1 && f.kids[sc.kids_begin] >= 0 &&
          dot_scope(f.kids[sc.kids_begin]) && dot_rate(run[s].lanes) > 0 && (e == 16 || e == 8))
        run[f.kids[sc.kids_begin]].dot = true;
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
    if (plan_outer_loop(si, native)) continue;
    plan_straight_line(si, native);
  }
}

// Outer loop: across the parent's iterations when this is the only loop the parent holds
// (statements around it are fine: `s = C[i]; for k ...; C[i] = s`).
bool Model::plan_outer_loop(int s, double native) {
  const ScopeInfo& sc = f.scopes[s];
  if (sc.annot != Annot::kNone || sc.parent < 0) return false;
  const std::vector<char>& early = x.early;
  const std::vector<char>& has_vec = x.has_vec;
  const ScopeInfo& p = f.scopes[sc.parent];
  const double lanes = std::min(native, floor_pow2(static_cast<double>(p.extent)));
  int loops = 0;
  for (int k = p.kids_begin; k < p.kids_end; ++k) {
    const int kid = f.kids[k];
    if (kid >= 0 && (!early[kid] || has_vec[kid] || f.scopes[kid].annot == Annot::kVector)) ++loops;
  }
  // Inside an OpenMP region the parameters lose `restrict`, and GCC versions only
  // innermost loops for aliasing: no outer loop storing to a parameter there.
  if (p.annot == Annot::kNone && (p.par < 0 || !subtree_stores_to_parameter(sc.parent)) &&
      loops == 1 && lanes >= 4 && vectorisable(sc.parent, p.depth, true)) {
    run[sc.parent].lanes = lanes;
    run[sc.parent].outer_vectorised = true;
    return true;
  }
  return false;
}

// Straight-line code: copies of an unrolled scope inside that touch consecutive elements.
void Model::plan_straight_line(int s, double native) {
  const std::vector<char>& early = x.early;
  const ScopeInfo& sc = f.scopes[s];
  for (size_t u = static_cast<size_t>(s) + 1;
       u < f.scopes.size() && f.scopes[u].acc_begin < sc.acc_end; ++u) {
    const ScopeInfo& us = f.scopes[u];
    if (!early[u] || us.extent < 4) continue;
    bool inner_unrolled = false;
    for (int k = us.kids_begin; k < us.kids_end; ++k)
      inner_unrolled = inner_unrolled || f.kids[k] >= 0;
    if (!inner_unrolled && vectorisable(static_cast<int>(u), us.depth, false))
      run[u].lanes = std::min(native, floor_pow2(static_cast<double>(us.extent)));
  }
}

// Vector steps of a scope. A `:vec` scope is one register-wide step per `lanes`. A loop GCC
// vectorises itself runs floor(extent / lanes) full steps and an epilogue for the rest: after
// an innermost loop of 16 lanes, one half-width step when 8 or more remain; the rest, and an
// outer-loop vectorisation's whole remainder, one scalar iteration each (a conv2d row of 28
// outputs at 16 lanes: 1 vector step and 12 scalar ones, each a full chain of its reduction).
double Model::chunks_of(const ScopeInfo& sc, const ScopeRun& r) const {
  if (r.dot) return 1;
  const double e = static_cast<double>(sc.extent);
  if (r.lanes <= 1 || sc.annot == Annot::kVector) return std::ceil(e / r.lanes);
  const double full = std::floor(e / r.lanes);
  double rest = e - full * r.lanes;
  double epilogue = 0;
  if (!r.outer_vectorised && r.lanes >= 16 && rest >= r.lanes / 2) {
    epilogue = 1;
    rest -= r.lanes / 2;
  }
  return full + epilogue + rest;
}

void Model::plan_trips() {
  const std::vector<char>& unrolled = x.unrolled;
  for (size_t s = 0; s < f.scopes.size(); ++s) {
    const ScopeInfo& sc = f.scopes[s];
    run[s].chunks = chunks_of(sc, run[s]);
    run[s].trips = (sc.parent >= 0 ? run[sc.parent].trips : 1.0) * run[s].chunks;
    run[s].unrolled = unrolled[s];
  }
}

bool Model::unaliased_outside_par(const StmtInfo& s, int k, int vdepth) const {
  const int sc = f.chains[s.chain_off + k];
  if (f.scopes[sc].par < 0 || !stores_to_parameter(s)) return true;
  return vdepth >= 0 && k == vdepth && f.scopes[sc].annot == Annot::kVector;
}

bool Model::stores_to_parameter(const StmtInfo& s) const {
  const AccInfo& t = f.accs[s.acc_begin];
  return !reg[t.buf] && f.bufs[t.buf].decl->role != ir::Role::kTemp;
}

bool Model::subtree_stores_to_parameter(int s) const {
  const ScopeInfo& sc = f.scopes[s];
  for (const auto& st : f.stmts)
    if (st.acc_begin >= sc.acc_begin && st.acc_begin < sc.acc_end && stores_to_parameter(st))
      return true;
  return false;
}

void Model::compute_groups() {
  const Flat& fl = f;
  std::vector<int>& group = x.group;
  // The loop a statement's instructions sit in once vector scopes and unrolled scopes are
  // written out.
  auto owner_of = [&](const StmtInfo& s) {
    for (int k = s.depth - 1; k >= 0; --k) {
      int sc = fl.chains[s.chain_off + k];
      if (fl.scopes[sc].annot != Annot::kVector && !run[sc].unrolled) return sc;
    }
    return -1;
  };
  // Statements of a group are contiguous in depth-first order except around sibling scopes;
  // collect by owner with a linear scan per owner change.
  std::vector<char>& done = x.done;
  done.assign(fl.stmts.size(), 0);
  std::vector<int>& owners = x.owners;
  owners.clear();
  for (const auto& st : fl.stmts) owners.push_back(owner_of(st));
  for (size_t i = 0; i < fl.stmts.size(); ++i) {
    if (done[i]) continue;
    const int owner = owners[i];
    group.clear();
    for (size_t j = i; j < fl.stmts.size(); ++j) {
      if (done[j]) continue;
      if (owners[j] == owner) {
        group.push_back(static_cast<int>(j));
        done[j] = 1;
      }
    }
    cost_group(owner, group);
  }
}

void Model::cost_group(int owner, const std::vector<int>& stmts) {
  GroupTotals t;
  const int par = owner < 0 ? -1 : f.scopes[owner].par;
  const int nest = f.stmts[stmts[0]].nest;
  const double hoist_regs = m.registers() * 0.75;
  for (int si : stmts) {
    const StmtInfo& s = f.stmts[si];
    const ir::Stmt& stmt = *s.stmt;
    const auto [vdepth, lanes] = stmt_lanes(s);
    const double instr = s.depth > 0 ? run[f.chains[s.chain_off + s.depth - 1]].trips : 1.0;
    OpCounts ops;
    count_ops(*stmt.rhs, ir::fused_update(stmt), ops);
    if (stmt.op != ir::Reduce::kNone) ops.fp += 1;  // the accumulation (an FMA when fused)
    if (vdepth >= 0 && run[f.chains[s.chain_off + s.depth - 1]].dot) {
      ops.fp = 1;  // one vpdpbusd: its own rate
      t.fp += instr / dot_rate(lanes);
    } else {
      t.fp += instr * ops.fp / pipe_rate(lanes);
    }
    t.div += instr * ops.div *
             (lanes > 1 ? m.div_cycles_vector * lanes / m.native_lanes() : m.div_cycles_scalar);
    // exp, log, tanh: a call per vector (libmvec) or per element, as the profile measured.
    t.fp += instr * ops.trans *
            (lanes > 1 ? lanes * m.exp_cycles_vector / m.native_lanes() : m.exp_cycles_scalar);
    // With hardware loops the FPU's sequencer issues the floating-point instructions of an
    // innermost loop: they take none of the integer core's issue slots.
    const bool sequenced = m.hw_loops > 0 && owner >= 0 && !run[owner].unrolled;
    t.uops += instr * ((sequenced ? 0 : ops.fp) + ops.div + ops.trans * kCallUops);
    memory_instructions(s, vdepth, lanes, hoist_regs, t);
    if (stmt.op != ir::Reduce::kNone) t.chain = std::max(t.chain, reduction_chain(s, ops));
  }
  // Stream semantic registers: the first ssr_streams accesses of a real innermost loop are
  // streamed (an affine walk of up to 4 loops set up once per entry), not loaded or stored.
  if (m.ssr_streams > 0 && owner >= 0 && !run[owner].unrolled) {
    const double streamed = std::min(m.ssr_streams, t.streams);
    if (t.streams > 0) {
      t.ld *= 1 - streamed / t.streams;
      t.st *= 1 - streamed / t.streams;
    }
  }
  // Loop bookkeeping of the owner, when it is a real loop (and no hardware loop runs it).
  if (owner >= 0 && !run[owner].unrolled && !(m.hw_loops > 0))
    t.uops += m.loop_overhead_uops * run[owner].trips;
  t.uops += t.ld + t.st;
  double core = std::max({t.fp, t.div, t.ld / m.loads_per_cycle, t.st / m.stores_per_cycle,
                          t.uops / m.issue_width, t.chain});
  double sp = par_speedup(par);
  NestCost& nc = nests[nest];
  nc.core_cycles += core / sp;
  group_cycles.push_back({core / sp, par});
  if (core == t.ld / m.loads_per_cycle || core == t.st / m.stores_per_cycle)
    nc.l1_cycles += core / sp;
  nc.bytes[0] += t.l1_bytes;
}

// The vectorised scope of a statement, if any (the innermost scope or its parent).
std::pair<int, double> Model::stmt_lanes(const StmtInfo& s) const {
  const double esz = f.bufs[f.accs[s.acc_begin].buf].esz;
  for (int k = s.depth - 1; k >= 0 && k >= s.depth - 2; --k) {
    const int sc = f.chains[s.chain_off + k];
    if (run[sc].dot) continue;  // the dot product's lanes are its parent's
    if (run[sc].lanes > 1) return {k, std::min(run[sc].lanes, m.native_lanes() * 4 / esz)};
  }
  return {-1, 1.0};
}

// Memory instructions. An access is loaded once per iteration of the loops it varies in and of
// every loop outside them: invariant loops inside are hoisted over, and so are unrolled copies
// (and vector chunks) that differ in it, while they fit in registers.
void Model::memory_instructions(const StmtInfo& s, int vdepth, double lanes, double hoist_regs,
                                GroupTotals& t) const {
  const ir::Stmt& stmt = *s.stmt;
  const double esz = f.bufs[f.accs[s.acc_begin].buf].esz;
  auto scope_at = [&](int k) { return f.chains[s.chain_off + k]; };
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
    t.streams += a.write && stmt.op != ir::Reduce::kNone ? 2 : 1;
    if (a.write) {
      t.st += count;
      if (stmt.op != ir::Reduce::kNone) t.ld += count;  // read-modify-write
      t.l1_bytes += count * width * (stmt.op != ir::Reduce::kNone ? 2 : 1);
      // A vector accumulation into one element ends with a sum across the lanes.
      if (vdepth >= 0 && !vector) t.uops += count * lanes;
    } else {
      t.ld += count;
      t.l1_bytes += count * width;
    }
  }
}

// Dependence chains through a reduction target. From the statement outward: the scopes in which
// the target stays the same make one serial segment of `seg` updates; the scopes around them
// over which it changes (and vector chunks, separate accumulators) give independent segments,
// which the out-of-order window overlaps as far as it reaches; the next scope in which the
// target is again the same waits for the segments of its previous iteration.
double Model::reduction_chain(const StmtInfo& s, const OpCounts& ops) const {
  const AccInfo& target = f.accs[s.acc_begin];
  auto scope_at = [&](int k) { return f.chains[s.chain_off + k]; };
  // An unfused `+=` is one add per step (some cores add faster than they multiply-add; the
  // product is off the chain); a fused update is an FMA, and max, min and `*=` take about as long.
  const ir::Stmt& st = *s.stmt;
  const bool add = st.op == ir::Reduce::kAdd && !ir::fused_update(st);
  const double lat = add ? m.add_latency_cycles : m.fma_latency_cycles;
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
  const double seg_uops =
      seg * (ops.fp + ops.div + 2 * ops.trans + static_cast<double>(s.acc_end - s.acc_begin));
  const double window = std::max(1.0, m.window_uops / std::max(seg_uops, 1.0));
  double bound = 0;
  if (carrier >= 0) bound = run[scope_at(carrier)].trips * seg * lat;
  // A vector accumulator (a target the lanes share) whose updates the unrolled scope right
  // around the `:vec` one repeats rotates them over its share of kAccumulatorRegisters
  // (codegen_c.h): that many chains instead of one.
  const ScopeInfo* vec =
      carrier >= 0 && carrier == s.depth - 2 ? &f.scopes[scope_at(s.depth - 1)] : nullptr;
  const ScopeInfo* unrolled = vec ? &f.scopes[scope_at(carrier)] : nullptr;
  if (vec && vec->annot == Annot::kVector && f.coefs[target.coef_off + s.depth - 1] == 0 &&
      unrolled->annot == Annot::kUnroll && unrolled->extent >= 2 &&
      unrolled->extent <= CodegenOptions{}.max_unroll) {
    int accumulators = 0;  // the `:vec` scope's updates of targets its lanes share
    for (int k2 = vec->kids_begin; k2 < vec->kids_end; ++k2) {
      const int kid = f.kids[k2];
      if (kid >= 0) continue;
      const StmtInfo& st2 = f.stmts[~kid];
      const AccInfo& t2 = f.accs[st2.acc_begin];
      if (st2.stmt->op != ir::Reduce::kNone && f.coefs[t2.coef_off + s.depth - 1] == 0)
        ++accumulators;
    }
    const double sets = std::floor(static_cast<double>(kAccumulatorRegisters) /
                                   (run[scope_at(s.depth - 1)].chunks * std::max(1, accumulators)));
    if (sets >= 2) bound /= std::min(static_cast<double>(unrolled->extent), sets);
  }
  if (seg > 1) {
    const double segments = inner_varying >= 0 ? run[scope_at(inner_varying)].trips : 1.0;
    bound = std::max(bound, segments * seg * lat / std::min(indep, window));
  }
  return bound;
}

void Model::traffic(int s, double mult, double cap, int level) {
  const ScopeInfo& sc = f.scopes[s];
  if (sc.f1_bytes[level - 1] <= cap) {
    add_traffic(sc.nest, level, mult * sc.fall_traffic, mult * sc.fall_cost,
                sc.par >= 0 || sc.has_par ? par_of(s) : -1);
    return;
  }
  double m2 = mult * run[s].chunks;  // a vectorised scope steps through its lanes together
  for (int k = sc.kids_begin; k < sc.kids_end; ++k) {
    int kid = f.kids[k];
    if (kid >= 0) {
      traffic(kid, m2, cap, level);
    } else {
      add_traffic(sc.nest, level, m2 * stmt_bytes(~kid, false), m2 * stmt_bytes(~kid, true),
                  sc.par);
    }
  }
}

int Model::par_of(int s) const {
  if (f.scopes[s].par >= 0) return f.scopes[s].par;
  // The parallel scope inside s (there is at most one per path; take the first found).
  for (size_t k = s + 1; k < f.scopes.size(); ++k)
    if (f.scopes[k].annot == Annot::kParallel && f.scopes[k].par == static_cast<int>(k)) {
      for (int p = static_cast<int>(k); p >= 0; p = f.scopes[p].parent)
        if (p == s) return static_cast<int>(k);
    }
  return -1;
}

double Model::stmt_bytes(int si, bool cost) const {
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
    b += kLineBytes * (a.write && !f.bufs[a.buf].stream ? 2 : 1) * w;
  }
  return b;
}

void Model::add_traffic(int nest, int level, double bytes, double cost, int par) {
  double bw = level == 1 ? m.l2_bw_gbs : level == 2 ? m.l3_bw_gbs : m.dram_bw_gbs;
  double sp = par_speedup(par);
  if (level == 3) sp = std::min(sp, std::max(1.0, m.dram_bw_all_gbs / m.dram_bw_gbs));
  nests[nest].bytes[level] += bytes;
  nests[nest].level_s[level] += cost / (bw * 1e9) / sp;
}

void Model::loop_overheads() {
  for (size_t s = 0; s < f.scopes.size(); ++s) {
    const ScopeInfo& sc = f.scopes[s];
    const double trips = run[s].trips, execs = trips / run[s].chunks;
    NestCost& nc = nests[sc.nest];
    double sp = par_speedup(sc.par);
    if (sc.annot == Annot::kParallel && sc.par == static_cast<int>(s)) {
      // Threads still spinning from the previous entry join cheaply; asleep, they cost a wake-up.
      const double gap_us = fork_gap_cycles(static_cast<int>(s), execs) / freq_hz * 1e6;
      const double idle = std::clamp(gap_us / std::max(m.fork_spin_us, 1e-9) - 0.5, 0.0, 1.0);
      const double fork_us =
          m.fork_join_hot_us + idle * std::max(0.0, m.fork_join_us - m.fork_join_hot_us);
      nc.overhead_cycles += execs * fork_us * 1e-6 * freq_hz;
      sp = 1;
    }
    if (run[s].unrolled || sc.annot == Annot::kVector) continue;
    bool has_stmt = false;
    for (int k = sc.kids_begin; k < sc.kids_end; ++k)
      has_stmt = has_stmt || f.kids[k] < 0 || f.scopes[f.kids[k]].annot == Annot::kVector;
    if (!has_stmt) nc.overhead_cycles += trips * m.loop_overhead_uops / m.issue_width / sp;
    nc.overhead_cycles += execs * kLoopEntryCycles / sp;
  }
}

void Model::memory_traffic(double& overhead_s) {
  const double caps[3] = {m.l1_bytes * kCacheShare[0], m.l2_bytes * kCacheShare[1],
                          m.l3_bytes * kCacheShare[2]};
  // The whole program's footprint: what stays cached between calls.
  double total = 0;
  for (const auto& b : f.bufs)
    if (!b.small_temp) total += b.lines * kLineBytes;
  for (int level = 1; level <= 3; ++level) {
    if (total <= caps[level - 1]) continue;  // warm from the previous call
    for (size_t t = 0; t < f.top.size(); ++t) {
      int kid = f.top[t];
      if (kid >= 0) {
        traffic(kid, 1, caps[level - 1], level);
      } else {
        add_traffic(static_cast<int>(t), level, stmt_bytes(~kid, false), stmt_bytes(~kid, true),
                    -1);
      }
    }
  }
  // Initial values: the generated code fills those buffers on every call.
  int home = total <= caps[0] ? 0 : total <= caps[1] ? 1 : total <= caps[2] ? 2 : 3;
  const double bw[4] = {m.l1_bw_gbs, m.l2_bw_gbs, m.l3_bw_gbs, m.dram_bw_gbs};
  for (const auto& b : f.bufs) {
    if (!b.fill || reg[&b - f.bufs.data()]) continue;
    double bytes = b.lines * kLineBytes;
    overhead_s += bytes / (bw[home] * 1e9) + bytes / kLineBytes / freq_hz;
  }
  // Streamed stores go to memory even when the program would otherwise stay cached between
  // calls (above, the traffic of the levels it fits in was skipped): the nest of the first
  // statement writing the buffer moves its lines to memory, alongside its cached traffic.
  if (home < 3)
    for (size_t k = 0; k < f.bufs.size(); ++k) {
      if (!f.bufs[k].stream || f.bufs[k].small_temp) continue;
      for (const auto& a : f.accs) {
        if (!a.write || a.buf != static_cast<int>(k)) continue;
        const double bytes = f.bufs[k].lines * kLineBytes;
        add_traffic(f.stmts[a.stmt].nest, 3, bytes, bytes, -1);
        break;
      }
    }
}

}  // namespace perfdojo::backends::cost_detail
