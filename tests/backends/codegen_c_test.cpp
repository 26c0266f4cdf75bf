// The C printer as a printer: what it writes for each IR form, without compiling anything.
#include "backends/codegen_c.h"

#include <doctest/doctest.h>

#include "backends/x86_test_support.h"

using namespace perfdojo;
using backends::CodegenOptions;
using backends::generate_c;
using testing::program_of;
using testing::scaled;
using testing::transformed;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

size_t count_of(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("a plain matmul prints as three nested loops with the IR statement as a comment") {
  auto g = generate_c(scaled("matmul-256"));  // M = 8, N = 16, K = 8
  CHECK(has(g.source,
            "void kernel(const float* restrict A, const float* restrict B, float* restrict C) {"));
  CHECK(has(g.source, "for (int64_t i2 = 0; i2 < 8; ++i2) {"));
  CHECK(has(g.source, "// C[{0},{1}] += A[{0},{2}] * B[{2},{1}]"));
  CHECK(has(g.source, "C[i0 * 16 + i1] += A[i0 * 8 + i2] * B[i1 + i2 * 16];"));  // terms by depth
  CHECK(has(g.source, "C[pd_n] = 0.0f;  // C = 0"));
  CHECK(has(g.source,
            "void perfdojo_entry(void* const* bufs) { kernel((const float*)bufs[0], (const "
            "float*)bufs[1], (float*)bufs[2]); }"));
  CHECK(g.vector_scopes == 0);
  CHECK(g.scalar_fallbacks == 0);
}

TEST_CASE("a fill no statement can observe is left out") {
  // Every element of y stored before anything reads it (ir::initial_value_dead): no fill.
  auto dead =
      generate_c(program_of("input x: f32[8, 16]\noutput y: f32[8, 16] = 0\n\n"
                            "8 4 4 y[{0},{1}*4+{2}] = x[{0},{1}*4+{2}]\n"));
  CHECK_FALSE(has(dead.source, "y[pd_n]"));
  // Half the columns written: the other half must hold the initial value.
  auto half =
      generate_c(program_of("input x: f32[8, 16]\noutput y: f32[8, 16] = 0\n\n"
                            "8 8 y[{0},{1}] = x[{0},{1}]\n"));
  CHECK(has(half.source, "y[pd_n] = 0.0f;  // y = 0"));
}

TEST_CASE("kernel parameters are the inputs then the outputs, temporaries are locals") {
  auto p = scaled("softmax");
  auto params = backends::kernel_parameters(p);
  REQUIRE(params.size() == 2);
  CHECK(params[0]->name == "s");
  CHECK(params[1]->name == "d");
  auto g = generate_c(p);
  CHECK(has(g.source, "float m[4] __attribute__((aligned(64)));"));
  CHECK(has(g.source, "m[pd_n] = (-INFINITY);  // m = -inf"));
  CHECK(has(g.source, "e[i0 * 16 + i1] = expf(x[i0 * 16 + i1]);"));
  CHECK(has(g.source, "m[i0] = pd_maxf(m[i0], s[i0 * 16 + i1]);"));
}

TEST_CASE("temporaries above the small size are static arrays") {
  auto g =
      generate_c(program_of("input x: f32[512]\noutput y: f32[512]\ntemp t: f32[512]\n\n512 t[{0}] "
                            "= x[{0}]\n512 y[{0}] = t[{0}]\n"));
  CHECK(has(g.source, "static float t[512] __attribute__((aligned(64)));"));
  CodegenOptions o;
  o.small_temp_elements = 1024;
  CHECK_FALSE(has(generate_c(program_of("input x: f32[512]\noutput y: f32[512]\ntemp t: "
                                        "f32[512]\n\n512 t[{0}] = x[{0}]\n512 y[{0}] = t[{0}]\n"),
                             o)
                      .source,
                  "static float t"));
}

TEST_CASE("a vectorised inner scope prints as vector loads, stores and broadcasts") {
  auto p = transformed(scaled("matmul-256"), "swap_scopes 0.0\nvectorize 0.0.0 16\n");  // M K N:vec
  auto g = generate_c(p);
  CHECK(g.vector_scopes == 1);
  CHECK(g.scalar_fallbacks == 0);
  CHECK(has(g.source, "typedef float f32x16 __attribute__((vector_size(64)));"));
  CHECK(has(g.source,
            "f32x16_store(&C[i0 * 16], f32x16_load(&C[i0 * 16]) + f32x16_splat(A[i0 * 8 + i1]) * "
            "f32x16_load(&B[i1 * 16]));"));
}

TEST_CASE("a scope wider than a register prints as several registers") {
  auto p = transformed(scaled("matmul-256"), "swap_scopes 0.0\nvectorize 0.0.0 16\n");
  CodegenOptions o;
  o.native_vector_bytes = 32;  // AVX2
  auto g = generate_c(p, o);
  CHECK(g.vector_scopes == 1);
  CHECK_FALSE(has(g.source, "f32x16"));
  CHECK(has(g.source, "f32x8_store(&C[i0 * 16], "));
  CHECK(has(g.source, "f32x8_store(&C[i0 * 16 + 8], "));
  CHECK(has(g.source, "f32x8_load(&B[i1 * 16 + 8])"));
}

TEST_CASE(
    "a reduction into a lane-invariant element accumulates in registers summed once per row") {
  // rowsum: M N y[{0}] += x[{0},{1}], N = 16 tiled 2 x 8:vec, so the reduction spans two scopes.
  auto p = transformed(scaled("rowsum"), "tile_scope 0.0 8\nvectorize 0.0.0 8\n");
  auto g = generate_c(p);
  CHECK(g.vector_scopes == 1);
  CHECK(has(g.source, "f32x8 acc0_0 = f32x8_splat(0.0f);  // lanes of y[{0}] += x[{0},{1}*8+{2}]"));
  CHECK(has(g.source, "acc0_0 = acc0_0 + f32x8_load(&x[i0 * 16 + i1 * 8]);"));
  CHECK(has(g.source, "y[i0] += f32x8_hadd(acc0_0);  // sum across lanes"));
  // The accumulator lives outside the loop over the tiles of the row, not inside it.
  CHECK(g.source.find("acc0_0 = f32x8_splat") <
        g.source.find("for (int64_t i1 = 0; i1 < 2; ++i1)"));
}

TEST_CASE("offsets of one buffer at least the lanes apart vectorise (two halves of a row)") {
  auto g =
      generate_c(program_of("input x: f32[32]\noutput y: f32[32]\n\n16:vec y[{0}] = x[{0}] + "
                            "{0}\n| y[{0}+16] = x[{0}+16] - {0}\n"));
  CHECK(g.scalar_fallbacks == 0);
  CHECK(g.vector_scopes == 1);
  CHECK(has(g.source, "_iotas(0, 1)"));  // positions below 2^24: a splat plus a ramp, exact
}

TEST_CASE(
    "positions compared in a select use 32-bit integer lanes; other untyped comparisons f64") {
  CodegenOptions o;
  o.native_vector_bytes = 64;
  // A causal mask: integers below 2^30, compared exactly in the mask's own lanes, 16 at a time.
  auto causal = generate_c(
      program_of("input x: f32[64, 64]\noutput y: f32[64, 64]\n\n"
                 "64 4 16:vec y[{0},{1}*16+{2}] = {1}*16+{2} <= {0} ? x[{0},{1}*16+{2}] : -inf\n"),
      o);
  CHECK(causal.scalar_fallbacks == 0);
  CHECK(has(causal.source, "f32x16_sel(m32x16_iiota(i1 * 16, 1) <= m32x16_isplat(i0), "));
  CHECK_FALSE(has(causal.source, "f64x8_iota(i1"));
  // A fraction is not an integer: the comparison stays in f64 lanes, as the interpreter computes.
  auto half = generate_c(
      program_of(
          "input x: f32[64, 64]\noutput y: f32[64, 64]\n\n"
          "64 4 16:vec y[{0},{1}*16+{2}] = ({1}*16+{2}) * 0.5 <= {0} ? x[{0},{1}*16+{2}] : 0\n"),
      o);
  CHECK(has(half.source, "f64x8_iota("));
  CHECK_FALSE(has(half.source, "_iiota(i1"));
}

TEST_CASE("a max reduction over lanes keeps the IR's max and its identity") {
  auto p = program_of(
      "input x: f32[4, 16]\noutput y: f32[4] = -inf\n\n4 16:vec y[{0}] = max(x[{0},{1}])\n");
  CodegenOptions o;
  o.native_vector_bytes = 32;
  auto g = generate_c(p, o);
  CHECK(g.vector_scopes == 1);
  CHECK(
      has(g.source, "f32x8 acc0_0 = f32x8_splat((-INFINITY)), acc0_1 = f32x8_splat((-INFINITY));"));
  CHECK(has(g.source, "acc0_1 = f32x8_max(acc0_1, f32x8_load(&x[i0 * 16 + 8]));"));
  CHECK(has(g.source, "y[i0] = pd_maxf(y[i0], f32x8_hmax(f32x8_max(acc0_0, acc0_1)));"));
}

TEST_CASE("a register tile of vector partial sums lives across the reduction loop around it") {
  // y[b,n] = sum_k W[n,k] x[b,k], k in 16-lane chunks outermost: 2 rows x 4 batches of
  // unrolled updates inside it. Each of the eight elements gets its own register, kept across the
  // k loop, and is summed across its lanes once after it, not once per chunk.
  auto p = program_of(
      "input W: f32[4, 64]\ninput x: f32[4, 64]\noutput y: f32[4, 4] = 0\n\n"
      "2 4 2:unroll 4:unroll 16:vec y[{3},{0}*2+{2}] += W[{0}*2+{2},{1}*16+{4}] * "
      "x[{3},{1}*16+{4}]\n");
  CodegenOptions o;
  o.native_vector_bytes = 64;
  auto g = generate_c(p, o);
  CHECK(has(g.source, "acc0_7 = f32x16_splat(0.0f);"));
  CHECK_FALSE(has(g.source, "acc0_8"));
  CHECK(g.source.find("acc0_0 = f32x16_splat") <
        g.source.find("for (int64_t i1 = 0; i1 < 4; ++i1)"));
  CHECK(count_of(g.source, "+= f32x16_hadd(") == 8);
  CHECK(has(g.source,
            "{ const int64_t i2 = 1; const int64_t i3 = 2; y[i0 * 2 + i2 + i3 * 4] += "
            "f32x16_hadd(acc0_6); }"));
  // Twelve elements would not fit the eight registers: the sums stay inside the k loop.
  auto big =
      generate_c(program_of("input W: f32[6, 64]\ninput x: f32[4, 64]\noutput y: f32[4, 6] = 0\n\n"
                            "2 4 3:unroll 4:unroll 16:vec y[{3},{0}*3+{2}] += "
                            "W[{0}*3+{2},{1}*16+{4}] * x[{3},{1}*16+{4}]\n"),
                 o);
  CHECK_FALSE(has(big.source, "acc0_1 "));
  CHECK(big.source.find("for (int64_t i1 = 0; i1 < 4; ++i1)") <
        big.source.find("acc0_0 = f32x16_splat"));
}

TEST_CASE("unrolled updates of one accumulator rotate over register sets, combined once") {
  // 16:unroll 16:vec: copy v of the unrolled scope updates set v % 8, so no update waits on the
  // one before it; the eight sets are combined after the row.
  auto p = program_of(
      "input x: f32[4, 256]\noutput y: f32[4] = -inf\n\n4 16:unroll 16:vec y[{0}] = "
      "max(x[{0},{1}*16+{2}])\n");
  CodegenOptions o;
  o.native_vector_bytes = 64;
  auto g = generate_c(p, o);
  CHECK(has(g.source, "acc0_7 = f32x16_splat((-INFINITY));"));
  CHECK_FALSE(has(g.source, "acc0_8"));
  CHECK(count_of(g.source, "acc0_3 = f32x16_max(acc0_3, ") == 2);  // copies 3 and 11
  CHECK(has(g.source, "acc0_3 = f32x16_max(acc0_3, f32x16_load(&x[i0 * 256 + i1 * 16]));"));
  CHECK(has(g.source, "f32x16_hmax(f32x16_max(f32x16_max("));
  // Two registers per update (AVX2): four sets of two, eight registers in all.
  o.native_vector_bytes = 32;
  auto two = generate_c(p, o);
  CHECK(has(two.source, "acc0_7 = f32x8_splat"));
  CHECK_FALSE(has(two.source, "acc0_8"));
  CHECK(count_of(two.source, "acc0_6 = f32x8_max(acc0_6, ") ==
        4);  // copies 3, 7, 11, 15, high half
  // Without unrolling there is one set.
  o.unroll = false;
  auto rolled = generate_c(p, o);
  CHECK_FALSE(has(rolled.source, "acc0_2"));
  // Two accumulators in one `:vec` scope share the eight registers: four sets each.
  o.unroll = true;
  o.native_vector_bytes = 64;
  auto both = generate_c(
      program_of("input x: f32[4, 256]\noutput a: f32[4] = 0\noutput b: f32[4] = -inf\n\n"
                 "4 16:unroll 16:vec a[{0}] += x[{0},{1}*16+{2}]\n| | | b[{0}] = "
                 "max(x[{0},{1}*16+{2}])\n"),
      o);
  CHECK(has(both.source, "acc0_3 = "));
  CHECK(has(both.source, "acc1_3 = "));
  CHECK_FALSE(has(both.source, "acc0_4"));
  CHECK_FALSE(has(both.source, "acc1_4"));
  // A loop between the unrolled scope and the update: one set (each copy's loop is serial).
  auto between =
      generate_c(program_of("input x: f32[4, 256]\noutput y: f32[4] = -inf\n\n"
                            "4 4:unroll 4 16:vec y[{0}] = max(x[{0},{1}*64+{2}*16+{3}])\n"),
                 o);
  CHECK_FALSE(has(between.source, "acc0_1"));
}

TEST_CASE("a vec scope the printer cannot vectorise falls back to a plain loop and says why") {
  SUBCASE("strided access") {
    auto g =
        generate_c(program_of("input x: f32[32]\noutput y: f32[16]\n\n16:vec y[{0}] = x[2*{0}]\n"));
    CHECK(g.vector_scopes == 0);
    CHECK(g.scalar_fallbacks == 1);
    REQUIRE(g.notes.size() == 1);
    CHECK(has(g.notes[0], "neither unit-stride nor invariant"));
    CHECK(has(g.source,
              "// :vec scope kept scalar: access to x is neither unit-stride nor invariant in the "
              "lanes"));
    CHECK(has(g.source, "y[i0] = x[i0 * 2];"));
  }
  SUBCASE("a lane reads what another lane writes") {
    auto g = generate_c(program_of(
        "input x: f32[17]\noutput y: f32[17] = 0\n\n16:vec y[{0}+1] = y[{0}] + x[{0}]\n"));
    CHECK(g.scalar_fallbacks == 1);
    CHECK(has(g.source, "accessed at different elements"));
  }
  SUBCASE("two offsets of one buffer closer than the lanes span") {
    auto g =
        generate_c(program_of("input x: f32[32]\noutput y: f32[32]\n\n16:vec y[{0}] = x[{0}]\n| "
                              "y[{0}+8] = x[{0}] * 2\n"));
    CHECK(g.scalar_fallbacks == 1);
    CHECK(has(g.source, "accessed at different elements"));
  }
  SUBCASE("every lane stores to one element") {
    auto g = generate_c(program_of("input x: f32[16]\noutput y: f32[1]\n\n16:vec y[0] = x[{0}]\n"));
    CHECK(g.scalar_fallbacks == 1);
    CHECK(has(g.source, "every lane writes the same element of y"));
  }
  SUBCASE("i32 arithmetic") {
    auto g = generate_c(
        program_of("input x: i32[16]\noutput y: i32[16]\n\n16:vec y[{0}] = x[{0}] * 3\n"));
    CHECK(g.scalar_fallbacks == 1);
    CHECK(has(g.source, "y[i0] = pd_muli(x[i0], 3);"));
  }
  SUBCASE("vectorisation switched off") {
    CodegenOptions o;
    o.vectorize = false;
    auto g = generate_c(
        program_of("input x: f32[16]\noutput y: f32[16]\n\n16:vec y[{0}] = x[{0}]\n"), o);
    CHECK(g.vector_scopes == 0);
    CHECK(g.scalar_fallbacks == 0);
    CHECK(has(g.source, "y[i0] = x[i0];"));
  }
}

TEST_CASE("parallel scopes print as OpenMP loops and unrolled scopes as constant blocks") {
  auto p = program_of(
      "input x: f32[8, 4]\noutput y: f32[8, 4]\n\n8:par 4:unroll y[{0},{1}] = x[{0},{1}] * 2\n");
  auto g = generate_c(p);
  CHECK(has(g.source,
            "#pragma omp parallel for schedule(static)\n  for (int64_t i0 = 0; i0 < 8; ++i0) {"));
  CHECK(count_of(g.source, "const int64_t i1 = ") == 4);
  CHECK(has(g.source, "const int64_t i1 = 3;"));
  CodegenOptions o;
  o.parallel = o.unroll = false;
  auto plain = generate_c(p, o);
  CHECK_FALSE(has(plain.source, "#pragma omp"));
  CHECK(has(plain.source, "for (int64_t i1 = 0; i1 < 4; ++i1) {"));
  o.unroll = true;
  o.max_unroll = 2;
  CHECK(has(generate_c(p, o).source, "#pragma GCC unroll 4"));
}

TEST_CASE(
    "an iteration's own slice of a temporary is declared inside the :par loop, one per thread") {
  // t (a packed row, 4096 elements a slice: above the small size) and s (a one-element
  // register), as parallelize leaves them: a first index that is the scope's iterator.
  auto p = program_of(
      "input x: f32[8, 4096]\noutput y: f32[8, 4096]\ntemp t: f32[8, 4096]\ntemp s: f32[8, 1]\n\n"
      "8:par 4096 t[{0},{1}] = x[{0},{1}] * 2\n| s[{0},0] = 0\n| 4096 s[{0},0] += t[{0},{1}]\n"
      "| 4096 y[{0},{1}] = t[{0},{1}] + s[{0},0]\n");
  for (bool parallel : {true, false}) {
    CodegenOptions o;
    o.parallel = parallel;
    o.threads = 2;
    auto g = generate_c(p, o);
    const std::string loop =
        std::string(parallel ? "#pragma omp parallel for schedule(static) num_threads(2)\n" : "") +
        "  for (int64_t i0 = 0; i0 < 8; ++i0) {\n";
    CHECK_MESSAGE(has(g.source, loop + "    float s[1] __attribute__((aligned(64)));"), g.source);
    CHECK(has(
        g.source,
        "    float t[4096] __attribute__((aligned(64)));  // temp t: f32, this thread's slice"));
    CHECK(has(g.source, "t[i1] = x[i0 * 4096 + i1] * 2.0f;"));  // the first index dropped
    CHECK_FALSE(has(g.source, "static float t["));
  }
  // Past 256 KiB a thread's slice is thread-local storage, not its stack.
  auto big = program_of(
      "input x: f32[4, 131072]\noutput y: f32[4, 131072]\ntemp t: f32[4, 131072]\n\n"
      "4:par 131072 t[{0},{1}] = x[{0},{1}] * 2\n| 131072 y[{0},{1}] = t[{0},{1}]\n");
  CHECK(has(generate_c(big).source, "static __thread float t[131072]"));
}

TEST_CASE("buffer names that are C words or header macros are renamed, the rest kept") {
  auto g =
      generate_c(program_of("input float: f32[4]\ninput i1: f32[4]\noutput NAN: f32[4]\n\n4 "
                            "NAN[{0}] = float[{0}] + i1[{0}]\n"));
  CHECK(has(g.source,
            "const float* restrict float_, const float* restrict i1_, float* restrict NAN_"));
  CHECK(has(g.source, "NAN_[i0] = float_[i0] + i1_[i0];"));
}

TEST_CASE("literals keep the statement's type and negative literals never form a decrement") {
  auto g =
      generate_c(program_of("input x: f64[4]\noutput y: f64[4]\noutput z: f32[4]\n\n4 y[{0}] = "
                            "x[{0}] * 0.1 - -1\n| z[{0}] = f32(-(x[{0}] - 2)) * 1e-5\n"));
  CHECK(has(g.source, "y[i0] = (x[i0] * 0.1) - -1.0;"));
  CHECK(has(g.source, "z[i0] = (float)(-(x[i0] - 2.0)) * 1e-05f;"));
}

TEST_CASE("i32 statements use wrapping helpers and casts follow the interpreter") {
  auto g =
      generate_c(program_of("input x: f32[4]\ninput k: i32[4]\noutput y: i32[4]\n\n4 y[{0}] = "
                            "i32(x[{0}] * 10) / k[{0}] - k[{0}]\n"));
  CHECK(has(g.source, "y[i0] = pd_subi(pd_divi(pd_to_i32(x[i0] * 10.0f), k[i0]), k[i0]);"));
}

TEST_CASE("selects compare in their operands' type and pick in the statement's") {
  auto g = generate_c(program_of(
      "input x: f32[4]\noutput y: f32[4]\n\n4 y[{0}] = x[{0}] > 0 ? x[{0}] : 0.5 * x[{0}]\n"));
  CHECK(has(g.source, "y[i0] = x[i0] > 0.0f ? x[i0] : (0.5f * x[i0]);"));
  auto v =
      generate_c(program_of("input x: f32[16]\noutput y: f32[16]\n\n16:vec y[{0}] = x[{0}] > 0 ? "
                            "x[{0}] : 0.5 * x[{0}]\n"));
  CHECK(v.vector_scopes == 1);
  CHECK(has(v.source,
            "f32x16_sel(f32x16_load(&x[0]) > f32x16_splat(0.0f), f32x16_load(&x[0]), "
            "f32x16_splat(0.5f) * f32x16_load(&x[0]))"));
}

TEST_CASE("each test hook changes the printed kernel and none is on by default") {
  auto p = scaled("bias-relu");
  CHECK_FALSE(has(generate_c(p).source, "test hook"));
  for (const char* hook : {"segv", "hang", "alloc", "wrong"}) {
    CodegenOptions o;
    o.inject = hook;
    CHECK_MESSAGE(has(generate_c(p, o).source, std::string("test hook inject=") + hook), hook);
  }
}

TEST_CASE("nested unrolling stops at the code size budget") {
  auto p = program_of(
      "input x: f32[64, 64]\noutput y: f32[64, 64]\n\n64:unroll 64:unroll y[{0},{1}] = "
      "x[{0},{1}]\n");
  auto g = generate_c(p);  // 64 copies of the outer body, then the budget (1024) stops the inner
  CHECK(count_of(g.source, "const int64_t i0 = ") == 64);
  CHECK(count_of(g.source, "const int64_t i1 = ") == 0);
  CHECK(has(g.source, "// :unroll 64 left as a loop: nested unrolling would exceed 1024 copies"));
  CodegenOptions o;
  o.max_unrolled_copies = 4096;
  CHECK(count_of(generate_c(p, o).source, "const int64_t i1 = ") == 64 * 64);
}

TEST_CASE(
    "vector exp calls glibc's vector math library when allowed, one libm call per lane otherwise") {
  auto p = program_of(
      "input x: f32[4, 16]\noutput y: f32[4, 16]\n\n4 16:vec y[{0},{1}] = exp(x[{0},{1}])\n");
  CodegenOptions o;
  o.native_vector_bytes = 32;
  auto per_lane = generate_c(p, o);
  CHECK(has(per_lane.source,
            "PD_INLINE f32x8 f32x8_exp(f32x8 a) { f32x8 r; for (int l = 0; l < 8; ++l) r[l] = "
            "expf(a[l]); return r; }"));
  CHECK_FALSE(has(per_lane.source, "_ZGV"));
  o.libmvec = true;
  auto mvec = generate_c(p, o);
  CHECK(has(mvec.source, "f32x8 _ZGVdN8v_expf(f32x8);"));
  CHECK(has(mvec.source, "PD_INLINE f32x8 f32x8_exp(f32x8 a) { return _ZGVdN8v_expf(a); }"));
  o.native_vector_bytes = 64;
  CHECK(has(generate_c(p, o).source, "f32x16 _ZGVeN16v_expf(f32x16);"));
  // A program that computes -inf (a mask) gets the range check: a vector inside libmvec's fast
  // range goes straight to it, one wholly below ln(2^-150) is 0, a mixed one takes the edge
  // function (denormal results scaled into range, libm for NaN and overflow).
  auto masked = program_of(
      "input x: f32[4, 16]\noutput y: f32[4, 16]\n\n"
      "4 16:vec y[{0},{1}] = exp({1} <= {0} ? x[{0},{1}] : -inf)\n");
  o.native_vector_bytes = 32;
  const auto guarded = generate_c(masked, o).source;
  CHECK(has(guarded,
            "PD_INLINE f32x8 f32x8_exp(f32x8 a) { if (__builtin_expect((_mm256_movemask_ps("));
  CHECK(has(guarded, ") return _ZGVdN8v_expf(a); if ("));
  CHECK(has(guarded, "return f32x8_splat(0.0f); return f32x8_exp_edge(a); }"));
  CHECK(has(guarded, "if (!(ok[l] | z[l] | low[l])) r[l] = expf(a[l]);"));
  o.native_vector_bytes = 64;
  CHECK(has(generate_c(masked, o).source,
            "_mm512_cmp_ps_mask((__m512)a, _mm512_set1_ps(-87.0f), _CMP_GE_OQ) == 0xFFFF"));
}

TEST_CASE(
    "stores to a `stream` buffer print as aligned-or-plain non-temporal stores, then a fence") {
  const char* text =
      "input x: f32[8, 64]\noutput y: f32[8, 64] stream\noutput z: f32[8, 64]\n\n"
      "8:par 4 16:vec y[{0},{1}*16+{2}] = x[{0},{1}*16+{2}] * 2\n"
      "| | | z[{0},{1}*16+{2}] = x[{0},{1}*16+{2}] + 1\n";
  auto p = program_of(text);
  CodegenOptions o;
  o.stream_stores = true;
  auto g = generate_c(p, o);
  CHECK(g.streamed_stores == 1);
  CHECK(has(g.source, "#include <immintrin.h>"));
  CHECK(has(
      g.source,
      "if (((uintptr_t)p & 63) == 0) _mm512_stream_ps(p, (__m512)v); else f32x16_store(p, v);"));
  CHECK(has(g.source, "f32x16_stream(&y["));
  CHECK(has(g.source, "f32x16_store(&z["));  // z is not declared stream
  // One fence per parallel iteration, one before returning.
  CHECK(count_of(g.source, "_mm_sfence();") == 2);
  // AVX2 registers: the 256-bit form; without the option (other targets) plain stores only.
  o.native_vector_bytes = 32;
  CHECK(has(generate_c(p, o).source, "_mm256_stream_ps(p, (__m256)v)"));
  CodegenOptions off;
  auto plain = generate_c(p, off);
  CHECK(plain.streamed_stores == 0);
  CHECK_FALSE(has(plain.source, "_stream"));
  CHECK_FALSE(has(plain.source, "sfence"));
}

TEST_CASE("a register tile's copy-in prefetches the next iteration's lines before its updates") {
  // The micro-kernel's tile loop: copy C's 2 x 32 block in (unrolled, two vectors a row), update
  // it over k, copy it out. The next iteration's rows are 2 * 64 floats further on.
  const char* text =
      "input A: f32[4, 8]\ninput B: f32[8, 64]\noutput C: f32[4, 64] = 0\ntemp T: f32[2, 32]\n\n"
      "2 2 2:unroll 2:unroll 16:vec T[{2},{3}*16+{4}] = C[{0}*2+{2},{1}*32+{3}*16+{4}]\n"
      "| | 8 2:unroll 2:unroll 16:vec T[{3},{4}*16+{5}] += A[{0}*2+{3},{2}] * "
      "B[{2},{1}*32+{4}*16+{5}]\n"
      "| | 2:unroll 2:unroll 16:vec C[{0}*2+{2},{1}*32+{3}*16+{4}] = T[{2},{3}*16+{4}]\n";
  auto p = program_of(text);
  auto g = generate_c(p);
  CHECK(g.prefetched_tiles == 1);
  // The tile loop is i1 (over column panels, 32 floats apart): the next one's four lines.
  CHECK(has(g.source, "if (i1 + 1 < 2) {"));
  CHECK(count_of(g.source, "__builtin_prefetch(") == 4);
  CHECK(has(g.source, "__builtin_prefetch(&C[i0 * 128 + i1 * 32 + 32], 1, 3);"));
  CHECK(has(g.source, "__builtin_prefetch(&C[i0 * 128 + i1 * 32 + 112], 1, 3);"));
  // The prefetches sit between the copy-in and the update loop.
  const size_t copy_in = g.source.find("T[{2},{3}*16+{4}] = C"),
               pf = g.source.find("__builtin_prefetch"),
               update = g.source.find("for (int64_t i2 = 0; i2 < 8; ++i2)");
  CHECK(copy_in < pf);
  CHECK(pf < update);
  // Off: none; a copy from another temporary or without a loop after it: none either.
  CodegenOptions off;
  off.prefetch_tiles = false;
  CHECK_FALSE(has(generate_c(p, off).source, "__builtin_prefetch"));
  auto no_loop = program_of(
      "input x: f32[4, 16]\noutput y: f32[4, 16]\ntemp T: f32[16]\n\n"
      "4 16:vec T[{1}] = x[{0},{1}]\n| 16:vec y[{0},{1}] = T[{1}]\n");
  CHECK(generate_c(no_loop).prefetched_tiles == 0);
}

// docs/ir.md, "Indirect indices": the index element read (through pd_idx) times the row's
// stride, a data-bounded loop's bounds read the same way, and the row 16 index elements on
// prefetched, its position clamped to the index buffer's last element.
TEST_CASE("indirect reads print through pd_idx, with the row ahead prefetched") {
  auto g = generate_c(scaled("embedding-bag-sum"));  // B = 4, L = 3, D = 16, V = 10
  CHECK(
      has(g.source, "out[i0 * 16 + i2] += W[i2 + pd_idx(idx[i0 * 3 + i1], 0, 10, \"idx\") * 16];"));
  CHECK(has(g.source, "#define pd_idx(v, lo, hi, name) ((int64_t)(v))"));
  CHECK(has(g.source,
            "const int64_t pd_row = pd_idx(idx[(i0 * 3 + i1 + 16 < 11 ? (i0 * 3 + i1 + "
            "16) : 11)], 0, 10, \"idx\") * 16 + 0;"));
  CHECK(count_of(g.source, "__builtin_prefetch(&W[pd_row + ") == 1);  // 64 bytes: one line
  CodegenOptions none;
  none.gather_prefetch = 0;
  CHECK_FALSE(has(generate_c(scaled("embedding-bag-sum"), none).source, "__builtin_prefetch"));
  CHECK_FALSE(has(generate_c(scaled("softmax")).source, "pd_idx"));
  auto csr = generate_c(scaled("csr-spmv"));  // M = 5, NNZ = 12
  CHECK(has(csr.source, "for (int64_t i1 = ((pd_idx(rowptr[i0], 0, 13, \"rowptr\")) > 0 ? "));
  CHECK(has(csr.source, "x[pd_idx(col[i1], 0, 6, \"col\")]"));
}
