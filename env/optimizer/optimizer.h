// The optimiser performance engineers run: a kernel and an architecture in, the fastest verified
// kernel it can find out. Beam search over legal actions guided by the cost model, with the best
// candidates confirmed by real measurement on the target (which verifies them against the
// interpreter before a time counts).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cross_backend.h"
#include "backends/machine_profile.h"
#include "backends/remote_backend.h"
#include "backends/x86_backend.h"
#include "ir/diagnostic.h"
#include "ir/ir.h"
#include "transforms/action.h"

namespace perfdojo::optimizer {

/// How hard to search and how much numeric freedom to take (docs/optimizer.md).
enum class Mode { kConservative, kBalanced, kAggressive };

/// "conservative" / "balanced" / "aggressive", or nullopt.
std::optional<Mode> mode_by_name(const std::string& name);
/// The mode's name.
const char* mode_name(Mode m);

/// What a mode sets.
struct ModeSettings {
  int beam_width;            ///< programs kept per depth
  int max_depth;             ///< actions per trace at most
  int confirm_top;           ///< best cost-model candidates measured for real
  int measure_reps;          ///< timed repetitions per real measurement (at most)
  bool allow_reassociation;  ///< vectorised reductions may change floating-point evaluation order
  /// Multiply-adds are fused (transforms/contract.h) before the search, on targets with FMA.
  bool allow_contraction = true;
};

/// The settings of a mode.
ModeSettings settings_for(Mode m);

/// One point of the search curve.
struct CurvePoint {
  double elapsed_s;
  int evaluations;
  double best_estimate_s;  ///< cost model's estimate of the best program so far
  double best_measured_s;  ///< measured time of the best verified program so far (0: none yet)
};

/// What `transform` found, with the figures behind it.
struct Report {
  std::string arch, mode;
  /// Measured times of the original and the returned program on the target: at the end, the
  /// two timed interleaved in one process (A B A B ...), medians of `final_reps` each.
  double baseline_s = 0;
  double final_s = 0;
  double baseline_min_s = 0, final_min_s = 0;
  double baseline_spread = 0, final_spread = 0;  ///< (p75 - p25) / median of those runs
  int final_reps = 0;
  bool noisy = false;        ///< the final re-timing's spread stayed above 10%: the core was busy
  bool interleaved = false;  ///< baseline_s and final_s come from one interleaved run
  /// Every timing evicted the kernel's data from the caches before each call (its inputs came
  /// from memory): `config.cache_flush` kOn, or "auto" (the default) for a
  /// memory-bound kernel larger than half the last-level cache (see cold_timing). Warm,
  /// back-to-back calls otherwise.
  bool cache_flushed = false;
  /// The times are the cost model's estimates on the target's profile (a cross target: its
  /// kernels are verified under emulation, never timed).
  bool modelled = false;
  /// The target's code was compiled but never run: this machine has no device for it (a GPU).
  /// The interpreter verified the transformed program; the CUDA printer was not checked.
  bool device_unrun = false;
  double first_measured_s = 0;  ///< when the first candidate faster than the original was verified;
                                ///< 0 when the original is returned
  uint64_t seed = 0;            ///< input data seed of every measurement
  double budget_s = 0;          ///< the time limit transform was given
  double speedup = 1;
  /// Floating-point operations as the returned program executes them (work its moves hoisted
  /// out of a loop counted once), and the original's, beside it.
  double flops = 0, original_flops = 0;
  double gflops = 0;  ///< of the returned program: flops / final_s
  /// gflops / the target's FMA peak per core x threads used (half the peak for f64 kernels),
  /// at most 1: a figure above the profile's peak says the calibration was low (the note says so).
  double peak_fraction = 0;
  int evaluations = 0;      ///< cost-model evaluations
  int measurements = 0;     ///< real measurements (screening runs and verified runs)
  int proposals_used = 0;   ///< outside proposals that replayed to a new program
  int sketches_used = 0;    ///< micro-kernel sketch expansions and the fusion proposal used
  int actions_dropped = 0;  ///< actions the minimisation took out of the returned trace
  bool verified = false;    ///< the returned program passed the correctness check
  /// Which check: "scaled-down instance, interpreter", or "full size, against the original's
  /// sequential build" where no instance small enough to interpret replays the trace.
  std::string verified_on;
  /// One word for what happened, one exit code each (docs/optimizer.md, "Outcomes"):
  /// "verified" (a faster kernel, checked), "unchanged" (nothing measured faster; the original,
  /// checked, is returned), "not_verifiable" (the returned kernel could not be checked: no
  /// instance small enough and no reference), "wrong" (checked, and the original's own code
  /// disagrees with the interpreter: a compiler or code-generator bug), "failed" (the original
  /// could not be compiled or run).
  std::string outcome;
  std::string outcome_why;   ///< for not_verifiable, wrong and failed: what the check said
  bool interrupted = false;  ///< stopped by the deadline or a cancel request
  std::string flags;         ///< compiler and flags of the final measurement
  /// Multiply-adds fused before the search (transforms/contract.h; 0: none, or not allowed).
  /// The trace then applies to the contracted program, which `perfdojo contract` prints.
  int contracted = 0;
  std::string profile;  ///< the cost model's machine profile (name and where it came from)
  int threads = 1;      ///< threads the target may use (1: single core)
  /// With two or more threads: what they did for this kernel, in words. "N parallel scopes on T
  /// threads" when the returned kernel has `:par` scopes; else why not: no scope can run its
  /// iterations at once (the outermost scope of each nest and why parallelize refuses it), or
  /// how many parallel candidates were measured and none was faster than one thread. A kernel
  /// that cannot gain from threads says so here instead of returning a slower parallel version.
  std::string parallel;
  int parallel_candidates = 0;  ///< candidates with `:par` scopes measured
  double peak_gflops = 0;       ///< the target's FMA peak per core, from the profile
  std::vector<CurvePoint> curve;
  /// The measurement farm's ready line (JSON: its workers and their machines); "" when every
  /// measurement ran here.
  std::string workers;
  std::string note;  ///< anything the user should know (e.g. why no speed-up)
};

/// The returned kernel.
struct Result {
  ir::Program program;
  std::vector<transforms::Action> trace;
  std::string c_source;  ///< the generated translation unit
  std::string c_header;  ///< declares `kernel`'s C signature
  Report report;
};

/// Progress callback: (fraction of the time budget used, evaluations, the measured best
/// speed-up so far; the cost model's estimate while nothing is measured).
using Progress = std::function<void(double, int, double)>;

/// An architecture name parsed once per command (Optimizer::make): an x86 ISA measured here,
/// or a cross target modelled on its core and verified under emulation.
struct Arch {
  std::string name;
  std::optional<backends::X86Isa> isa;           ///< set for x86_avx512, x86_avx2, x86_64
  const backends::CrossTarget* cross = nullptr;  ///< set for the cross targets and cuda
  /// nullopt for a name that is neither.
  static std::optional<Arch> parse(const std::string& name);
};

/// An optimiser for one architecture and mode.
class Optimizer {
 public:
  /// `arch`: x86_avx512, x86_avx2 or x86_64 (measured here), or a cross target: aarch64_neon,
  /// aarch64_sve or riscv64_rvv (cross_backend.h: modelled on the target's built-in profile,
  /// every returned kernel cross-compiled and verified under emulation). Errors when unknown or
  /// unavailable here.
  /// `config.threads` caps the threads (1: single core, no parallel scopes). The cost
  /// model reads `config.machine_profile`, else $PERFDOJO_MACHINE_PROFILE, else this machine's
  /// calibrated profile kept in `config.profile_dir`, else in `config.cache_dir`
  /// (calibrated on first use, about 6 s, and kept there), else a fresh calibration;
  /// `config.calibrate = false` uses the built-in profile instead.
  /// `config.cache_flush`: kAuto (default), kOn or kOff (see Report::cache_flushed).
  /// `config.farm_command` (a command line; see backends::farm_command) sends the target's
  /// measurements to a measurement farm (remote_backend.h, docs/ray.md); an error when it does not
  /// start.
  static ir::Result<std::unique_ptr<Optimizer>> make(const std::string& arch, Mode mode,
                                                     const backends::BackendConfig& config = {});
  /// Traces proposed from outside (a trained policy, `perfdojo optimize --agent`): replayed on the
  /// target with every step's legality checked (refused steps are skipped), then searched from
  /// and measured first. They never bypass verification.
  void add_proposals(std::vector<std::vector<transforms::Action>> traces) {
    proposals_ = std::move(traces);
  }
  /// With `on`, transform measures the outside proposals against the original and nothing else:
  /// no sketch, no proposal of its own, no search, no minimisation (`perfdojo optimize --agent
  /// CKPT --policy-only`: what the policy alone reaches, measured and verified as usual).
  void set_policy_only(bool on) { policy_only_ = on; }
  /// The cost model's machine profile for the target: a file (this machine, calibrated) or
  /// "builtin:NAME" (a cross target's core); empty for the built-in AVX-512 profile.
  const std::string& machine_profile() const { return config_.machine_profile; }
  /// Searches for at most `timeout_s` seconds (measurement included). Never returns nothing:
  /// on timeout or cancel it returns the best verified program so far (the original at worst).
  Result transform(const ir::Program& program, double timeout_s, const Progress& progress = {},
                   const std::atomic<bool>* cancel = nullptr);

 private:
  Optimizer(Arch arch, Mode mode, backends::BackendConfig config,
            std::unique_ptr<backends::Backend> target);
  // The report's derived figures, the note, and the generated C of the returned program.
  void finish(Result& res, bool interrupted) const;
  // The target's backend: `local`, measured here, or by the farm when there is one.
  std::unique_ptr<backends::Backend> wrap_target(std::unique_ptr<backends::Backend> local) const;
  std::shared_ptr<backends::Farm> farm_;
  Arch arch_;
  double target_compile_timeout_s_ = 0;  ///< target_'s compile limit (transform sets it)
  Mode mode_;
  std::string profile_note_;
  backends::MachineProfile profile_;
  std::vector<std::vector<transforms::Action>> proposals_;
  bool policy_only_ = false;
  double peak_gflops_ = 0;
  backends::BackendConfig config_;
  std::unique_ptr<backends::Backend> target_;
  std::unique_ptr<backends::Backend> model_;
};

/// Whether `trace` applied to `original` and compiled for `arch` computes what `original` does:
/// the generated code of a scaled-down instance against the interpreter (what the optimiser
/// checks before it returns a kernel).
bool verify_trace(const ir::Program& original, const std::vector<transforms::Action>& trace,
                  const std::string& arch, const backends::BackendConfig& config = {});

/// verify_trace's answer in words: {"verified", the check that ran}, {"wrong", what differed}
/// (the code ran and disagrees, crashed or did not compile) or {"not_verifiable", why no check
/// could run}.
std::pair<std::string, std::string> check_trace(const ir::Program& original,
                                                const std::vector<transforms::Action>& trace,
                                                const std::string& arch,
                                                const backends::BackendConfig& config = {});

/// This machine's profile for the cost model and for "% of peak": `config.machine_profile`,
/// else $PERFDOJO_MACHINE_PROFILE, else the calibrated one kept in `config.profile_dir`
/// (or `config.cache_dir`), else calibrated now and kept there. Returns where it came from.
std::string resolve_machine_profile(backends::BackendConfig& config, backends::MachineProfile* out);
/// The FMA peak per core of `isa` on the machine `profile` describes (GFLOP/s).
double fma_peak_gflops(backends::X86Isa isa, const backends::MachineProfile& profile);

/// Whether `auto` times `p` cold (its data evicted before every call): its parameters take more
/// than half the profile's last-level cache (the effective size the calibration found), so it
/// and an operator of its size next to it in a model cannot both stay there, and it does fewer
/// flops per byte of them than the machine's ridge point (FMA peak `peak_gflops` over one core's
/// memory bandwidth). Such a kernel's time is its traffic: timed warm and back to back it would
/// sit in a last-level cache it does not have in use, and the search would prefer what only pays
/// there (plain stores over streaming ones).
bool cold_timing(const ir::Program& p, const backends::MachineProfile& profile, double peak_gflops);
/// The FMA peak `p` can reach on `threads` cores whose f32 peak per core is `peak_gflops`: half of
/// it when every output is f64 (a vector holds half the lanes). A program that sums products of
/// 8-bit integers into i32 (an int8 GEMM) is held to `int8_peak` per core instead, the calibrated
/// dot-product peak (MachineProfile::peak_gops_vnni), when it is known (> 0).
double kernel_peak_gflops(const ir::Program& p, double peak_gflops, double threads,
                          double int8_peak = 0);
/// "" unless `p` sums products of 8-bit integers (an int8 GEMM) and this machine has no int8
/// dot-product instruction (`int8_peak` 0: no AVX-512 VNNI or AVX-VNNI): then what that means,
/// said in the report and by `perfdojo measure`, since the VNNI targets cannot be run
/// here.
std::string int8_peak_note(const ir::Program& p, double int8_peak);

/// Where the calibrated profile of this machine is kept under `cache_dir` ("" without one).
std::string cached_profile_path(const std::string& cache_dir);

/// A C header declaring the kernel's signature (inputs const, in declaration order).
std::string c_header(const ir::Program& p);

/// The parallel moves for `p` on a target with threads: in each nest, from the outside in, the
/// first scope parallelize accepts with at least target.threads iterations, none inside another
/// (after the micro-kernel sketch, BLIS's loop over row blocks, each thread packing its own A
/// block, and beside it the packing of each k block's B panels). Empty without threads. The
/// search proposes every expert proposal with these after it.
std::vector<transforms::Action> parallel_moves(const ir::Program& p,
                                               const transforms::Target& target);

}  // namespace perfdojo::optimizer
