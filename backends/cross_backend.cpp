#include "backends/cross_backend.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include "backends/compiler.h"
#include "backends/cost_model.h"
#include "backends/host_buffers.h"
#include "backends/machine_profile.h"
#include "ir/check.h"
#include "ir/interp.h"
#include "util/process.h"

namespace perfdojo::backends {

namespace {

namespace fs = std::filesystem;

// The driver appended to the kernel: reads every parameter buffer from argv[1] (back to back,
// each at a 64-byte-aligned offset, as `layout` places them), runs the kernel once and writes
// the whole block to argv[2]. Exit codes 2-4 name what failed around the kernel.
constexpr const char* kDriver = R"(
/* ---- perfdojo cross driver: buffers in from argv[1], kernel once, buffers out to argv[2] ---- */
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* in = fopen(argv[1], "rb");
  if (!in) return 3;
  void* block = aligned_alloc(64, PERFDOJO_BLOCK_BYTES);
  if (!block) return 4;
  if (fread(block, 1, PERFDOJO_BLOCK_BYTES, in) != PERFDOJO_BLOCK_BYTES) return 3;
  fclose(in);
  void* bufs[PERFDOJO_NUM_PARAMS + 1];
  for (int i = 0; i < PERFDOJO_NUM_PARAMS; ++i) bufs[i] = (char*)block + perfdojo_offsets[i];
  int pd_rc = PERFDOJO_CALL(bufs);
  if (pd_rc) {
    fprintf(stderr, "perfdojo: CUDA error %d: %s\n", pd_rc, PERFDOJO_ERROR(pd_rc));
    return 5;
  }
  FILE* out = fopen(argv[2], "wb");
  if (!out || fwrite(block, 1, PERFDOJO_BLOCK_BYTES, out) != PERFDOJO_BLOCK_BYTES) return 3;
  return fclose(out) == 0 ? 0 : 3;
}
)";

std::vector<size_t> layout(const std::vector<const ir::BufferDecl*>& params, size_t* total) {
  std::vector<size_t> offs;
  size_t at = 0;
  for (const auto* b : params) {
    at = (at + 63) & ~size_t{63};
    offs.push_back(at);
    at += static_cast<size_t>(b->elements()) * ir::dtype_bytes(b->dtype);
  }
  *total = std::max<size_t>(64, (at + 63) & ~size_t{63});
  return offs;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

// What a crash, a compile error or a checker reported: the output, its first 400 and last 200
// characters when longer (the first error comes first, a crash's signal last).
std::string tail_of(const std::string& out) {
  std::string t =
      out.size() > 600 ? out.substr(0, 400) + " ... " + out.substr(out.size() - 200) : out;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

class CrossBackend final : public Backend {
 public:
  CrossBackend(const CrossTarget& t, BackendConfig c) : t_(t), config_(std::move(c)) {
    BackendConfig mc = config_;
    if (mc.machine_profile.empty() && !t_.profile.empty())
      mc.machine_profile = "builtin:" + t_.profile;
    model_ = make_cost_model_backend(mc);
  }

  ~CrossBackend() override {
    if (!work_dir_.empty() && !config_.keep_build_dir) {
      std::error_code ec;
      fs::remove_all(work_dir_, ec);
    }
  }

  std::string name() const override { return t_.name; }

  Availability available() const override {
    for (const std::string& tool : {t_.compiler, t_.emulator})
      if (!tool.empty() && util::find_executable(tool).empty())
        return {false, tool + " is not installed (Debian: " + t_.packages +
                           "; scripts/bootstrap installs them, the cross targets' with "
                           "`scripts/bootstrap --cross`)"};
    if (!model_->available().ok) return model_->available();
    return {};
  }

  Capabilities capabilities() const override {
    Capabilities c;
    const int lanes = t_.vector_bytes / 4;
    if (lanes > 1) c.vector_widths = {lanes};
    c.parallel = false;  // one modelled core; the emulated program runs single-threaded
    c.threads = 1;
    if (t_.cuda) {  // one thread per iteration of a top-level `:par` scope
      c.parallel = true;
      c.threads = model_->capabilities().threads;
    }
    c.vector_registers = model_->capabilities().vector_registers;
    return c;
  }

  bool deterministic() const override { return true; }

  Measurement measure(const ir::Program& p, const MeasureOptions& o) override {
    Measurement m;
    try {
      measure_into(p, o, m);
    } catch (const std::exception& e) {
      m.error = std::string("cross backend: ") + e.what();
    }
    return m;
  }

  std::unique_ptr<Backend> clone() const override {
    return std::make_unique<CrossBackend>(t_, config_);
  }

 private:
  void measure_into(const ir::Program& p, const MeasureOptions& o, Measurement& m) {
    if (auto av = available(); !av.ok) {
      m.error = av.why;
      return;
    }
    if (auto errors = ir::check_program(p); !errors.empty()) {
      m.error = "invalid program: " + errors[0].str();
      return;
    }
    Measurement est = model_->measure(p, o);
    if (!est.ok()) {
      m.error = est.error;
      return;
    }
    m.median_s = m.min_s = est.median_s;
    m.reps = 1;
    m.flags = flags_text();
    if (!o.verify) return;
    // Compile.
    GeneratedC gen = cross_generate_c(t_, p, config_);
    const auto params = kernel_parameters(p);
    size_t total = 0;
    const auto offs = layout(params, &total);
    std::ostringstream src;
    src << gen.source << "\n#define PERFDOJO_BLOCK_BYTES " << total
        << "UL\n#define PERFDOJO_NUM_PARAMS " << params.size()
        << "\nstatic const unsigned long perfdojo_offsets[] = {";
    for (size_t off : offs) src << off << "UL, ";
    src << "0UL};\n";
    if (t_.cuda)
      src << "#define PERFDOJO_CALL(b) perfdojo_entry(b)\n"
             "#define PERFDOJO_ERROR(e) cudaGetErrorString((cudaError_t)(e))\n";
    else
      src << "#define PERFDOJO_CALL(b) (perfdojo_entry(b), 0)\n#define PERFDOJO_ERROR(e) \"\"\n";
    src << kDriver;
    const std::string key = hex64(stable_hash(src.str() + "\n" + join(t_.flags) + t_.compiler));
    const std::string dir = work_dir();
    const std::string exe = dir + "/k-" + key;
    if (!fs::exists(exe)) {
      const std::string c_path = dir + "/k-" + key + (t_.cuda ? ".cu" : ".c");
      std::ofstream(c_path) << src.str();
      std::vector<std::string> argv = {t_.compiler};
      argv.insert(argv.end(), t_.flags.begin(), t_.flags.end());
      argv.insert(argv.end(), {"-o", exe + ".tmp", c_path, "-lm"});
      util::ProcessOptions po;
      po.timeout_s = config_.compile_timeout_s;
      const auto t0 = std::chrono::steady_clock::now();
      auto r = util::run_process(argv, po);
      m.compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!r.ok()) {
        m.error = "cross-compile failed (" + t_.compiler + "): " + tail_of(r.output);
        return;
      }
      fs::rename(exe + ".tmp", exe);
    }
    // Run and verify where the interpreter can check it.
    if (flop_count(p) > config_.verify_interpreter_max_flops) return;
    const ir::TensorMap inputs = ir::make_inputs(p, o.seed);
    std::vector<uint8_t> block(total, 0);
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i]->role == ir::Role::kInput)
        write_tensor(block.data() + offs[i], params[i]->dtype, inputs.at(params[i]->name).data);
    prefill_outputs(block.data(), params, offs);
    const std::string in_path = dir + "/in-" + key, out_path = dir + "/out-" + key;
    {
      std::ofstream in(in_path, std::ios::binary);
      in.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(total));
      if (!in) throw std::runtime_error("cannot write " + in_path);
    }
    std::vector<std::string> argv;
    if (!t_.emulator.empty()) argv = {t_.emulator};
    argv.insert(argv.end(), t_.emulator_args.begin(), t_.emulator_args.end());
    argv.insert(argv.end(), {exe, in_path, out_path});
    util::ProcessOptions po;
    po.timeout_s = o.timeout_s;
    auto r = util::run_process(argv, po);
    std::error_code ec;
    fs::remove(in_path, ec);
    if (r.timed_out) {
      m.error = "timed out: the kernel ran longer than " + std::to_string(o.timeout_s) +
                " s under " + runner();
      fs::remove(out_path, ec);
      return;
    }
    if (t_.cuda && r.exit_code == 5 &&
        (r.output.find("CUDA error 100:") != std::string::npos ||
         r.output.find("CUDA error 35:") != std::string::npos ||
         r.output.find("CUDA error 34:") != std::string::npos)) {
      m.no_device = true;  // compiled; nothing here to run it on
      m.flags += "; not run: " + tail_of(r.output.substr(r.output.find("CUDA error")));
      fs::remove(out_path, ec);
      return;
    }
    if (!r.ok()) {
      m.error = "the kernel failed under " + runner() + " (" +
                (r.exit_code > 128 ? "signal " + std::to_string(r.exit_code - 128)
                                   : "exit " + std::to_string(r.exit_code)) +
                ")" + (r.output.empty() ? "" : ": " + tail_of(r.output));
      fs::remove(out_path, ec);
      return;
    }
    std::ifstream out(out_path, std::ios::binary);
    std::vector<uint8_t> got_block(total);
    out.read(reinterpret_cast<char*>(got_block.data()), static_cast<std::streamsize>(total));
    const bool complete = static_cast<size_t>(out.gcount()) == total;
    out.close();
    fs::remove(out_path, ec);
    if (!complete) {
      m.error = "the kernel's outputs came back incomplete from " + runner();
      return;
    }
    // Within the interpreter's rounding-error bound: the target's libm and vector code may
    // round differently in the last place (docs/ir.md, "Verification").
    std::map<std::string, ir::Tensor> bounds;
    ir::InterpretOptions io;
    io.error_bounds = &bounds;
    auto ref = ir::interpret(p, inputs, io);
    if (!ref.ok()) {
      m.error = "the interpreter refused the program: " + ref.error_text();
      return;
    }
    std::map<std::string, ir::Tensor> got, want;
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i]->role == ir::Role::kOutput) {
        got[params[i]->name] = read_tensor(got_block.data() + offs[i], *params[i]);
        want[params[i]->name] = ref->at(params[i]->name);
      }
    Comparison how;
    how.bounds = &bounds;
    if (compare_outputs(p, got, want, m, how)) m.verified = true;
  }

  std::string runner() const {
    return t_.emulator.empty() ? "the " + t_.name + " device" : t_.emulator;
  }

  std::string flags_text() const {
    std::string s = t_.compiler;
    if (std::string v = compiler_version(t_.compiler); !v.empty()) s += " (" + v + ")";
    s += " " + join(t_.flags);
    if (!t_.emulator.empty()) s += "; run under " + t_.emulator;
    if (!t_.emulator_args.empty()) s += " " + join(t_.emulator_args);
    s += "; time: cost model for " + profile_name() +
         (t_.emulator.empty() ? " (runs verify, they are not timed)"
                              : " (emulated runs are not timed)");
    return s;
  }

  std::string profile_name() const {
    if (!config_.machine_profile.empty()) return config_.machine_profile;
    return t_.profile.empty() ? default_profile().name : "builtin-" + t_.profile;
  }

  const std::string& work_dir() {
    if (work_dir_.empty()) {
      std::string tmpl = (fs::temp_directory_path() / "perfdojo-cross-XXXXXX").string();
      std::vector<char> buf(tmpl.begin(), tmpl.end());
      buf.push_back('\0');
      if (!mkdtemp(buf.data()))
        throw std::runtime_error(std::string("cannot create a build directory: ") +
                                 std::strerror(errno));
      work_dir_ = buf.data();
    }
    return work_dir_;
  }

  CrossTarget t_;
  BackendConfig config_;
  std::unique_ptr<Backend> model_;
  std::string work_dir_;
};

}  // namespace

const std::vector<CrossTarget>& cross_targets() {
  // -O3 as on x86; -fno-math-errno changes no result; -ffp-contract=off: a fused multiply-add
  // only where the IR has one (fma, fused updates), as the interpreter computes. Static
  // programs need no target libraries at run time (qemu-user finds nothing else to load).
  static const std::vector<CrossTarget> kTargets = {
      {"aarch64_neon",
       "neoverse-n1",
       "aarch64-linux-gnu-gcc",
       {"-O3", "-std=gnu11", "-march=armv8.2-a", "-mtune=neoverse-n1", "-fno-math-errno",
        "-ffp-contract=off", "-w", "-static"},
       "qemu-aarch64",
       {"-cpu", "max"},
       16,
       "gcc-aarch64-linux-gnu, qemu-user"},
      {"aarch64_sve",
       "neoverse-v1",
       "aarch64-linux-gnu-gcc",
       {"-O3", "-std=gnu11", "-march=armv8.4-a+sve", "-msve-vector-bits=256", "-mtune=neoverse-v1",
        "-fno-math-errno", "-ffp-contract=off", "-w", "-static"},
       "qemu-aarch64",
       {"-cpu", "max,sve256=on"},
       32,
       "gcc-aarch64-linux-gnu, qemu-user"},
      // GCC 12 cannot vectorise for RVV; clang 14 can, with the vector length fixed at 128 bits
      // (the emulated machine's VLEN). The modelled core is Snitch, whose 64-bit FPU takes two
      // f32 lanes: `:vec` scopes are printed 2 lanes wide so the action space, the model and
      // the code agree.
      {"riscv64_rvv",
       "snitch",
       "clang-14",
       {"--target=riscv64-linux-gnu", "-march=rv64gcv", "-mllvm", "-riscv-v-vector-bits-min=128",
        "-O3", "-std=gnu11", "-fno-math-errno", "-ffp-contract=off", "-w", "-static"},
       "qemu-riscv64",
       {"-cpu", "rv64,v=true,vlen=128,elen=64,vext_spec=v1.0"},
       8,
       "clang-14, gcc-riscv64-linux-gnu, qemu-user"},
  };
  return kTargets;
}

const CrossTarget& memcheck_target() {
  // Valgrind 3.19 does not decode AVX-512: AVX2 code. -g names the kernel's lines in reports.
  static const CrossTarget kMemcheck = {
      "x86_memcheck",
      "",
      "cc",
      {"-O3", "-g", "-std=gnu11", "-march=native", "-mavx2", "-mfma", "-mno-avx512f",
       "-fno-math-errno", "-ffp-contract=off", "-w"},
      "valgrind",
      {"--tool=memcheck", "--error-exitcode=99", "--undef-value-errors=yes", "-q"},
      32,
      "gcc, valgrind",
      true};
  return kMemcheck;
}

namespace {
// Targets other backends build on this one (cuda_backend.cpp's), registered from their files.
std::vector<const CrossTarget*>& registered_targets() {
  static std::vector<const CrossTarget*> targets;
  return targets;
}
}  // namespace

bool register_cross_target(const CrossTarget* target) {
  registered_targets().push_back(target);
  return true;
}

const CrossTarget* cross_target(std::string_view name) {
  for (const auto& t : cross_targets())
    if (t.name == name) return &t;
  if (name == memcheck_target().name) return &memcheck_target();
  for (const CrossTarget* t : registered_targets())
    if (t->name == name) return t;
  return nullptr;
}

std::unique_ptr<Backend> make_cross_backend(const CrossTarget& target,
                                            const BackendConfig& config) {
  return std::make_unique<CrossBackend>(target, config);
}

namespace {
template <const char* kName>
std::unique_ptr<Backend> cross_by_name(const BackendConfig& c) {
  return make_cross_backend(*cross_target(kName), c);
}
constexpr char kNeon[] = "aarch64_neon", kSve[] = "aarch64_sve", kRvv[] = "riscv64_rvv";
[[maybe_unused]] const bool kCrossBackendRegistered =
    register_backend("aarch64_neon", 10, cross_by_name<kNeon>) &&
    register_backend("aarch64_sve", 11, cross_by_name<kSve>) &&
    register_backend("riscv64_rvv", 12, cross_by_name<kRvv>) &&
    register_backend("x86_memcheck", 13, [](const BackendConfig& c) {
      return make_cross_backend(memcheck_target(), c);
    });
}  // namespace

GeneratedC cross_generate_c(const CrossTarget& target, const ir::Program& p,
                            const BackendConfig& config, const std::string& cuda_namespace) {
  CodegenOptions co;
  co.target = target.name;
  co.native_vector_bytes = target.vector_bytes;
  co.parallel = false;
  co.libmvec = false;
  if (target.locals_only) co.small_temp_elements = std::numeric_limits<int64_t>::max();
  co.cuda = target.cuda;
  co.cuda_namespace = cuda_namespace;
  // The AArch64 targets run under qemu's `-cpu max`, which has i8mm's usdot.
  co.arm_usdot = target.name.rfind("aarch64", 0) == 0;
  co.inject = codegen_test_hook(config, p);
  return generate_c(p, co);
}

}  // namespace perfdojo::backends
