#include "optimizer/search.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "transforms/analysis.h"
#include "transforms/microkernel_sketch.h"

namespace perfdojo::optimizer::detail {
namespace {

// Nested `:unroll` scopes multiply the generated code; past this many copies compile time, not
// run time, dominates.
constexpr int64_t kMaxUnrolledCopies = 64;

int64_t unrolled_copies(const std::vector<ir::NodePtr>& body) {
  int64_t worst = 1;
  for (const auto& c : body) {
    if (!c->is_scope) continue;
    int64_t inner = unrolled_copies(c->body);
    worst = std::max(worst, c->annot == ir::Annot::kUnroll ? c->extent * inner : inner);
  }
  return worst;
}

// The statements unrolled_statements(Program) counts (search.h).
int64_t unrolled_statements(const std::vector<ir::NodePtr>& body) {
  int64_t n = 0;
  for (const auto& c : body)
    n += c->is_scope
             ? unrolled_statements(c->body) * (c->annot == ir::Annot::kUnroll ? c->extent : 1)
             : 1;
  return n;
}

bool by_estimate(const Candidate& x, const Candidate& y) { return x.estimate < y.estimate; }

}  // namespace

bool by_estimate_then_length(const Candidate& x, const Candidate& y) {
  auto step = [](double e) {
    return e > 0 ? static_cast<int64_t>(std::floor(std::log(e) / std::log1p(0.01))) : INT64_MIN;
  };
  const int64_t a = step(x.estimate), b = step(y.estimate);
  if (a != b) return a < b;
  if (x.trace.size() != y.trace.size()) return x.trace.size() < y.trace.size();
  return x.estimate < y.estimate;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool reassociates(const ir::Program& p, const transforms::Action& a) {
  if (a.kind != transforms::Kind::kVectorize) return false;
  const ir::Node* s = transforms::node_at(p, a.path);
  if (!s || !s->is_scope) return false;
  const int d = static_cast<int>(a.path.size()) - 1;
  for (const auto& c : s->body) {
    if (c->is_scope || c->stmt.op == ir::Reduce::kNone) continue;
    bool invariant = true;
    for (const auto& ix : c->stmt.lhs.index) invariant = invariant && ix.coeff(d) == 0;
    if (invariant) return true;
  }
  return false;
}

int64_t unrolled_statements(const ir::Program& p) { return unrolled_statements(p.body); }

bool too_much_code(const ir::Program& p, int64_t max_statements) {
  return unrolled_copies(p.body) > kMaxUnrolledCopies ||
         unrolled_statements(p.body) > max_statements;
}

std::vector<std::vector<transforms::Action>> sketch_proposals(const ir::Program& p,
                                                              const transforms::Target& target) {
  std::vector<std::vector<transforms::Action>> out;
  const size_t choices = std::min(transforms::sketch_choices(p, target), kSketchesPerNest);
  for (size_t c = 0; c < choices; ++c)
    if (auto e = transforms::sketch_program(p, target, c); !e.trace.empty())
      out.push_back(std::move(e.trace));
  return out;
}

std::vector<std::vector<transforms::Action>> ExpertProposals::all() const {
  std::vector<std::vector<transforms::Action>> out = sketches;
  out.insert(out.end(), finished.begin(), finished.end());
  for (const auto* t : {&fused, &streamed, &unit_stride})
    if (!t->empty()) out.push_back(*t);
  out.insert(out.end(), relaid.begin(), relaid.end());
  out.insert(out.end(), parallel.begin(), parallel.end());
  return out;
}

std::string why_not_parallel(const ir::Program& p, const transforms::Target& target) {
  if (!optimizer::parallel_moves(p, target).empty()) return "";
  std::string why;
  for (size_t i = 0; i < p.body.size(); ++i) {
    if (!p.body[i]->is_scope) continue;
    const transforms::Action a{transforms::Kind::kParallelize, {static_cast<int>(i)}, "", "", 0};
    const transforms::Legality l = transforms::check(p, a, target);
    std::string one =
        l.ok() ? "scope " + std::to_string(i) + " (line " + std::to_string(p.body[i]->loc.line) +
                     ") has " + std::to_string(p.body[i]->extent) + " iterations, fewer than the " +
                     std::to_string(target.threads) + " threads"
               : transforms::explain(a, l);
    why += (why.empty() ? "" : "; ") + one;
  }
  return why.empty() ? "no scope to divide" : why;
}

ExpertProposals expert_proposals(const ir::Program& p, const transforms::Target& target) {
  ExpertProposals ex;
  ex.sketches = sketch_proposals(p, target);
  // Each sketch with the rest of the kernel vectorised (attention's softmax between its GEMMs).
  for (const auto& trace : ex.sketches) {
    auto q = transforms::replay(p, trace, target);
    if (!q.ok()) continue;
    auto rest = fusion_proposal(q.value(), target);
    if (rest.empty()) continue;
    ex.finished.push_back(trace);
    ex.finished.back().insert(ex.finished.back().end(), rest.begin(), rest.end());
  }
  ex.fused = fusion_proposal(p, target);
  ex.streamed = streamed(p, ex.fused, target);
  ex.unit_stride = unit_stride_proposal(p, target);
  if (auto relaid = layout_proposal(p, target); !relaid.empty()) {
    ex.relaid.push_back(relaid);
    // Also at the next width down: such a nest loads and stores a vector per FMA, and a core
    // that splits the widest stores in two runs it faster at half width (tconv1d on Zen 4:
    // 0.65 ms at 8 lanes against 0.75 at 16). The measurement picks.
    std::vector<int> widths = target.vector_widths;
    std::sort(widths.rbegin(), widths.rend());
    if (widths.size() >= 2) {
      for (auto& a : relaid)
        if (a.kind == transforms::Kind::kVectorize && a.param == widths[0]) a.param = widths[1];
      ex.relaid.push_back(std::move(relaid));
    }
  }
  // With threads, each of them (and the original) run on all of them: the measurement decides
  // whether a kernel gains (a nest with nothing to divide, or too little work per thread, keeps
  // its one-thread form).
  if (target.parallel && target.threads >= 2) {
    std::vector<std::vector<transforms::Action>> bases = ex.all();
    bases.insert(bases.begin(), std::vector<transforms::Action>{});
    for (auto& trace : bases) {
      auto q = transforms::replay(p, trace, target);
      if (!q.ok()) continue;
      const auto moves = optimizer::parallel_moves(q.value(), target);
      if (moves.empty()) continue;
      trace.insert(trace.end(), moves.begin(), moves.end());
      ex.parallel.push_back(std::move(trace));
    }
  }
  return ex;
}

namespace {

// A proposal in the making: the program so far and the actions that made it. take() applies an
// action when its check accepts it.
struct Proposal {
  ir::Program cur;
  const transforms::Target& target;
  std::vector<transforms::Action> trace = {};
  bool take(const transforms::Action& a) {
    auto q = transforms::apply(cur, a, target);  // refuses an illegal action
    if (!q.ok()) return false;
    cur = std::move(q).value();
    trace.push_back(a);
    return true;
  }
};

// Vectorises the innermost scope at `at` at the widest width its check accepts; where no width
// divides its extent (1025 columns, a 50257-entry vocabulary), splits off the remainder first
// (split_range) and vectorises the first part, the remainder left scalar after it.
void vectorize_innermost(Proposal& pr, const transforms::Path& at) {
  for (int w : pr.target.vector_widths)
    if (pr.take({transforms::Kind::kVectorize, at, "", "", w})) return;
  for (int w : pr.target.vector_widths) {
    Proposal split = pr;
    if (split.take({transforms::Kind::kSplitRange, at, "", "", w}) &&
        split.take({transforms::Kind::kVectorize, at, "", "", w})) {
      pr.cur = std::move(split.cur);
      pr.trace = std::move(split.trace);
      return;
    }
  }
}

}  // namespace

std::vector<transforms::Action> fusion_proposal(const ir::Program& p,
                                                const transforms::Target& target) {
  Proposal pr{p, target};
  // Fuse neighbouring top-level scopes of equal extent while legal (a row's passes then run
  // back to back, the row still in cache)...
  for (bool joined = true; joined;) {
    joined = false;
    for (int i = 0; i + 1 < static_cast<int>(pr.cur.body.size()) && !joined; ++i)
      joined = pr.take({transforms::Kind::kJoinScopes, {i}, "", "", 0});
  }
  // ...then vectorise every innermost scope at the widest width its check accepts.
  std::vector<transforms::Path> innermost;
  std::function<void(const std::vector<ir::NodePtr>&, transforms::Path&)> walk =
      [&](const std::vector<ir::NodePtr>& body, transforms::Path& at) {
        for (size_t i = 0; i < body.size(); ++i) {
          if (!body[i]->is_scope) continue;
          at.push_back(static_cast<int>(i));
          bool leaf = true;
          for (const auto& c : body[i]->body) leaf = leaf && !c->is_scope;
          if (leaf)
            innermost.push_back(at);
          else
            walk(body[i]->body, at);
          at.pop_back();
        }
      };
  transforms::Path at;
  walk(pr.cur.body, at);
  // Later paths first, so tiling inside one innermost scope can never shift a path still to come.
  for (auto it = innermost.rbegin(); it != innermost.rend(); ++it) vectorize_innermost(pr, *it);
  return pr.trace;
}

std::vector<transforms::Action> streamed(const ir::Program& p,
                                         std::vector<transforms::Action> trace,
                                         const transforms::Target& target) {
  auto q = transforms::replay(p, trace, target);
  if (!q.ok()) return {};
  Proposal pr{std::move(q).value(), target, std::move(trace)};
  bool any = false;
  for (const ir::BufferDecl& b : p.buffers)
    if (b.role == ir::Role::kOutput)
      any = pr.take({transforms::Kind::kStreamStores, {}, b.name, "", 0}) || any;
  return any ? pr.trace : std::vector<transforms::Action>{};
}

namespace {

// The depth of the chain of single scopes from a top-level node down to a body of statements
// (0 when the node is not such a chain).
int chain_depth(const ir::Node* n) {
  int depth = 0;
  for (; n->is_scope; n = n->body[0].get()) {
    ++depth;
    bool leaf = !n->body.empty();
    for (const auto& c : n->body) leaf = leaf && !c->is_scope;
    if (leaf) return depth;
    if (n->body.size() != 1) return 0;
  }
  return 0;
}

// Moves the scope at depth `d` of the chain at top-level node `top` innermost by swap_scopes,
// then vectorises it; false (and `pr` as it was) when the dependences forbid the interchange.
bool move_innermost_and_vectorize(Proposal& pr, int top, int d, int depth) {
  transforms::Path at = {top};
  for (int k = 0; k < d; ++k) at.push_back(0);
  const ir::Program before = pr.cur;
  const size_t taken = pr.trace.size();
  for (int k = d; k + 1 < depth; ++k, at.push_back(0))
    if (!pr.take({transforms::Kind::kSwapScopes, at, "", "", 0})) {
      pr.cur = before;
      pr.trace.resize(taken);
      return false;
    }
  transforms::Path inner = {top};
  for (int k = 1; k < depth; ++k) inner.push_back(0);
  vectorize_innermost(pr, inner);
  return true;
}

}  // namespace

std::vector<transforms::Action> unit_stride_proposal(const ir::Program& p,
                                                     const transforms::Target& target) {
  Proposal pr{p, target};
  for (int top = 0; top < static_cast<int>(pr.cur.body.size()); ++top) {
    const int depth = chain_depth(pr.cur.body[top].get());
    if (depth < 2) continue;
    std::vector<int> unit(depth, 0);
    const transforms::AccessSites sites = transforms::collect_accesses(pr.cur.body[top], {});
    for (const auto& site : sites) {
      const auto& index = site.access->index;
      if (index.empty()) continue;
      for (int d = 0; d < depth; ++d) {
        bool u = index.back().coeff(d) == 1;
        for (size_t k = 0; u && k + 1 < index.size(); ++k) u = index[k].coeff(d) == 0;
        unit[d] += u;
      }
    }
    int best = depth - 1;  // the innermost unless another is strictly better
    for (int d = depth - 2; d >= 0; --d)
      if (unit[d] > unit[best]) best = d;
    if (best == depth - 1) continue;
    move_innermost_and_vectorize(pr, top, best, depth);  // else this nest as it was
  }
  return pr.trace;
}

std::vector<transforms::Action> layout_proposal(const ir::Program& p,
                                                const transforms::Target& target) {
  if (target.vector_widths.empty()) return {};
  const int64_t lanes = *std::max_element(target.vector_widths.begin(), target.vector_widths.end());
  Proposal pr{p, target};
  const int nests = static_cast<int>(p.body.size());
  int shift = 0;  // nests an input's packing put in front of the ones still to visit
  for (int t0 = 0; t0 < nests; ++t0) {
    const int top = t0 + shift;
    const int depth = chain_depth(pr.cur.body[top].get());
    if (depth < 2) continue;
    const transforms::AccessSites sites = transforms::collect_accesses(pr.cur.body[top], {});
    // For each scope of the chain that spans whole vectors: the dimension each buffer must
    // move last for every access to run along the scope at unit stride or not move with it.
    int best = -1;
    std::map<std::string, int> best_moves;
    for (int d = 0; d < depth; ++d) {
      const ir::Node* s = pr.cur.body[top].get();
      for (int k = 0; k < d; ++k) s = s->body[0].get();
      if (s->extent < lanes || s->extent % lanes != 0) continue;
      std::map<std::string, int> dim_of;  // buffer -> the dimension that moves with d
      bool ok = true;
      for (const auto& site : sites) {
        if (site.access->buffer.empty()) continue;  // an iterator's value: vectorize decides
        const auto& index = site.access->index;
        int dim = -1;
        for (int k = 0; ok && k < static_cast<int>(index.size()); ++k) {
          const int64_t c = index[k].coeff(d);
          if (c == 0) continue;
          if (c != 1 || dim >= 0) ok = false;
          dim = k;
        }
        // A written element that does not move with d would be a sum across the lanes: that
        // reassociates, and the search refuses it unless allowed.
        if (dim < 0 && site.write) ok = false;
        if (!ok) break;
        if (dim < 0) continue;  // invariant in d: any layout will do
        auto [it, fresh] = dim_of.emplace(site.access->buffer, dim);
        if (!fresh && it->second != dim) ok = false;  // one layout cannot serve both
      }
      if (!ok) continue;
      std::map<std::string, int> moves;
      for (const auto& [buf, dim] : dim_of) {
        const ir::BufferDecl* b = pr.cur.find_buffer(buf);
        if (dim + 1 == static_cast<int>(b->shape.size())) continue;  // already last
        if (b->role == ir::Role::kOutput && !b->init) ok = false;    // cannot be staged
        // The copy costs a pass over the buffer: worth it only where the nest comes back to
        // each element, along a scope the buffer does not move with (a weight across the
        // steps of a convolution, not a matrix a gemv reads once).
        bool reused = false;
        for (int e = 0; e < depth && !reused; ++e) {
          reused = true;
          for (const auto& site : sites)
            if (site.access->buffer == buf)
              for (const auto& x : site.access->index) reused = reused && x.coeff(e) == 0;
        }
        if (!reused) ok = false;
        moves[buf] = dim;
      }
      if (!ok) continue;
      if (moves.empty()) {  // the interchange alone does it: unit_stride_proposal's case
        best = -1;
        break;
      }
      if (best < 0 || moves.size() < best_moves.size()) best = d, best_moves = moves;
    }
    if (best < 0) continue;
    const ir::Program before = pr.cur;
    const size_t taken = pr.trace.size();
    const int shift_before = shift;
    bool ok = true;
    for (const auto& [buf, dim] : best_moves) {
      std::string name = buf;
      const int rank = static_cast<int>(pr.cur.find_buffer(buf)->shape.size());
      for (int k = dim; ok && k + 1 < rank; ++k) {
        const size_t decls = pr.cur.buffers.size(), body = pr.cur.body.size();
        const bool input = pr.cur.find_buffer(name)->role == ir::Role::kInput;
        ok = pr.take({transforms::Kind::kSwapBufferDims, {}, name, "", k});
        if (!ok) break;
        if (pr.cur.buffers.size() > decls) name = pr.cur.buffers.back().name;  // the copy
        if (input && pr.cur.body.size() > body) ++shift;  // its packing nest went first
      }
    }
    if (!ok || !move_innermost_and_vectorize(pr, t0 + shift, best, depth)) {
      pr.cur = before;
      pr.trace.resize(taken);
      shift = shift_before;
    }
  }
  return pr.trace;
}

SearchRun::SearchRun(const ir::Program& program, double timeout_s, const Progress& progress,
                     const std::atomic<bool>* cancel, Mode mode, const transforms::Target& target,
                     const std::string& arch, const backends::BackendConfig& config,
                     backends::Backend& target_backend, backends::Backend& model, Result& res,
                     Clock::time_point start)
    : program(program),
      timeout_s(timeout_s),
      progress(progress),
      cancel(cancel),
      ms(settings_for(mode)),
      target(target),
      arch(arch),
      config(config),
      target_backend(target_backend),
      model(model),
      res(res),
      r(res.report),
      start(start) {
  max_evaluations = std::max<int64_t>(0, config.max_evaluations);
  mo.max_reps = ms.measure_reps;
  mo.min_reps = 3;
  mo.time_budget_s = std::clamp(timeout_s * 0.01, 0.05, 1.0);
  mo.verify = true;
  mo.timeout_s = std::max(2.0, timeout_s * 0.2);
  screen = mo;
  screen.verify = false;
  screen.time_budget_s = std::clamp(timeout_s * 0.002, 0.02, 0.25);
  measured = {ir::structural_hash(program)};
}

void SearchRun::record_curve() {
  // The best measured so far never rises: minimisation may keep a shorter trace up to
  // kTidyTolerance slower than the best (the final re-timing reports what it returns).
  double best = r.final_s;
  if (!r.curve.empty() && r.curve.back().best_measured_s > 0 && best > 0)
    best = std::min(best, r.curve.back().best_measured_s);
  r.curve.push_back({seconds_since(start), r.evaluations, best_estimate, best});
}

double SearchRun::estimate(const ir::Program& p) {
  ++r.evaluations;
  auto m = model.measure(p, est);
  return m.ok() ? m.median_s : INFINITY;
}

void SearchRun::children_of(const Candidate& c, std::vector<Candidate>* out,
                            std::set<uint64_t>* seen, double stop_fraction) {
  for (const auto& a : transforms::legal_actions(c.program, target)) {
    if (over(stop_fraction)) break;
    if (!ms.allow_reassociation && reassociates(c.program, a)) continue;
    ir::Program q = transforms::apply(c.program, a, target).value();
    if (seen && !seen->insert(ir::structural_hash(q)).second) continue;
    if (too_much_code(q, code_limit)) continue;
    double e = estimate(q);
    if (!std::isfinite(e)) continue;
    auto trace = c.trace;
    trace.push_back(a);
    out->push_back({std::move(q), std::move(trace), e});
  }
}

void SearchRun::replay_proposals(const std::vector<std::vector<transforms::Action>>& proposals,
                                 int& used) {
  for (const auto& trace : proposals) {
    Candidate c{program, {}, 0};
    for (const auto& a : trace) {
      if (!ms.allow_reassociation && reassociates(c.program, a)) continue;
      auto q = transforms::apply(c.program, a, target);
      if (!q.ok() || too_much_code(q.value(), code_limit)) continue;
      c.program = std::move(q).value();
      c.trace.push_back(a);
    }
    c.estimate = estimate(c.program);
    if (c.trace.empty() || !std::isfinite(c.estimate)) continue;
    if (!in_pool.insert(ir::structural_hash(c.program)).second) continue;
    ++used;
    roots.push_back(c);
    pool.push_back(c);
    best_estimate = std::min(best_estimate, c.estimate);
  }
}

// A pass that ends early starts again four times as wide: cheap estimates buy breadth while
// there is time.
void SearchRun::seed(const std::vector<std::vector<transforms::Action>>& proposals, bool experts) {
  start_estimate = estimate(program);
  best_estimate = start_estimate;
  roots = {{program, {}, start_estimate}};
  const ExpertProposals ex = experts ? expert_proposals(program, target) : ExpertProposals{};
  // A sketch's register tiles are unrolled in full, in every nest its remainders split off (a
  // 500 x 700 x 300 matmul: 421 statements in eight nests, compiled in 0.6 s). Under the general
  // limit the replay would drop the remainders' unrolls and leave their tiles in memory (7.5 ms
  // against 1.7), so the search's limit rises to the largest sketch, up to kMaxSketchStatements.
  for (const auto& trace : ex.sketches) {
    auto q = transforms::replay(program, trace, target);
    if (!q.ok()) continue;
    const int64_t n = unrolled_statements(q.value());
    if (n <= kMaxSketchStatements) code_limit = std::max(code_limit, n);
    if (std::getenv("PERFDOJO_VERBOSE"))
      fprintf(stderr, "sketch: %lld unrolled statements\n", static_cast<long long>(n));
  }
  replay_proposals(ex.sketches, r.sketches_used);
  replay_proposals(ex.finished, r.sketches_used);
  // The fused, vectorised form, counted with the sketches; timed cold (its data past the
  // last-level cache), the same with its outputs streamed.
  if (!ex.fused.empty()) replay_proposals({ex.fused}, r.sketches_used);
  if (mo.flush_cache && !ex.streamed.empty()) replay_proposals({ex.streamed}, r.sketches_used);
  if (!ex.unit_stride.empty()) replay_proposals({ex.unit_stride}, r.sketches_used);
  if (!ex.relaid.empty()) replay_proposals(ex.relaid, r.sketches_used);
  if (!ex.parallel.empty()) replay_proposals(ex.parallel, r.sketches_used);
  // An outside proposal (a policy's trace) may build the sketch's register tiles itself: the
  // same limit as a sketch's.
  for (const auto& trace : proposals)
    if (auto q = transforms::replay(program, trace, target); q.ok())
      if (const int64_t n = unrolled_statements(q.value()); n <= kMaxSketchStatements)
        code_limit = std::max(code_limit, n);
  replay_proposals(proposals, r.proposals_used);
  proposed.assign(roots.begin() + 1, roots.end());
}

void SearchRun::beam_search() {
  for (int width = ms.beam_width; !over(kBeamShare); width *= 4) {
    beam_pass(width);
    try_favourite();
    if (width > 1 << 16) break;
  }
}

void SearchRun::try_favourite() {
  if (!(r.baseline_s > 0) || pool.empty() || pool.front().trace.empty() ||
      !(pool.front().estimate < start_estimate * (1 - kFavouriteGain)))
    return;
  last_favourite_s = seconds_since(start);
  try_candidate(pool.front().program, pool.front().trace);  // at once if measured before
}

void SearchRun::beam_pass(int width) {
  std::vector<Candidate> beam = roots;
  std::set<uint64_t> seen;
  for (const Candidate& c : roots) seen.insert(ir::structural_hash(c.program));
  for (int depth = 0; depth < ms.max_depth && !over(kBeamShare); ++depth) {
    std::vector<Candidate> children;
    for (const Candidate& c : beam) children_of(c, &children, &seen, kBeamShare);
    if (children.empty()) break;
    std::sort(children.begin(), children.end(), by_estimate);
    if (static_cast<int>(children.size()) > width) children.resize(width);
    beam = children;
    keep_in_pool(children);
    best_estimate = std::min(best_estimate, beam.front().estimate);
    if (seconds_since(start) - last_favourite_s > kFavouriteInterval * timeout_s) try_favourite();
    record_curve();
    if (progress)  // the measured best once there is one, not the model's hope
      progress(std::min(1.0, seconds_since(start) / timeout_s), r.evaluations,
               r.baseline_s > 0 && r.final_s > 0 ? r.baseline_s / r.final_s
                                                 : start_estimate / best_estimate);
  }
}

// The pool keeps the confirm_top * 4 best distinct candidates seen.
void SearchRun::keep_in_pool(const std::vector<Candidate>& children) {
  for (const Candidate& c : children)
    if (in_pool.insert(ir::structural_hash(c.program)).second) pool.push_back(c);
  std::sort(pool.begin(), pool.end(), by_estimate_then_length);
  if (static_cast<int>(pool.size()) > ms.confirm_top * 4) pool.resize(ms.confirm_top * 4);
  in_pool.clear();
  for (const Candidate& c : pool) in_pool.insert(ir::structural_hash(c.program));
}

}  // namespace perfdojo::optimizer::detail

namespace perfdojo::optimizer {

std::vector<transforms::Action> parallel_moves(const ir::Program& p,
                                               const transforms::Target& target) {
  std::vector<transforms::Action> out;
  if (!target.parallel || target.threads < 2) return out;
  // The first scope in pre-order (the outermost first) that parallelize accepts, one move at a
  // time: a move may add a copy-out beside its scope, shifting the paths after it, and the
  // scopes inside a :par one are refused as nested.
  ir::Program cur = p;
  for (bool moved = true; moved;) {
    moved = false;
    for (const transforms::Path& at : transforms::scope_paths(cur)) {
      const transforms::Action a{transforms::Kind::kParallelize, at, "", "", 0};
      if (transforms::node_at(cur, at)->extent < target.threads) continue;
      if (auto q = transforms::apply(cur, a, target); q.ok()) {
        cur = std::move(q).value();
        out.push_back(a);
        moved = true;
        break;
      }
    }
  }
  return out;
}

}  // namespace perfdojo::optimizer
