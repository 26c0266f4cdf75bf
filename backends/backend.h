// Hardware backends behind one narrow interface. A backend turns a program into a time (real
// or estimated); failures are data (an error field), never exceptions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace perfdojo::backends {

/// Whether a backend can run here, and if not, why ("the CPU lacks avx512f").
struct Availability {
  bool ok = true;
  std::string why;
};

/// What the action space reads from a backend.
struct Capabilities {
  std::vector<int> vector_widths;  ///< f32 lanes, widest first; empty: no vector code
  bool parallel = false;           ///< parallel scopes run on threads
  int threads = 1;                 ///< threads a parallel scope may use
  int vector_registers = 0;        ///< architectural vector registers (0: x86's, by width)
  bool stream_stores = false;  ///< vector stores can bypass the cache (x86's non-temporal stores)
  /// Honours MeasureOptions::reference: a program too large to interpret is checked against
  /// the sequential build of the program it was derived from.
  bool verify_against_reference = false;
};

/// Knobs of one measurement.
struct MeasureOptions {
  uint64_t seed = 0;            ///< input data seed (ir::make_inputs)
  bool verify = true;           ///< check outputs against the interpreter before timing
  double time_budget_s = 1.0;   ///< stop repeating after this much timed run time
  int min_reps = 3;             ///< at least this many timed runs
  int max_reps = 50;            ///< at most this many
  double target_spread = 0.02;  ///< stop early once (p75-p25)/median falls below this
  bool flush_cache = false;     ///< evict caches between timed runs
  double timeout_s = 10.0;      ///< a run longer than this is killed and reported
  /// The program the measured one was derived from (same inputs and outputs). Where the
  /// measured program is too large to interpret, a backend with
  /// Capabilities::verify_against_reference compares its outputs with this program's
  /// sequential build at the same size and seed instead of the measured program's own
  /// sequential build: transformations and code generation checked together, end to end.
  const ir::Program* reference = nullptr;
};

/// The outcome of measuring (or estimating) a program. `error` set means no time is valid.
struct Measurement {
  std::optional<std::string> error;  ///< compile error, crash, timeout, wrong result...
  double median_s = 0;               ///< the time that counts (estimate for the cost model)
  double min_s = 0;
  double spread = 0;  ///< (p75 - p25) / median of the timed runs
  int reps = 0;
  bool verified = false;  ///< outputs matched the interpreter
  /// The outputs were compared and differ (compare_outputs): the code is wrong, as opposed to
  /// failing to compile or run, or to a check that could not run. `error` says where.
  bool wrong_result = false;
  double max_rel_error = 0;  ///< against the interpreter, when verified
  /// How the outputs were checked: "exact" (bit for bit), "bound" (within the interpreter's
  /// rounding-error bound) or "tolerance" (a relative tolerance); "" when not checked.
  std::string verification;
  double compile_s = 0;  ///< compile latency (0 on a cache hit)
  bool cached = false;   ///< served from the result cache
  bool noisy = false;    ///< the spread stayed above kNoisySpread after a repeat
  /// Compiled, but not run: this machine has no device of the target's kind (a GPU), so the
  /// result is unverified for that reason alone.
  bool no_device = false;
  std::string flags;  ///< compiler and flags used, recorded with every result
  bool ok() const { return !error; }
};

/// A timing whose interquartile spread exceeds this fraction of its median says the core was
/// busy: it is repeated once, and flagged (Measurement::noisy) if it stays that way.
inline constexpr double kNoisySpread = 0.10;

/// How the optimiser's timings treat the caches (optimizer::Report::cache_flushed).
enum class CacheFlush {
  kAuto,  ///< evict for a memory-bound kernel larger than half the last-level cache
  kOn,    ///< evict the kernel's data before every timed call
  kOff,   ///< warm, back-to-back calls
};
/// "auto", "on" or "off"; nullopt otherwise.
std::optional<CacheFlush> parse_cache_flush(const std::string& text);
const char* cache_flush_name(CacheFlush how);

/// Construction settings shared by all backends (each reads what it needs), and the optimiser's
/// settings that travel with them. Typed once where the command line or the bridge is read.
struct BackendConfig {
  std::string compiler = "cc";     ///< C compiler for generated code
  std::string cache_dir;           ///< on-disk result cache; "" disables it
  std::string machine_profile;     ///< cost model's calibrated profile file; "" = built-in
  double compile_timeout_s = 120;  ///< a C compile running longer is killed (0: no limit)
  /// Threads a parallel scope may use, at most (1: single core, no parallel scopes); 0: every
  /// core the process may use.
  int threads = 0;
  std::string cuda_arch = "sm_80";  ///< the CUDA backend's target (nvcc -arch)
  std::string worker;  ///< measurement worker executable; "" finds it beside the program
  double worker_memory_mb = 8192;  ///< the worker's address-space limit
  bool measure_lock = true;        ///< one timing at a time on the machine (a lock file)
  bool keep_build_dir = false;     ///< keep generated sources and objects (debugging)
  /// Programs needing more flops than this are verified at a scaled-down size, or against the
  /// reference build (MeasureOptions::reference), not by interpreting them.
  double verify_interpreter_max_flops = 1e7;
  /// Test hook: "KIND" or "KIND:BUFFER" (only for programs with that buffer) makes the code
  /// generator emit a fault (hang, segv, alloc, wrong, uninit...), for the tests of the
  /// backends' containment.
  std::string inject;

  // The optimiser's settings (optimizer.h).
  std::string profile_dir;  ///< where the calibrated machine profile is kept; "" = cache_dir
  bool calibrate = true;    ///< false: the built-in profile, never a calibration
  CacheFlush cache_flush = CacheFlush::kAuto;
  int64_t max_evaluations = 0;  ///< the beam's fixed amount of model work; 0: by time
  /// Command line of a measurement farm (backends::farm_command); empty: measure here.
  std::vector<std::string> farm_command;
};

/// A backend instance. Instances are independent: a crash inside one never touches another.
/// One thread uses an instance at a time (measure() may keep state between calls, as the cost
/// model's memo of unchanged nests does); clone() one per thread.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Registry name, e.g. "x86_avx512".
  virtual std::string name() const = 0;
  /// Whether it can run here.
  virtual Availability available() const = 0;
  /// Capabilities the action space adapts to.
  virtual Capabilities capabilities() const = 0;
  /// Whether times are reproducible bit for bit (cost model, interpreter).
  virtual bool deterministic() const = 0;
  /// Time (or estimate) of `p`. Never throws.
  virtual Measurement measure(const ir::Program& p, const MeasureOptions& options) = 0;
  /// Times `programs` interleaved in one process: each is compiled and verified as by measure(),
  /// warmed, then timed in rounds of one batch of each in turn (A B A B ...), so a busy moment
  /// slows them alike and their ratio stays honest. One Measurement per program, in order; a
  /// program that fails carries its error and the others are still timed. At most
  /// kMaxCompared programs. The default measures them one after another (right for a
  /// deterministic backend).
  virtual std::vector<Measurement> compare(const std::vector<const ir::Program*>& programs,
                                           const MeasureOptions& options);
  static constexpr size_t kMaxCompared = 4;
  /// Measures each of `programs` as measure() would, at once where the backend can (a
  /// measurement farm of several machines, remote_backend.h); one Measurement per program, in
  /// order. The default measures them one after another.
  virtual std::vector<Measurement> measure_each(const std::vector<const ir::Program*>& programs,
                                                const MeasureOptions& options);
  /// How many measurements measure_each takes at once (1: one after another).
  virtual int concurrency() const { return 1; }
  /// Compiles ahead what measure() of each program would compile, so that a later measure()
  /// finds it built. Safe to call from a second thread while measure() runs on this instance
  /// (the optimiser compiles its next candidates on another core). Errors are left for
  /// measure() to report. The default does nothing.
  virtual void prepare(const std::vector<ir::Program>& programs) { (void)programs; }
  /// A fresh, independent instance with the same configuration (for env.fork()).
  virtual std::unique_ptr<Backend> clone() const = 0;
};

/// Makes a backend from its configuration.
using BackendFactory = std::unique_ptr<Backend> (*)(const BackendConfig&);
/// Adds `name` to the registry. Each backend registers its own names from its own file at static
/// initialisation (`[[maybe_unused]] const bool kRegistered = register_backend(...)`), so the
/// registry includes no backend; the library is linked whole for that reason
/// (backends/CMakeLists.txt). backend_names() lists names by `order`, lowest first. A name
/// registered twice keeps its first factory; returns whether this call added it.
bool register_backend(const std::string& name, int order, BackendFactory make);

/// Names of every registered backend.
std::vector<std::string> backend_names();
/// A backend by name, or nullptr for an unknown name. Besides the registered names,
/// "cost_model:FILE" is the cost model on the machine profile in FILE (`perfdojo calibrate`
/// writes one; an unreadable file makes the backend unavailable, saying why).
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendConfig& config = {});
/// Whether `name` is the analytical cost model ("cost_model" or "cost_model:PROFILE"): an
/// estimate, deterministic and instant, not a measurement.
inline bool is_cost_model(const std::string& name) { return name.rfind("cost_model", 0) == 0; }

/// Whether this CPU has x86 feature `feature` ("avx512f", "avx2", "fma", "avx512vnni",
/// "avx512bf16", "avxvnni"), as
/// __builtin_cpu_supports says, unless $PERFDOJO_HIDE_CPU_FEATURES (a comma-separated list, e.g.
/// "avx512f") hides it: on a larger machine, the backends, the calibration and the tests then
/// behave as on a smaller one (the AVX2 path of an AVX-512 machine, its skips included).
bool cpu_has(const char* feature);

/// The cores this process may run on: its CPU affinity (taskset, cgroups' cpusets), not the
/// machine's core count; at least 1.
int usable_cores();

/// Floating-point operations of one run of `p` (each +,-,*,/,max,min and function counts one;
/// a bounded scope counts the iterations it runs).
double flop_count(const ir::Program& p);
/// Bytes of compulsory traffic: every input read once and every output written once.
double compulsory_bytes(const ir::Program& p);

}  // namespace perfdojo::backends
