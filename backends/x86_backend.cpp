#include "backends/x86_backend.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <list>
#include <mutex>
#include <thread>

#include "backends/compiler.h"
#include "backends/host_buffers.h"
#include "backends/result_cache.h"
#include "backends/worker.h"
#include "ir/check.h"
#include "ir/interp.h"

namespace perfdojo::backends {

namespace {

namespace fs = std::filesystem;

// Whether glibc's vector math library can be linked (libc6-dev ships libmvec.so).
bool have_libmvec() {
  static const bool kHave = [] {
    for (const char* d :
         {"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib"})
      if (access((std::string(d) + "/libmvec.so").c_str(), R_OK) == 0) return true;
    return false;
  }();
  return kHave;
}

// Printer options of `isa`: vectors are printed in registers of the ISA's width, parallel loops
// on `threads` threads (0: OpenMP's choice).
CodegenOptions x86_codegen_options(X86Isa isa, int threads = 0) {
  CodegenOptions co;
  co.threads = threads;
  co.target = x86_isa_name(isa);
  co.native_vector_bytes = isa == X86Isa::kAvx512 ? 64 : isa == X86Isa::kAvx2 ? 32 : 16;
  co.libmvec = have_libmvec();
  co.stream_stores = true;
  // vpdpbusd where this CPU has it (PERFDOJO_HIDE_CPU_FEATURES hides it like any feature).
  if (isa == X86Isa::kAvx512 && cpu_has("avx512vnni"))
    co.vnni_bytes = 64;
  else if (isa != X86Isa::kPortable && cpu_has("avxvnni"))
    co.vnni_bytes = 32;
  return co;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool has_annotations(const std::vector<ir::NodePtr>& body) {
  for (const auto& n : body)
    if (n->is_scope && (n->annot != ir::Annot::kNone || has_annotations(n->body))) return true;
  return false;
}

bool has_parallel(const std::vector<ir::NodePtr>& body) {
  for (const auto& n : body)
    if (n->is_scope && (n->annot == ir::Annot::kParallel || has_parallel(n->body))) return true;
  return false;
}

// The most terms accumulated into one element by a reduction statement: the product of the
// extents of the enclosing scopes its target does not depend on.
double longest_reduction(const std::vector<ir::NodePtr>& body, std::vector<int64_t>& extents) {
  double longest = 1;
  for (const auto& n : body) {
    if (n->is_scope) {
      extents.push_back(n->extent);
      longest = std::max(longest, longest_reduction(n->body, extents));
      extents.pop_back();
      continue;
    }
    if (n->stmt.op == ir::Reduce::kNone) continue;
    double terms = 1;
    for (size_t d = 0; d < extents.size(); ++d) {
      bool used = false;
      for (const auto& ix : n->stmt.lhs.index) used = used || ix.coeff(static_cast<int>(d)) != 0;
      if (!used) terms *= static_cast<double>(extents[d]);
    }
    longest = std::max(longest, terms);
  }
  return longest;
}

// Verification tolerance (max relative error) for outputs of type t. Vectorised reductions
// reassociate, and two summation orders of L terms differ by about eps * sqrt(L) times the
// partial sums, which exceed the result where it cancels: 1e-4 for f32 (1e-9 for f64) up to
// 1024 terms, growing with sqrt(L) beyond. A rowsum of 4096 f32 terms legitimately differs
// from the sequential order by ~8e-5. i32 arithmetic is exact. A bf16 or f16 output rounds
// such a result once more: one unit in its last place.
double tolerance(ir::DType t, double reduction_terms) {
  double scale = std::max(1.0, std::sqrt(reduction_terms / 1024));
  switch (t) {
    case ir::DType::kF32:
      return 1e-4 * scale;
    case ir::DType::kF64:
      return 1e-9 * scale;
    case ir::DType::kBF16:  // an f32 result one rounding apart lands one bf16 ulp (2^-7) away
      return 1e-2 * scale;
    case ir::DType::kF16:
      return 2e-3 * scale;
    case ir::DType::kI32:
    case ir::DType::kI8:
    case ir::DType::kU8:
      return 0;
  }
  return 0;
}

// Quantile of sorted values with linear interpolation.
double quantile(const std::vector<double>& s, double q) {
  if (s.empty()) return 0;
  double pos = q * static_cast<double>(s.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (s[hi] - s[lo]) * (pos - static_cast<double>(lo));
}

// The test hook config.inject as it applies to `p`: "KIND" or "KIND:BUFFER" (only programs
// declaring BUFFER); "" when it does not apply.
// Serialises timing across processes (and threads: each holder opens its own descriptor).
class MeasureLock {
 public:
  explicit MeasureLock(bool on) {
    if (!on) return;
    std::string path = (fs::temp_directory_path() / "perfdojo-measure.lock").string();
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ >= 0) {
      while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~MeasureLock() {
    if (fd_ >= 0) close(fd_);  // closing releases the lock
  }
  MeasureLock(const MeasureLock&) = delete;
  MeasureLock& operator=(const MeasureLock&) = delete;

 private:
  int fd_ = -1;
};

class X86Backend final : public Backend {
 public:
  X86Backend(X86Isa isa, BackendConfig c)
      : isa_(isa), config_(std::move(c)), cache_(config_.cache_dir) {}

  ~X86Backend() override {
    worker_.reset();
    if (!work_dir_.empty() && !config_.keep_build_dir) {
      std::error_code ec;
      fs::remove_all(work_dir_, ec);
    }
  }

  std::string name() const override { return x86_isa_name(isa_); }

  Availability available() const override {
    if (!availability_) availability_ = check_availability();
    return *availability_;
  }

  Capabilities capabilities() const override {
    Capabilities c;
    if (isa_ == X86Isa::kAvx512) c.vector_widths = {16, 8};
    if (isa_ == X86Isa::kAvx2) c.vector_widths = {8};
    c.threads = usable_cores();
    // config.threads: at most this many threads (1: single core, no parallel scopes).
    if (int t = config_.threads; t >= 1) c.threads = std::min(c.threads, t);
    c.parallel = c.threads > 1;
    c.verify_against_reference = true;
    c.stream_stores = !c.vector_widths.empty();
    return c;
  }

  bool deterministic() const override { return false; }

  Measurement measure(const ir::Program& p, const MeasureOptions& o) override {
    Measurement m;
    try {
      measure_into(p, o, m);
    } catch (const std::exception& e) {
      m.error = std::string("internal error in the x86 backend: ") + e.what();
    }
    return m;
  }

  std::unique_ptr<Backend> clone() const override {
    return std::make_unique<X86Backend>(isa_, config_);
  }

  void prepare(const std::vector<ir::Program>& ps) override {
    try {
      for (const ir::Program& p : ps) {
        if (!ir::check_program(p).empty()) continue;
        CodegenOptions co = x86_codegen_options(isa_, capabilities().threads);
        co.inject = inject_for(p);
        compile_shared_object(config_.compiler, flags(), generate_c(p, co).source, work_dir(),
                              x86_link_libraries(), config_.compile_timeout_s);
      }
    } catch (const std::exception&) {
      // measure() meets the same problem and reports it
    }
  }

  std::vector<Measurement> compare(const std::vector<const ir::Program*>& ps,
                                   const MeasureOptions& o) override {
    std::vector<Measurement> ms(ps.size());
    try {
      compare_into(ps, o, ms);
    } catch (const std::exception& e) {
      for (auto& m : ms)
        if (m.ok()) m.error = std::string("internal error in the x86 backend: ") + e.what();
    }
    return ms;
  }

 private:
  Availability check_availability() const {
    std::string cpu = cpu_identity();
    if (isa_ == X86Isa::kAvx512 && !cpu_has("avx512f"))
      return {false, std::string(name()) + ": the CPU lacks avx512f (" + cpu + ")"};
    if (isa_ == X86Isa::kAvx2 && !(cpu_has("avx2") && cpu_has("fma")))
      return {false, std::string(name()) + ": the CPU lacks avx2/fma (" + cpu + ")"};
    if (find_executable(config_.compiler).empty())
      return {false, std::string(name()) + ": no C compiler: '" + config_.compiler +
                         "' was not found (set BackendConfig::compiler, e.g. gcc or clang)"};
    if (find_worker(config_.worker).empty())
      return {false,
              std::string(name()) +
                  ": the measuring worker perfdojo-worker was not found (build the perfdojo-worker "
                  "target, or set $PERFDOJO_WORKER)"};
    return {};
  }

  std::vector<std::string> flags() const { return x86_compile_flags(isa_, config_.compiler); }

  std::string flags_text() const {
    std::string s = config_.compiler;
    std::string v = compiler_version(config_.compiler);
    if (!v.empty()) s += " (" + v + ")";
    for (const auto& f : flags()) s += " " + f;
    for (const auto& l : x86_link_libraries()) s += " " + l;
    return s;
  }

  std::string inject_for(const ir::Program& p) const { return codegen_test_hook(config_, p); }

  const std::string& work_dir() {
    std::lock_guard<std::mutex> hold(work_dir_mutex_);  // prepare() may ask from another thread
    if (work_dir_.empty()) {
      std::string tmpl = (fs::temp_directory_path() / "perfdojo-x86-XXXXXX").string();
      std::vector<char> buf(tmpl.begin(), tmpl.end());
      buf.push_back('\0');
      if (mkdtemp(buf.data()))
        work_dir_ = buf.data();
      else
        throw std::runtime_error(std::string("cannot create a build directory: ") +
                                 std::strerror(errno));
    }
    return work_dir_;
  }

  Worker& worker() {
    if (!worker_) {
      double mb = config_.worker_memory_mb;
      worker_ = std::make_unique<Worker>(find_worker(config_.worker),
                                         static_cast<uint64_t>(mb * 1048576.0));
    }
    return *worker_;
  }

  // Places the kernel's parameters in the shared region: page-aligned, each shifted by a few
  // cache lines so equal-sized buffers do not alias in the caches (4K aliasing).
  static std::vector<size_t> layout(const std::vector<const ir::BufferDecl*>& params,
                                    size_t* total) {
    std::vector<size_t> offs;
    size_t at = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      at = (at + 4095) & ~size_t{4095};
      at += (i * 320) % 4096;
      offs.push_back(at);
      at += static_cast<size_t>(params[i]->elements()) * ir::dtype_bytes(params[i]->dtype);
    }
    *total = at + 64;
    return offs;
  }

  // Where the parameters placed at `offs` end in the shared region (what a cache flush evicts).
  static size_t params_end(const std::vector<const ir::BufferDecl*>& params,
                           const std::vector<size_t>& offs) {
    size_t end = 0;
    for (size_t i = 0; i < params.size() && i < offs.size(); ++i)
      end = std::max(end, offs[i] + static_cast<size_t>(params[i]->elements()) *
                                        ir::dtype_bytes(params[i]->dtype));
    return end;
  }

  void measure_into(const ir::Program& p, const MeasureOptions& o, Measurement& m) {
    m.flags = flags_text();
    Availability av = available();
    if (!av.ok) {
      m.error = av.why;
      return;
    }
    auto errors = ir::check_program(p);
    if (!errors.empty()) {
      m.error = "invalid program: " + errors[0].str();
      return;
    }
    std::string inject = inject_for(p);
    CacheKey key{
        ir::structural_hash(p),
        name(),
        m.flags,
        cpu_identity(),
        o.seed,
        std::string(kCodegenVersion) + (o.verify ? " verify" : " noverify") +
            (o.verify && o.reference ? " against " + hex64(ir::structural_hash(*o.reference))
                                     : "") +
            (o.flush_cache ? " flush" : "") + (inject.empty() ? "" : " inject=" + inject)};
    if (auto hit = cache_.lookup(key)) {
      m = *hit;
      return;
    }

    // Print and compile.
    double t0 = now_s();
    CodegenOptions co = x86_codegen_options(isa_, capabilities().threads);
    co.inject = inject;
    GeneratedC gen = generate_c(p, co);
    CompileResult cr = compile_shared_object(config_.compiler, flags(), gen.source, work_dir(),
                                             x86_link_libraries(), config_.compile_timeout_s);
    m.compile_s = cr.reused ? 0 : now_s() - t0;
    if (cr.error) {
      m.error = *cr.error;
      return;
    }

    // Buffers.
    auto params = kernel_parameters(p);
    size_t total = 0;
    auto offs = layout(params, &total);
    Worker& w = worker();
    std::string err;
    uint8_t* base = w.reserve(total, &err);
    if (!base) {
      m.error = err;
      return;
    }
    ir::TensorMap inputs = ir::make_inputs(p, o.seed);
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i]->role == ir::Role::kInput)
        write_tensor(base + offs[i], params[i]->dtype, inputs.at(params[i]->name).data);
    prefill_outputs(base, params, offs);

    // Runs of any kernel never overlap, here or in other processes; the lock is let go while the
    // interpreter verifies, which takes long and times nothing.
    const bool lock_on = config_.measure_lock;
    std::optional<MeasureLock> lock(std::in_place, lock_on);
    if (auto e = w.load(cr.so_path, offs, o.timeout_s, params_end(params, offs))) {
      m.error = *e;
      return;
    }
    Worker::Timing first = w.run(1, false, o.timeout_s);
    if (first.error) {
      m.error = *first.error;
      return;
    }

    // Code the compiler contracted on its own is checked against the error bound, and says so.
    bool exact = gen.exact;
    std::string contracted;
    if (exact && o.verify) {
      auto why = unasked_contraction(cr.so_path, gen.fuses);
      if (!why || !why->empty()) {
        exact = false;
        contracted = why ? *why : "objdump could not read the object";
      }
    }
    if (o.verify &&
        !verify_outputs(p, o, inputs, params, offs, base, cr.so_path, lock, lock_on, exact, m)) {
      if (m.error && !contracted.empty()) *m.error += " (the compiler fused " + contracted + ")";
      return;
    }
    if (!contracted.empty() && !m.verification.empty())
      m.verification += ": the compiler fused " + contracted;

    if (!lock) lock.emplace(lock_on);
    time_runs(o, first.seconds, m);
    if (m.ok() && !m.noisy) cache_.store(key, m);  // a busy core's figure is not kept
  }

  // The interleaved timing behind compare(). Each program is first measured alone with one
  // repetition (compiled, verified, or served from the cache) for its verdict; then all of them
  // get disjoint buffers in one shared region, are loaded into the one worker (switching between
  // loaded kernels is a pointer swap there), warmed, and timed round-robin.
  void compare_into(const std::vector<const ir::Program*>& ps, const MeasureOptions& o,
                    std::vector<Measurement>& ms) {
    if (ps.size() > kMaxCompared) {
      for (auto& m : ms)
        m.error = "compare takes at most " + std::to_string(kMaxCompared) + " programs";
      return;
    }
    MeasureOptions once = o;
    once.min_reps = once.max_reps = 1;
    once.time_budget_s = 0;
    struct Slot {
      size_t index;
      std::string so;
      std::vector<size_t> offs;
      size_t end = 0;  // where its parameters end in the region
      long batch = 1;
      std::vector<double> times;
    };
    std::vector<Slot> slots;
    std::vector<std::vector<const ir::BufferDecl*>> params(ps.size());
    size_t total = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      ms[i] = measure(*ps[i], once);
      if (!ms[i].ok()) continue;
      ms[i].cached = false;
      CodegenOptions co = x86_codegen_options(isa_, capabilities().threads);
      co.inject = inject_for(*ps[i]);
      CompileResult cr =
          compile_shared_object(config_.compiler, flags(), generate_c(*ps[i], co).source,
                                work_dir(), x86_link_libraries(), config_.compile_timeout_s);
      if (cr.error) {
        ms[i].error = *cr.error;
        continue;
      }
      params[i] = kernel_parameters(*ps[i]);
      size_t size = 0;
      Slot slot{i, cr.so_path, layout(params[i], &size), 0, 1, {}};
      total = (total + 4095) & ~size_t{4095};
      for (size_t& off : slot.offs) off += total;
      total += size;
      slot.end = total;
      slots.push_back(std::move(slot));
    }
    if (slots.empty()) return;
    Worker& w = worker();
    std::string err;
    uint8_t* base = w.reserve(total, &err);
    if (!base) {
      for (const Slot& s : slots) ms[s.index].error = err;
      return;
    }
    for (const Slot& s : slots) {
      ir::TensorMap inputs = ir::make_inputs(*ps[s.index], o.seed);
      const auto& pr = params[s.index];
      for (size_t k = 0; k < pr.size(); ++k)
        if (pr[k]->role == ir::Role::kInput)
          write_tensor(base + s.offs[k], pr[k]->dtype, inputs.at(pr[k]->name).data);
      prefill_outputs(base, pr, s.offs);
    }
    const bool lock_on = config_.measure_lock;
    MeasureLock lock(lock_on);
    // One batch of a slot's kernel; false (and the program's error set) when it fails.
    auto run = [&](Slot& s, long batch, double* seconds) {
      if (auto e = w.load(s.so, s.offs, o.timeout_s, s.end)) {
        ms[s.index].error = *e;
        return false;
      }
      Worker::Timing t =
          w.run(static_cast<int>(batch), o.flush_cache, o.timeout_s * static_cast<double>(batch));
      if (t.error) {
        ms[s.index].error = *t.error;
        return false;
      }
      *seconds = t.seconds;
      return true;
    };
    const double kBatchTarget = 1e-3;
    for (Slot& s : slots) {  // a cold call, a warm one to size the batch, a warm batch
      double t = 0;
      if (!run(s, 1, &t) || !run(s, 1, &t)) continue;
      s.batch = o.flush_cache ? 1
                              : std::clamp<long>(
                                    static_cast<long>(std::ceil(kBatchTarget / std::max(t, 1e-9))),
                                    1, 1000000);
      if (s.batch > 1) run(s, s.batch, &t);
    }
    auto live = [&] {
      std::vector<Slot*> l;
      for (Slot& s : slots)
        if (ms[s.index].ok()) l.push_back(&s);
      return l;
    };
    const int max_reps = std::max(o.max_reps, 1), min_reps = std::clamp(o.min_reps, 1, max_reps);
    auto spread_of = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      double med = quantile(v, 0.5);
      return med > 0 ? (quantile(v, 0.75) - quantile(v, 0.25)) / med : 0.0;
    };
    // Rounds until every program's spread is small or the budget (per program) is spent; a
    // noisy result is timed once more from scratch before it is flagged.
    for (int attempt = 0; attempt < 2; ++attempt) {
      double spent = 0;
      for (Slot* s : live()) s->times.clear();
      for (int rep = 0; rep < max_reps; ++rep) {
        auto l = live();
        if (l.empty()) return;
        // Alternate the order each round so neither program always follows the other.
        if (rep % 2) std::reverse(l.begin(), l.end());
        for (Slot* s : l) {
          double t = 0;
          if (!run(*s, s->batch, &t)) continue;
          s->times.push_back(t / static_cast<double>(s->batch));
          spent += t;
        }
        if (rep + 1 < min_reps) continue;
        bool settled = true;
        for (Slot* s : live()) settled = settled && spread_of(s->times) <= o.target_spread;
        if (settled || spent >= o.time_budget_s * static_cast<double>(l.size())) break;
      }
      bool noisy = false;
      for (Slot* s : live()) noisy = noisy || spread_of(s->times) > kNoisySpread;
      if (!noisy) break;
    }
    for (Slot* s : live()) {
      Measurement& m = ms[s->index];
      std::vector<double> t = s->times;
      std::sort(t.begin(), t.end());
      m.median_s = quantile(t, 0.5);
      m.min_s = t.front();
      m.spread = spread_of(t);
      m.noisy = m.spread > kNoisySpread;
      m.reps = static_cast<int>(t.size());
    }
  }

  // Checks the kernel's outputs, in the shared region after its first run, against the
  // interpreter's (or, too large to interpret, the sequential build's): false, with m.error set,
  // when they differ or cannot be had. The lock is let go while the interpreter runs.
  bool verify_outputs(const ir::Program& p, const MeasureOptions& o, const ir::TensorMap& inputs,
                      const std::vector<const ir::BufferDecl*>& params,
                      const std::vector<size_t>& offs, uint8_t* base, const std::string& so_path,
                      std::optional<MeasureLock>& lock, bool lock_on, bool exact, Measurement& m) {
    Worker& w = worker();
    lock.reset();
    std::map<std::string, ir::Tensor> got;
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i]->role == ir::Role::kOutput)
        got[params[i]->name] = read_tensor(base + offs[i], *params[i]);
    std::map<std::string, ir::Tensor> want, bounds;
    // Code that keeps the IR's order and rounding must equal the interpreter bit for bit; other
    // code (reassociated sums, vector math) must stay within the interpreter's error bound.
    Comparison how;
    double max_flops = config_.verify_interpreter_max_flops;
    if (flop_count(p) <= max_flops) {
      ir::InterpretOptions io;
      if (!exact) io.error_bounds = &bounds;
      auto r = ir::interpret(p, inputs, io);
      if (!r.ok()) {
        m.error = "the interpreter refused the program: " + r.error_text();
        return false;
      }
      for (const auto& [n, t] : got) want[n] = r->at(n);
      how.exact = exact;
      if (!exact) how.bounds = &bounds;
    } else if (o.reference || has_annotations(p.body)) {
      const ir::Program& ref = o.reference ? *o.reference : p;
      if (o.reference && !same_parameters(params, kernel_parameters(ref))) {
        m.error =
            "cannot verify: the reference program's inputs and outputs differ from the program's";
        return false;
      }
      lock.emplace(lock_on);  // the reference runs a kernel too
      if (auto e = reference_outputs(ref, o, params, offs, base, want)) {
        m.error = *e;
        return false;
      }
      if (auto e = w.load(so_path, offs, o.timeout_s, params_end(params, offs))) {
        m.error = *e;
        return false;
      }
      // The sequential build of the same program keeps the IR's order: exact code equals it.
      how.exact = exact && !o.reference;
    }
    if (want.empty()) return true;
    if (!compare_outputs(p, got, want, m, how)) return false;
    m.verified = true;
    return true;
  }

  // The two lists name the same buffers, in the same order, with the same types and shapes: one
  // layout of the shared region serves both kernels.
  static bool same_parameters(const std::vector<const ir::BufferDecl*>& a,
                              const std::vector<const ir::BufferDecl*>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i]->name != b[i]->name || a[i]->role != b[i]->role || a[i]->dtype != b[i]->dtype ||
          a[i]->shape != b[i]->shape)
        return false;
    return true;
  }

  // Outputs of the sequential build of `p` (annotations ignored, no FMA contraction) on the
  // inputs already in the shared region. Cached per (source, seed): vectorising, parallelising
  // or unrolling a program leaves its sequential source unchanged.
  std::optional<std::string> reference_outputs(const ir::Program& p, const MeasureOptions& o,
                                               const std::vector<const ir::BufferDecl*>& params,
                                               const std::vector<size_t>& offs, uint8_t* base,
                                               std::map<std::string, ir::Tensor>& want) {
    CodegenOptions co = x86_codegen_options(isa_, capabilities().threads);
    co.target += " (sequential reference)";
    co.vectorize = co.parallel = co.unroll = false;
    GeneratedC gen = generate_c(p, co);
    std::string rkey = hex64(stable_hash(gen.source)) + "/" + std::to_string(o.seed);
    for (auto it = ref_cache_.begin(); it != ref_cache_.end(); ++it) {
      if (it->first == rkey) {
        want = it->second;
        return std::nullopt;
      }
    }
    std::vector<std::string> f;
    for (const auto& x : flags())
      if (x != "-fopenmp") f.push_back(x);
    // Scalar code: GCC's vectoriser can fuse what -ffp-contract=off keeps apart (compiler.h).
    f.push_back("-fno-tree-vectorize");
    CompileResult cr = compile_shared_object(config_.compiler, f, gen.source, work_dir(),
                                             x86_link_libraries(), config_.compile_timeout_s);
    if (cr.error) return "cannot build the sequential reference for verification: " + *cr.error;
    prefill_outputs(base, params, offs);
    Worker& w = worker();
    if (auto e = w.load(cr.so_path, offs, o.timeout_s, params_end(params, offs)))
      return "verification run: " + *e;
    Worker::Timing t = w.run(1, false, o.timeout_s);
    if (t.error)
      return "could not verify: the sequential reference failed (" + *t.error +
             "); measure with verify = false, or verify a scaled-down instance";
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i]->role == ir::Role::kOutput)
        want[params[i]->name] = read_tensor(base + offs[i], *params[i]);
    ref_cache_.emplace_front(rkey, want);
    if (ref_cache_.size() > 2) ref_cache_.pop_back();
    return std::nullopt;
  }

  // Warm repetitions, each a batch of back-to-back calls of about a millisecond, until the
  // spread is small enough or the budget is spent.
  void time_runs(const MeasureOptions& o, double first_s, Measurement& m) {
    Worker& w = worker();
    const double kBatchTarget = 1e-3;
    double est = std::max(first_s, 1e-9);
    if (first_s < o.time_budget_s) {  // one warm call (the first one was cold)
      Worker::Timing t = w.run(1, o.flush_cache, o.timeout_s);
      if (t.error) {
        m.error = *t.error;
        return;
      }
      est = std::max(t.seconds, 1e-9);
    }
    long batch = o.flush_cache ? 1
                               : std::clamp<long>(static_cast<long>(std::ceil(kBatchTarget / est)),
                                                  1, 1000000);
    if (batch > 1) {  // warm the batch itself (caches, branch predictors, OpenMP threads)
      Worker::Timing t =
          w.run(static_cast<int>(batch), false, o.timeout_s + 4 * est * static_cast<double>(batch));
      if (t.error) {
        m.error = *t.error;
        return;
      }
    }
    std::vector<double> times;
    double spent = 0;
    int max_reps = std::max(o.max_reps, 1), min_reps = std::clamp(o.min_reps, 1, max_reps);
    for (int attempt = 0; attempt < 2; ++attempt) {  // a noisy timing is taken once more
      times.clear();
      spent = 0;
      while (static_cast<int>(times.size()) < max_reps) {
        Worker::Timing t = w.run(static_cast<int>(batch), o.flush_cache,
                                 o.timeout_s + 4 * est * static_cast<double>(batch));
        if (t.error) {
          m.error = *t.error;
          return;
        }
        times.push_back(t.seconds / static_cast<double>(batch));
        spent += t.seconds;
        if (static_cast<int>(times.size()) < min_reps) continue;
        std::vector<double> s = times;
        std::sort(s.begin(), s.end());
        double med = quantile(s, 0.5);
        double spread = med > 0 ? (quantile(s, 0.75) - quantile(s, 0.25)) / med : 0;
        if (spread <= o.target_spread || spent >= o.time_budget_s) break;
      }
      std::vector<double> s = times;
      std::sort(s.begin(), s.end());
      const double med = quantile(s, 0.5);
      if (s.size() < 3 || med <= 0 || (quantile(s, 0.75) - quantile(s, 0.25)) / med <= kNoisySpread)
        break;
    }
    std::sort(times.begin(), times.end());
    m.median_s = quantile(times, 0.5);
    m.min_s = times.front();
    m.spread = m.median_s > 0 ? (quantile(times, 0.75) - quantile(times, 0.25)) / m.median_s : 0;
    m.noisy = times.size() >= 3 && m.spread > kNoisySpread;
    m.reps = static_cast<int>(times.size());
  }

  X86Isa isa_;
  BackendConfig config_;
  ResultCache cache_;
  mutable std::optional<Availability> availability_;
  std::string work_dir_;
  std::mutex work_dir_mutex_;
  std::unique_ptr<Worker> worker_;
  std::list<std::pair<std::string, std::map<std::string, ir::Tensor>>> ref_cache_;
};

}  // namespace

std::optional<X86Isa> x86_isa_by_name(std::string_view name) {
  if (name == "x86_avx512") return X86Isa::kAvx512;
  if (name == "x86_avx2") return X86Isa::kAvx2;
  if (name == "x86_64") return X86Isa::kPortable;
  return std::nullopt;
}

const char* x86_isa_name(X86Isa isa) {
  switch (isa) {
    case X86Isa::kAvx512:
      return "x86_avx512";
    case X86Isa::kAvx2:
      return "x86_avx2";
    case X86Isa::kPortable:
      return "x86_64";
  }
  return "x86_64";
}

std::vector<std::string> x86_compile_flags(X86Isa isa, const std::string& compiler) {
  // -fno-math-errno changes no result (only errno) and lets sqrt become one instruction.
  // -ffp-contract=off: GCC's default (fast) turns a * b + c into a fused multiply-add, which
  // rounds once where the interpreter rounds twice; the IR says where one is (fma, fused
  // updates: transforms/contract.h) and the code prints exactly those.
  std::vector<std::string> f = {
      "-O3", "-march=native", "-std=gnu11", "-fno-math-errno", "-ffp-contract=off", "-fopenmp",
      "-w"};
  // GCC's -O3 unroll-and-jam blocks loops the program leaves alone, where the cost model never
  // sees it: it jammed pairs of rows of a vectorised sum over a sequence (y[b,d] = sum_l
  // x[b,l,d]) into two interleaved read streams, and the cold read ran at half the speed of the
  // program as written (3.5 against 1.7 ms on a Zen 4 core). Blocking is a move here (tile_scope
  // and unroll). Clang does not unroll-and-jam by default and refuses the flag.
  if (compiler_version(compiler).find("clang") == std::string::npos)
    f.push_back("-fno-loop-unroll-and-jam");
  switch (isa) {
    case X86Isa::kAvx512:
      f.insert(f.end(), {"-mavx512f", "-mprefer-vector-width=512"});
      break;
    case X86Isa::kAvx2:
      f.insert(f.end(), {"-mavx2", "-mfma", "-mno-avx512f", "-mprefer-vector-width=256"});
      break;
    case X86Isa::kPortable:
      f.insert(f.end(), {"-mno-avx"});
      break;
  }
  return f;
}

GeneratedC x86_generate_c(X86Isa isa, const ir::Program& p, const BackendConfig& config) {
  CodegenOptions co = x86_codegen_options(isa, X86Backend(isa, config).capabilities().threads);
  co.inject = codegen_test_hook(config, p);
  return generate_c(p, co);
}

double x86_verification_tolerance(ir::DType t, const ir::Program& p) {
  std::vector<int64_t> extents;
  return tolerance(t, longest_reduction(p.body, extents));
}

double x86_peak_gflops_per_core(X86Isa isa) {
  switch (isa) {
    case X86Isa::kAvx512:
      return 223;
    case X86Isa::kAvx2:
      return 167;
    case X86Isa::kPortable:
      return 167.0 / 4;
  }
  return 0;
}

std::unique_ptr<Backend> make_x86_backend(X86Isa isa, const BackendConfig& config) {
  return std::make_unique<X86Backend>(isa, config);
}

namespace {
[[maybe_unused]] const bool kX86BackendRegistered =
    register_backend("x86_avx512", 0,
                     [](const BackendConfig& c) { return make_x86_backend(X86Isa::kAvx512, c); }) &&
    register_backend("x86_avx2", 1,
                     [](const BackendConfig& c) { return make_x86_backend(X86Isa::kAvx2, c); }) &&
    register_backend("x86_64", 2,
                     [](const BackendConfig& c) { return make_x86_backend(X86Isa::kPortable, c); });
}  // namespace

std::vector<std::string> x86_link_libraries() {
  return have_libmvec() ? std::vector<std::string>{"-lmvec"} : std::vector<std::string>{};
}

}  // namespace perfdojo::backends
