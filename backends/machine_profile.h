// The figures the cost model reads about one machine: compute peaks, cache sizes and bandwidths,
// core count and a few per-operation costs. Built-in defaults describe the project's AVX-512
// machines (shared/reference/machine.md); `calibrate` measures the machine it runs on.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace perfdojo::backends {

/// Per-machine figures. Bandwidths are single-core read bandwidths unless named otherwise.
struct MachineProfile {
  std::string name = "builtin-x86-avx512";  ///< recorded in every estimate's flags
  /// The widest ISA the calibration saw (x86_avx512, x86_avx2, x86_64), or the cross target a
  /// built-in profile describes (aarch64_neon, aarch64_sve, riscv64_rvv).
  std::string isa = "x86_avx512";
  // Compute peaks, single core, float32, FMA counted as two flops.
  double peak_gflops_avx512 = 223;  ///< 0: the machine has no AVX-512
  double peak_gflops_avx2 = 167;
  double peak_gflops_scalar = 14;
  // Dot-product peaks, single core, a multiply and its add counted as two operations: the int8
  // one (vpdpbusd, u8 x i8 summed in fours into i32; AVX-VNNI's 256-bit form where AVX-512 VNNI
  // is missing) and the bf16 one (vdpbf16ps, bf16 pairs summed into f32). 0: the machine lacks
  // the instruction, or the profile was calibrated before these were measured.
  double peak_gops_vnni = 0;
  double peak_gflops_bf16 = 0;
  double fma_latency_cycles = 4;  ///< one dependent FMA after another
  double add_latency_cycles = 4;  ///< one dependent add after another
  double freq_ghz = 3.5;          ///< core clock the cycle counts convert with
  // Memory hierarchy.
  double l1_bytes = 32 * 1024.0;
  double l2_bytes = 1024 * 1024.0;
  double l3_bytes = 16 * 1024 * 1024.0;  ///< shared by all cores
  double l1_ways = 8;                    ///< associativity: strided accesses crowd into few sets
  double l2_ways = 16;
  double l3_ways = 11;
  double l1_bw_gbs = 200;  ///< loads served by L1 (vector loads, one core)
  double l2_bw_gbs = 90;
  double l3_bw_gbs = 45;
  double dram_bw_gbs = 15;      ///< one core streaming from memory
  double dram_bw_all_gbs = 20;  ///< every core streaming at once
  int cores = 2;
  // Costs the micro-benchmarks do not measure (cycles, or microseconds where named).
  double exp_cycles_scalar = 14;     ///< exp/log/tanh through libm, per element
  double exp_cycles_vector = 240;    ///< the same for one full vector (libm: one call per lane)
  double div_cycles_scalar = 4;      ///< throughput of one scalar divide or square root
  double div_cycles_vector = 10;     ///< one full-width vector divide or square root
  double loop_overhead_uops = 2;     ///< increment, compare and branch per loop iteration
  double fork_join_us = 30;          ///< one parallel scope entered after its threads went idle
  double fork_join_hot_us = 2;       ///< one entered right after another (threads still spinning)
  double fork_spin_us = 200;         ///< how long idle OpenMP threads spin before they sleep
  double parallel_efficiency = 0.9;  ///< speed-up of a parallel scope over its thread count
  double call_overhead_us = 0.3;     ///< calling the compiled kernel once
  // The core's shape. x86 profiles leave the vector fields at 0 and get their width from the
  // AVX-512/AVX2 peaks; other cores (built-in profiles of cross targets) name it.
  double vector_lanes = 0;  ///< f32 lanes of the widest vector unit (0: 16 with AVX-512, else 8)
  double peak_gflops_vector = 0;  ///< FMA peak at vector_lanes (used when vector_lanes > 0)
  double vector_registers = 0;    ///< architectural vector registers (0: 32 with AVX-512, else 16)
  double issue_width = 4;         ///< instructions issued per cycle
  double loads_per_cycle = 2;     ///< load instructions per cycle
  double stores_per_cycle = 1;    ///< store instructions per cycle
  double window_uops = 192;       ///< instructions in flight that can overlap (out-of-order window)
  /// Stream semantic registers (Snitch's SSRs): this many affine accesses of the innermost loop
  /// are streamed by hardware and cost no load or store instruction.
  double ssr_streams = 0;
  /// 1: hardware loops over floating-point instructions (Snitch's FREP): an innermost loop costs
  /// no bookkeeping, and its floating-point instructions do not take the integer core's issue
  /// slots.
  double hw_loops = 0;

  /// f32 lanes of the widest vector unit (16 with AVX-512, else 8, unless vector_lanes says).
  int native_lanes() const {
    if (vector_lanes > 0) return static_cast<int>(vector_lanes);
    return peak_gflops_avx512 > 0 ? 16 : 8;
  }
  /// Architectural vector registers.
  double registers() const {
    if (vector_registers > 0) return vector_registers;
    return peak_gflops_avx512 > 0 ? 32 : 16;
  }
  /// The FMA peak of one core at its widest vector width, GFLOP/s.
  double vector_peak_gflops() const {
    if (vector_lanes > 0) return peak_gflops_vector;
    return peak_gflops_avx512 > 0 ? peak_gflops_avx512 : peak_gflops_avx2;
  }
};

/// The widest x86 ISA this CPU runs, as the backends see it ($PERFDOJO_HIDE_CPU_FEATURES
/// included): x86_avx512, x86_avx2 or x86_64.
std::string this_machine_isa();

/// Whether `p` can describe this machine: its ISA is this machine's and that ISA's peak is
/// measured (a profile calibrated with AVX-512 hidden has no AVX-512 peak).
bool profile_fits_this_machine(const MachineProfile& p);

/// The built-in profile (the project's 2-core AVX-512 machines).
MachineProfile default_profile();

/// Built-in profiles of cores this project cross-compiles for and models (docs/cross.md gives
/// every figure's source): "neoverse-n1" (AWS Graviton2), "neoverse-v1" (AWS Graviton3, SVE
/// 256-bit) and "snitch" (one core of a PULP Snitch cluster: in-order RV32 with a 64-bit FPU,
/// stream semantic registers and FREP hardware loops). nullopt for another name.
std::optional<MachineProfile> builtin_profile(const std::string& name);
/// Names builtin_profile knows.
std::vector<std::string> builtin_profile_names();

/// The profile as `key = value` lines (with a header comment), readable by `parse_profile`.
std::string profile_to_text(const MachineProfile& p);
/// The profile as one JSON object.
std::string profile_to_json(const MachineProfile& p);
/// Parses either form (`key = value` lines or a flat JSON object). Keys not given keep their
/// default; an unknown key, a malformed line or a non-positive size is an error that names the
/// line. Returns nullopt and sets `error` on failure.
std::optional<MachineProfile> parse_profile(const std::string& text, const std::string& file,
                                            std::string* error);
/// Reads a profile file, or a built-in profile named "builtin:NAME"; nullopt and `error`
/// ("FILE: cannot read", a parse error, or an unknown built-in name) on failure.
std::optional<MachineProfile> load_profile(const std::string& path, std::string* error);
/// Writes a profile file (JSON when the name ends in ".json", else key = value); false and
/// `error` on failure.
bool save_profile(const MachineProfile& p, const std::string& path, std::string* error);

/// Each figure of `a` and `b` at its better value: the higher peak and bandwidth, the lower
/// latency and overhead (a busy moment only ever makes a figure worse). Sizes, core count and
/// ISA are `a`'s.
MachineProfile best_of(const MachineProfile& a, const MachineProfile& b);

/// Where `fresh` is markedly worse than `old` (the same ISA): every compute peak and bandwidth
/// more than `tolerance` below old's, e.g. "peak_gflops_avx512 120.3 vs 175.1". "" when none
/// is, or when the ISAs differ (then the profiles describe different machines).
std::string profile_regression(const MachineProfile& old, const MachineProfile& fresh,
                               double tolerance = 0.15);

/// Knobs of the calibration run.
struct CalibrateOptions {
  int rounds = 1;                  ///< whole calibrations run; each figure keeps its best (best_of)
  double seconds_per_test = 0.05;  ///< time each micro-benchmark runs for (best of 3 rounds)
  std::function<void(const std::string&)> progress;  ///< called once per measurement, may be empty
};

/// The calibration's method; a profile cached by an older one is measured again (2: L3
/// bandwidth just past L2, L3 size as the bandwidth sweep saw it; 3: the dot-product peaks).
inline constexpr int kCalibrationVersion = 3;

/// The L3 size the bandwidth sweep (working set in bytes, read GB/s) saw: where a working set of
/// at most 60% of `l3_bytes` (the share the cost model counts on) already reads slower than the
/// geometric mean of `l3_bw` and `dram_bw`, the largest working set past L2 still reading faster
/// (a virtual machine may report its host's whole L3: 480 MiB seen, with memory speed from 256
/// MiB on). Otherwise `l3_bytes`, as when L3 and memory are within 25% of each other: a sweep in
/// steps of 4x would halve a real 32 MiB L3.
double effective_l3_bytes(double l2_bytes, double l3_bytes, double l3_bw, double dram_bw,
                          const std::vector<std::pair<long, double>>& sweep);

/// Measures this machine with micro-benchmarks (FMA chains at each vector width, libm exp,
/// streaming reads and copies at working sets from 16 KiB to 256 MiB, OpenMP fork/join and
/// parallel speed-up, the way generated kernels use them) and returns the profile; figures it
/// cannot measure keep their defaults. On a loaded machine the figures describe it loaded.
MachineProfile calibrate(const CalibrateOptions& options = {});

}  // namespace perfdojo::backends
