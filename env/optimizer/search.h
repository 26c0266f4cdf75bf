// One run of Optimizer::transform: the beam search on the cost model (search.cpp) and the
// measured confirmation that decides, with the scaled-down interpreter check (confirm.cpp).
// Internal to the optimiser.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "optimizer/optimizer.h"
#include "transforms/registry.h"

namespace perfdojo::optimizer::detail {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t);

// A vectorised reduction into a lane-invariant target sums lanes in a different order: the one
// reassociation a legal action can introduce. Conservative mode refuses it.
bool reassociates(const ir::Program& p, const transforms::Action& a);
// Statements in the generated code once every `:unroll` scope is copied out: GCC -O3 spends
// tens of seconds on a few thousand lines of unrolled vector code (a 64-copy matmul block: 28 s).
int64_t unrolled_statements(const ir::Program& p);
inline constexpr int64_t kMaxUnrolledStatements = 96;
// The most a micro-kernel sketch may unroll and still raise the search's limit (SearchRun::seed).
inline constexpr int64_t kMaxSketchStatements = 512;
// Whether unrolled code would make compile time, not run time, dominate: more than 64 copies of
// one statement, or more than `max_statements` statements in all.
bool too_much_code(const ir::Program& p, int64_t max_statements = kMaxUnrolledStatements);

// The micro-kernel sketch's expansions at every GEMM-class nest of `p`, one trace per block-size
// candidate (at most kSketchesPerNest): proposed first, measured first.
inline constexpr size_t kSketchesPerNest = 4;
std::vector<std::vector<transforms::Action>> sketch_proposals(const ir::Program& p,
                                                              const transforms::Target& target);

// Neighbouring top-level scopes of equal extent fused while legal, then every innermost scope
// vectorised at the widest width its check accepts (where no width divides its extent, the
// remainder split off first by split_range and left scalar): the form row-wise kernels
// (normalisations, softmax) want, proposed whole because its first step alone rarely pays.
std::vector<transforms::Action> fusion_proposal(const ir::Program& p,
                                                const transforms::Target& target);

// `trace` (a proposal's actions on `p`) followed by stream_stores on every output it may take:
// the form of a memory-bound kernel timed cold, whose results go to memory without a read for
// ownership (saxpy over 8M floats: 2.6 ms against 3.7-4.2 as written or vectorised). Empty when no
// output can stream.
std::vector<transforms::Action> streamed(const ir::Program& p,
                                         std::vector<transforms::Action> trace,
                                         const transforms::Target& target);

// In every top-level nest that is a chain of single scopes over statements, the scope along
// which most accesses are unit-stride (the last index moves by 1 with it, the others not at all)
// moved innermost by swap_scopes, then vectorised as fusion_proposal vectorises: the
// loop order a compiler's interchange for locality picks (A^T x: rows outer, columns inside,
// where the cost model ties it with blocked forms that stream A in short runs). Empty when no
// nest would change.
std::vector<transforms::Action> unit_stride_proposal(const ir::Program& p,
                                                     const transforms::Target& target);

// Where no scope of a chain nest runs along every access at unit stride (or leaves it
// invariant), one can once some buffers are relaid: a scope whose extent is a whole number of
// the widest vectors, along which every written element moves (no sum across the lanes), and
// which every other access leaves invariant or moves at unit coefficient in one dimension. The
// buffers whose such dimension is not the last, and which the nest reuses along some scope,
// are relaid with it last (swap_buffer_dims: an input packed, an output staged, a temporary
// relaid); then the scope goes innermost and is vectorised, as unit_stride_proposal does. A
// transposed convolution y[c2, 2t+r] += x[c1, t] w[c1, c2, r] runs its output channels in the
// lanes this way. Empty when no nest would change.
std::vector<transforms::Action> layout_proposal(const ir::Program& p,
                                                const transforms::Target& target);

// Every trace the optimiser proposes before it searches, in the order it tries them: the sketches,
// each sketch with the rest of the kernel fused and vectorised, the fused form and the same with
// its outputs streamed, the unit-stride order, and the relaid form at the widest width and the
// next one down. Empty members where a proposal has nothing to do. The same traces are the
// agents' demonstrations (agents/demonstrations.h), and every one of them is an action sequence
// of the flat space (tests/optimizer/expert_actions_test.cpp).
// Why no scope of `p` runs on threads: for each nest, its outermost scope and why parallelize
// refuses it (or "" when some scope with at least target.threads iterations is accepted).
std::string why_not_parallel(const ir::Program& p, const transforms::Target& target);

struct ExpertProposals {
  std::vector<std::vector<transforms::Action>> sketches, finished;
  std::vector<transforms::Action> fused, streamed, unit_stride;
  std::vector<std::vector<transforms::Action>> relaid;
  // On a target with threads: the original and each proposal above with parallel_moves after.
  std::vector<std::vector<transforms::Action>> parallel;
  // Every non-empty trace, in that order.
  std::vector<std::vector<transforms::Action>> all() const;
};
ExpertProposals expert_proposals(const ir::Program& p, const transforms::Target& target);

// `trace` replayed on `original` with the checks the search puts every child through (no
// reassociation unless allowed, no unrolled code past too_much_code with `max_statements`);
// nullopt when one fails or an action is refused.
std::optional<ir::Program> replay_as_searched(const ir::Program& original,
                                              const std::vector<transforms::Action>& trace,
                                              const transforms::Target& target,
                                              bool allow_reassociation,
                                              int64_t max_statements = kMaxUnrolledStatements);
// `trace` without the actions it does not need: each action, last first, is dropped when the
// rest still replays as searched and `estimate` gives the result no more time than the
// shortest trace so far. `result` holds the program `trace` leads to on entry, the returned
// trace's on return. Stops early when `over` says so.
std::vector<transforms::Action> drop_unneeded(
    const ir::Program& original, std::vector<transforms::Action> trace, ir::Program& result,
    const transforms::Target& target, bool allow_reassociation,
    const std::function<double(const ir::Program&)>& estimate, const std::function<bool()>& over,
    int64_t max_statements = kMaxUnrolledStatements);

struct Candidate {
  ir::Program program;
  std::vector<transforms::Action> trace;
  double estimate;
};

// The order of the pool of candidates the search measures: estimates in steps of 1% (closer
// than the model can rank: where memory bounds a kernel, one-element copies shave 0.2% off an
// estimate and add seconds of compile time), the shorter trace first within a step, then the
// estimate.
bool by_estimate_then_length(const Candidate& x, const Candidate& y);

// Whether the generated code of `trace` applied to `original` computes what `original` does,
// checked by the interpreter on a scaled-down instance. Where the code compiled but this machine
// has no device to run it (a GPU target here), the interpreter checks the transformed program
// instead, and `*device_unrun` is set. Where no instance small enough to interpret replays the
// trace, a backend that can (Capabilities::verify_against_reference) runs the result at full
// size against the original's sequential build, whose code the interpreter checked on a
// scaled-down instance of the original. `*how` says which check ran.
bool verify_small(const ir::Program& original, const std::vector<transforms::Action>& trace,
                  const transforms::Target& target, const std::string& arch,
                  const backends::BackendConfig& config, bool* device_unrun = nullptr,
                  std::string* how = nullptr);

// verify_small's answer with "could not check" told from "checked, wrong": kVerified with
// `*how` the check that ran; kWrong (the code ran and its outputs differ, or it crashed or
// failed to compile) and kUncheckable (no check could run: no instance small enough and no
// reference to compare with) with `*how` saying why.
enum class Verdict { kVerified, kWrong, kUncheckable };
// The outcome word of a verdict (Report::outcome): "verified", "wrong", "not_verifiable".
inline const char* outcome_of(Verdict v) {
  return v == Verdict::kVerified ? "verified" : v == Verdict::kWrong ? "wrong" : "not_verifiable";
}
Verdict check_small(const ir::Program& original, const std::vector<transforms::Action>& trace,
                    const transforms::Target& target, const std::string& arch,
                    const backends::BackendConfig& config, bool* device_unrun = nullptr,
                    std::string* how = nullptr);

// Whether a failed measurement's error is the code's fault (a wrong result, a crash, a compile
// error) rather than the check's (the interpreter refused, no reference could be built).
bool code_at_fault(const backends::Measurement& m);

// What one transform call works with and finds. `target_backend` measures for real, `model`
// estimates; `res` receives the best verified program and the report's figures.
struct SearchRun {
  SearchRun(const ir::Program& program, double timeout_s, const Progress& progress,
            const std::atomic<bool>* cancel, Mode mode, const transforms::Target& target,
            const std::string& arch, const backends::BackendConfig& config,
            backends::Backend& target_backend, backends::Backend& model, Result& res,
            Clock::time_point start);

  // The search's root: the kernel as written, or with its multiply-adds fused (contract.h) where
  // the mode allows it; `original` is the kernel as written, the baseline and what an unchanged
  // result returns.
  const ir::Program& program;
  const ir::Program* original = &program;
  const double timeout_s;
  const Progress& progress;
  const std::atomic<bool>* cancel;
  const ModeSettings ms;
  const transforms::Target target;
  const std::string& arch;
  const backends::BackendConfig& config;
  backends::Backend& target_backend;
  backends::Backend& model;
  Result& res;
  Report& r;
  const Clock::time_point start;
  // Verified measurements decide; screening runs (no verification, a short budget) only rank.
  backends::MeasureOptions mo, screen, est;

  double start_estimate = INFINITY, best_estimate = INFINITY;
  // too_much_code's statement limit for this run: kMaxUnrolledStatements, or the largest
  // micro-kernel sketch's (seed).
  int64_t code_limit = kMaxUnrolledStatements;
  std::vector<Candidate> pool;  // best distinct candidates of all passes, by estimate
  std::set<uint64_t> in_pool;
  std::vector<Candidate> roots;     // the original, then the replayed proposals
  std::vector<Candidate> proposed;  // the replayed proposals
  double best_screen = INFINITY;
  std::set<uint64_t> measured;

  bool cancelled() const { return cancel && cancel->load(); }
  bool over(double fraction) const {
    // A fixed amount of model work for the beam (config.max_evaluations): the same
    // beam, so the same candidates, on every run that finishes it within 90% of the budget.
    if (fraction == kBeamShare && max_evaluations > 0)
      return r.evaluations >= max_evaluations || seconds_since(start) > timeout_s * 0.9 ||
             cancelled();
    return seconds_since(start) > timeout_s * fraction || cancelled();
  }
  int max_evaluations = 0;  // 0: the beam runs for kBeamShare of the budget
  double estimate(const ir::Program& p);
  // Legal children of `c` that are new to `seen` (when given), with their estimates.
  void children_of(const Candidate& c, std::vector<Candidate>* out, std::set<uint64_t>* seen,
                   double stop_fraction);

  // search.cpp. The roots: the original, the micro-kernel sketches, the fusion proposal and the
  // outside proposals, replayed on this target.
  // `experts` false: the outside proposals alone (the policy-only mode).
  void seed(const std::vector<std::vector<transforms::Action>>& proposals, bool experts = true);
  // Beam search on the cost model from the roots until kBeamShare of the budget is used.
  static constexpr double kBeamShare = 0.5;
  void beam_search();
  // Anytime: the model's favourite (the pool's best) is measured after each pass, and within a
  // pass at most once per kFavouriteInterval of the budget, when it is estimated kFavouriteGain
  // faster than the original; so a kernel whose proposals were no faster has a verified result
  // long before the beam's share ends. Measured programs are not measured again.
  static constexpr double kFavouriteInterval = 0.05, kFavouriteGain = 0.02;
  double last_favourite_s = 0;
  void try_favourite();
  // Outside proposals replayed step by step on this target: beam roots and pool members.
  void replay_proposals(const std::vector<std::vector<transforms::Action>>& proposals, int& used);
  // One pass at `width`: from the roots, keeping the pool's best.
  void beam_pass(int width);
  void keep_in_pool(const std::vector<Candidate>& children);

  // confirm.cpp. Measures candidates against the best so far; true when `q` became it.
  bool try_candidate(const ir::Program& q, const std::vector<transforms::Action>& trace);
  // The replayed proposals measured at once, so a measured best exists within the first
  // seconds (anytime): until kProposalShare of the budget at most.
  static constexpr double kProposalShare = 0.4;
  void measure_proposals();
  // The model's favourites alternated with a measured climb, until the final re-timing's
  // reserve is all that is left.
  void confirm();
  // minimise.cpp. The returned trace without the actions it does not need: each, last first,
  // dropped when the rest replays and the model estimates the result no slower; kept only if
  // the shorter trace verifies and times within kTidyTolerance of the returned one, interleaved.
  // It has the kTidyShare of the budget before the final re-timing's reserve.
  static constexpr double kTidyShare = 0.05;
  static constexpr double kTidyTolerance = 0.01;
  void minimise();
  // The original and the returned program re-timed interleaved (A B A B ...): the report's
  // baseline_s, final_s and speed-up come from this one run.
  void retime_final();
  // Where the original is returned and nothing has checked it yet (too large for the backend's
  // own check): its code on a scaled-down instance; a failure sets r.outcome (wrong or
  // not_verifiable) and r.outcome_why.
  void check_original();
  bool original_checked = false;
  static constexpr int kFinalMinReps = 5;
  // Seconds kept at the end of the budget for retime_final.
  double final_reserve_s() const;
  bool confirm_over() const {
    return seconds_since(start) > timeout_s * (0.97 - kTidyShare) - final_reserve_s() ||
           cancelled();
  }
  // One curve point: the model's best estimate and the measured best so far.
  void record_curve();
  // With two or more cores for the target, `programs` are compiled on another thread while
  // this one measures `measuring` (the previous batch's compiles are waited for first); a no-op
  // on one core, and when `measuring` or any of `programs` runs on threads (it would be timed
  // against the compiler).
  void compile_ahead(const ir::Program& measuring, std::vector<ir::Program> programs);
  // With a backend that measures several programs at once (a measurement farm), the screening
  // runs of the candidates about to be tried are taken together, and try_candidate uses them.
  void screen_ahead(const std::vector<const ir::Program*>& programs);
  std::map<uint64_t, backends::Measurement> screened;
  void finish_compiling();
  std::thread ahead;
  ~SearchRun() { finish_compiling(); }
  // Climbs from the best measured program; whether it moved, and whether its children are
  // exhausted.
  void climb(bool& climbed, bool& exhausted);

  // The climb's state: the best program's children by estimate, whose they are (0: none yet),
  // how many of each program's children were tried, the next favourite.
  std::vector<Candidate> next;
  uint64_t next_of = 0;
  std::map<uint64_t, size_t> children_tried;
  size_t next_favourite = 0;
};

}  // namespace perfdojo::optimizer::detail
