// The suite kernels compute what their descriptions say.
//
// Each test takes the real kernel file from kernels/, shrinks it by rewriting only its
// `NAME = VALUE` size lines (so the body under test is the suite's own), runs the reference
// interpreter on generated inputs, and compares every output with a direct C++ implementation
// written independently here. The direct versions compute in float, statement by statement, in
// the same order as the IR, so the results agree to within rounding of the math library.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "ir/interp.h"
#include "ir/ir.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "support/test_files.h"

namespace {

namespace fs = std::filesystem;
using perfdojo::ir::Program;
using perfdojo::ir::Role;
using perfdojo::ir::Tensor;
using perfdojo::ir::TensorMap;

constexpr double kTolerance = 1e-5;

using perfdojo::testing::read_text;

fs::path kernel_path(const std::string& name) {
  return fs::path(PERFDOJO_KERNEL_DIR) / (name + ".pdj");
}

/// The kernel file's text with each `NAME = VALUE` size line named in `sizes` rewritten to the
/// new value. Every requested size must occur exactly once.
std::string resized_kernel(const std::string& name, const std::map<std::string, int64_t>& sizes) {
  const std::string text = read_text(kernel_path(name));
  static const std::regex kSizeLine(R"(^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([0-9]+)\s*(#.*)?$)");
  std::istringstream in(text);
  std::string out;
  std::map<std::string, int> seen;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, kSizeLine)) {
      auto it = sizes.find(m[1].str());
      if (it != sizes.end()) {
        line = it->first + " = " + std::to_string(it->second);
        ++seen[it->first];
      }
    }
    out += line;
    out += '\n';
  }
  for (const auto& entry : sizes) {
    const std::string& size = entry.first;  // a plain name: clang 14 cannot capture bindings
    INFO("size ", size, " in kernel ", name);
    CHECK(seen[size] == 1);
  }
  return out;
}

/// A tensor's values as floats (they are exact f32 values held in doubles).
std::vector<float> floats(const Tensor& t) {
  std::vector<float> v(t.data.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(t.data[i]);
  return v;
}

/// Loads the resized kernel, runs the interpreter, and returns (program, inputs, results).
struct Run {
  Program prog;
  TensorMap inputs;
  TensorMap results;
};

Run run_resized(const std::string& name, const std::map<std::string, int64_t>& sizes,
                uint64_t seed) {
  const std::string text = resized_kernel(name, sizes);
  auto loaded = perfdojo::ir::load_program(text, name + ".pdj (resized)");
  INFO(text);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error_text());
  Run r{loaded.value(), perfdojo::ir::make_inputs(loaded.value(), seed), {}};
  for (const auto& [size, value] : sizes) {
    const auto* decl = r.prog.find_size(size);
    REQUIRE(decl != nullptr);
    CHECK(decl->value == value);
  }
  auto result = perfdojo::ir::interpret(r.prog, r.inputs);
  REQUIRE_MESSAGE(result.ok(), result.error_text());
  r.results = std::move(result).value();
  return r;
}

/// Input `name` of a run as floats, checking its shape.
std::vector<float> input(const Run& r, const std::string& name, std::vector<int64_t> shape) {
  auto it = r.inputs.find(name);
  REQUIRE_MESSAGE(it != r.inputs.end(), "no input " << name);
  REQUIRE(it->second.shape == shape);
  return floats(it->second);
}

/// Compares every output buffer of the run with `expected` (name -> shape and values); the set
/// of outputs must be exactly the expected names.
void check_outputs(const Run& r, const std::map<std::string, Tensor>& expected) {
  std::set<std::string> outputs;
  for (const auto& b : r.prog.buffers)
    if (b.role == Role::kOutput) outputs.insert(b.name);
  std::set<std::string> want;
  for (const auto& [name, t] : expected) want.insert(name);
  CHECK(outputs == want);
  for (const auto& entry : expected) {
    const std::string& name = entry.first;  // a plain name: clang 14 cannot capture bindings
    const auto& t = entry.second;
    INFO("output ", name);
    auto it = r.results.find(name);
    REQUIRE_MESSAGE(it != r.results.end(), "interpreter returned no buffer " << name);
    CHECK(it->second.shape == t.shape);
    const double err = perfdojo::ir::max_relative_error(it->second, t);
    CHECK(err < kTolerance);
  }
}

Tensor tensor_of(std::vector<int64_t> shape, const std::vector<float>& values) {
  Tensor t;
  t.shape = std::move(shape);
  t.data.assign(values.begin(), values.end());
  return t;
}

float fmax_like_ir(float a, float b) { return a > b ? a : b; }

// ---- direct implementations -------------------------------------------------------------------

/// C[M,N] = A[M,K] B[K,N], accumulating over k in order from 0.
std::vector<float> direct_matmul(const std::vector<float>& A, const std::vector<float>& B,
                                 int64_t M, int64_t N, int64_t K) {
  std::vector<float> C(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const float p = A[i * K + k] * B[k * N + j];
        acc = acc + p;
      }
      C[i * N + j] = acc;
    }
  return C;
}

/// Row-wise softmax of s[R,N]: subtract the row max, exponentiate, multiply by 1/sum.
std::vector<float> direct_softmax(const std::vector<float>& s, int64_t R, int64_t N) {
  std::vector<float> d(s.size());
  std::vector<float> e(static_cast<size_t>(N));
  for (int64_t i = 0; i < R; ++i) {
    float m = -INFINITY;
    for (int64_t j = 0; j < N; ++j) m = fmax_like_ir(m, s[i * N + j]);
    float a = 0.0f;
    for (int64_t j = 0; j < N; ++j) {
      const float x = s[i * N + j] - m;
      e[j] = std::exp(x);
      a = a + e[j];
    }
    const float inv = 1.0f / a;
    for (int64_t j = 0; j < N; ++j) d[i * N + j] = e[j] * inv;
  }
  return d;
}

/// y[n,k,h,w] = sum_{c,r,t} x[n,c,stride*h+r,stride*w+t] * w[k,c,r,t], 3x3 filter, no padding.
std::vector<float> direct_conv3x3(const std::vector<float>& x, const std::vector<float>& w,
                                  int64_t N, int64_t C, int64_t K, int64_t H, int64_t W, int64_t HI,
                                  int64_t WI, int64_t stride) {
  std::vector<float> y(static_cast<size_t>(N * K * H * W));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t q = 0; q < W; ++q) {
          float acc = 0.0f;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t r = 0; r < 3; ++r)
              for (int64_t t = 0; t < 3; ++t) {
                const int64_t ih = stride * h + r;
                const int64_t iw = stride * q + t;
                const float p =
                    x[((n * C + c) * HI + ih) * WI + iw] * w[((k * C + c) * 3 + r) * 3 + t];
                acc = acc + p;
              }
          y[((n * K + k) * H + h) * W + q] = acc;
        }
  return y;
}

}  // namespace

// ---- the reference comparisons ------------------------------------------------------------------

TEST_CASE("the matmul kernel computes C = A B like a direct triple loop") {
  const int64_t M = 24, N = 20, K = 16;
  for (const char* name : {"matmul-1024", "matmul-256", "matmul-skinny", "matmul-tall-k"}) {
    INFO("kernel ", name);
    Run r = run_resized(name, {{"M", M}, {"N", N}, {"K", K}}, 7);
    const auto A = input(r, "A", {M, K});
    const auto B = input(r, "B", {K, N});
    check_outputs(r, {{"C", tensor_of({M, N}, direct_matmul(A, B, M, N, K))}});
  }
}

TEST_CASE("the matmul reference comparison notices a wrong result") {
  // Guards the harness itself: a product with one perturbed element must fail the tolerance.
  const int64_t M = 6, N = 5, K = 4;
  Run r = run_resized("matmul-256", {{"M", M}, {"N", N}, {"K", K}}, 3);
  auto want = direct_matmul(input(r, "A", {M, K}), input(r, "B", {K, N}), M, N, K);
  want[7] += 1e-3f;
  CHECK(perfdojo::ir::max_relative_error(r.results.at("C"), tensor_of({M, N}, want)) > kTolerance);
}

TEST_CASE("the softmax kernel normalises each row like a direct softmax") {
  const int64_t B = 5, N = 33;
  Run r = run_resized("softmax", {{"B", B}, {"N", N}}, 11);
  const auto s = input(r, "s", {B, N});
  const auto d = direct_softmax(s, B, N);
  check_outputs(r, {{"d", tensor_of({B, N}, d)}});
  // Each row of the result sums to one.
  const auto got = floats(r.results.at("d"));
  for (int64_t i = 0; i < B; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < N; ++j) sum += got[i * N + j];
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("the layernorm kernel normalises each row, then scales and shifts it") {
  // The row length N stays 1024: the body divides by the literal 1024.
  const int64_t R = 6, N = 1024;
  Run r = run_resized("layernorm", {{"R", R}}, 5);
  const auto x = input(r, "x", {R, N});
  const auto g = input(r, "g", {N});
  const auto b = input(r, "b", {N});
  std::vector<float> y(x.size());
  std::vector<float> c(static_cast<size_t>(N));
  for (int64_t i = 0; i < R; ++i) {
    float s = 0.0f;
    for (int64_t j = 0; j < N; ++j) s = s + x[i * N + j];
    const float mu = s / 1024.0f;
    float v = 0.0f;
    for (int64_t j = 0; j < N; ++j) {
      c[j] = x[i * N + j] - mu;
      const float sq = c[j] * c[j];
      v = v + sq;
    }
    const float var_eps = v / 1024.0f + 1e-5f;
    const float rs = 1.0f / std::sqrt(var_eps);
    for (int64_t j = 0; j < N; ++j) {
      const float t = c[j] * rs;
      const float u = t * g[j];
      y[i * N + j] = u + b[j];
    }
  }
  check_outputs(r, {{"y", tensor_of({R, N}, y)}});
}

TEST_CASE("the 3x3 stride-1 convolution kernel matches a direct NCHW convolution") {
  const int64_t N = 2, C = 3, K = 4, H = 5, W = 4;
  Run r = run_resized(
      "conv2d-3x3",
      {{"N", N}, {"C", C}, {"K", K}, {"H", H}, {"W", W}, {"HI", H + 2}, {"WI", W + 2}}, 13);
  const auto x = input(r, "x", {N, C, H + 2, W + 2});
  const auto w = input(r, "w", {K, C, 3, 3});
  check_outputs(
      r, {{"y", tensor_of({N, K, H, W}, direct_conv3x3(x, w, N, C, K, H, W, H + 2, W + 2, 1))}});
}

TEST_CASE("the 3x3 stride-2 convolution kernel matches a direct strided NCHW convolution") {
  const int64_t N = 2, C = 3, K = 2, H = 3, W = 4;
  const int64_t HI = 2 * H + 1, WI = 2 * W + 1;
  Run r =
      run_resized("conv2d-3x3-s2",
                  {{"N", N}, {"C", C}, {"K", K}, {"H", H}, {"W", W}, {"HI", HI}, {"WI", WI}}, 17);
  const auto x = input(r, "x", {N, C, HI, WI});
  const auto w = input(r, "w", {K, C, 3, 3});
  check_outputs(r,
                {{"y", tensor_of({N, K, H, W}, direct_conv3x3(x, w, N, C, K, H, W, HI, WI, 2))}});
}

TEST_CASE("the attention kernel computes softmax(Q K^T / sqrt(D)) V like a direct implementation") {
  // The head size D stays 64: the body scales by the literal 0.125 = 1/sqrt(64).
  const int64_t L = 12, D = 64;
  Run r = run_resized("attention", {{"L", L}}, 19);
  const auto Q = input(r, "Q", {L, D});
  const auto Kt = input(r, "K", {L, D});
  const auto V = input(r, "V", {L, D});
  std::vector<float> s(static_cast<size_t>(L * L));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < D; ++k) {
        const float p = Q[i * D + k] * Kt[j * D + k];
        acc = acc + p;
      }
      s[i * L + j] = acc * 0.125f;
    }
  const auto P = direct_softmax(s, L, L);
  const auto O = direct_matmul(P, V, L, D, L);
  check_outputs(r, {{"O", tensor_of({L, D}, O)}});
}

// ---- bounded (non-rectangular) kernels: the formulas, written out
// --------------------------------

TEST_CASE("trmm and syrk compute their triangles like direct loops") {
  const int64_t N = 9, K = 5;
  {
    Run r = run_resized("trmm", {{"N", N}}, 23);
    const auto A = input(r, "A", {N, N});
    const auto B = input(r, "B", {N, N});
    std::vector<float> C(static_cast<size_t>(N * N), 0.0f);
    for (int64_t i = 0; i < N; ++i)  // C[i,j] = sum_{k <= i} A[i,k] B[k,j]
      for (int64_t k = 0; k <= i; ++k)
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = C[i * N + j] + A[i * N + k] * B[k * N + j];
    check_outputs(r, {{"C", tensor_of({N, N}, C)}});
  }
  {
    Run r = run_resized("syrk-lower", {{"N", N}, {"K", K}}, 29);
    const auto A = input(r, "A", {N, K});
    std::vector<float> C(static_cast<size_t>(N * N), 0.0f);
    for (int64_t i = 0; i < N; ++i)  // C[i,j] = sum_k A[i,k] A[j,k], j <= i; 0 above
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t k = 0; k < K; ++k) C[i * N + j] = C[i * N + j] + A[i * K + k] * A[j * K + k];
    check_outputs(r, {{"C", tensor_of({N, N}, C)}});
  }
}

TEST_CASE("the bounded solvers factor and solve like the textbook algorithms") {
  const int64_t N = 10;
  {
    Run r = run_resized("trsv-lower-bounded", {{"N", N}}, 31);
    const auto L = input(r, "L", {N, N});
    const auto d = input(r, "d", {N});
    const auto b = input(r, "b", {N});
    std::vector<float> x(static_cast<size_t>(N), 0.0f);
    for (int64_t i = 0; i < N; ++i) {  // x[i] = (b[i] - sum_{j<i} L[i,j] x[j]) / d[i]
      float s = 0.0f;
      for (int64_t j = 0; j < i; ++j) s = s + L[i * N + j] * x[j];
      x[i] = (b[i] - s) / d[i];
    }
    check_outputs(r, {{"x", tensor_of({N}, x)}});
  }
  {
    Run r = run_resized("cholesky-bounded", {{"N", N}}, 37);
    const auto A = input(r, "A", {N, N});
    std::vector<float> C(static_cast<size_t>(N * N), 0.0f);
    for (int64_t i = 0; i < N; ++i)  // S = A + A^T + 2 N I, its lower triangle
      for (int64_t j = 0; j <= i; ++j)
        C[i * N + j] = A[i * N + j] + A[j * N + i] + (i == j ? 2.0f * static_cast<float>(N) : 0.0f);
    for (int64_t k = 0; k < N; ++k) {  // right-looking Cholesky
      C[k * N + k] = std::sqrt(C[k * N + k]);
      for (int64_t i = k + 1; i < N; ++i) C[i * N + k] = C[i * N + k] / C[k * N + k];
      for (int64_t i = k + 1; i < N; ++i)
        for (int64_t j = k + 1; j <= i; ++j)
          C[i * N + j] = C[i * N + j] - C[i * N + k] * C[j * N + k];
    }
    std::vector<float> L(static_cast<size_t>(N * N), 0.0f);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j <= i; ++j) L[i * N + j] = C[i * N + j];
    check_outputs(r, {{"L", tensor_of({N, N}, L)}});
  }
  {
    Run r = run_resized("lu-bounded", {{"N", N}}, 41);
    const auto A = input(r, "A", {N, N});
    std::vector<float> LU(A);
    for (int64_t i = 0; i < N; ++i) LU[i * N + i] = A[i * N + i] + static_cast<float>(N);
    for (int64_t k = 0; k < N; ++k) {  // Doolittle without pivoting, in place
      for (int64_t i = k + 1; i < N; ++i) LU[i * N + k] = LU[i * N + k] / LU[k * N + k];
      for (int64_t i = k + 1; i < N; ++i)
        for (int64_t j = k + 1; j < N; ++j)
          LU[i * N + j] = LU[i * N + j] - LU[i * N + k] * LU[k * N + j];
    }
    check_outputs(r, {{"LU", tensor_of({N, N}, LU)}});
  }
}

TEST_CASE("causal and sliding-window attention with bounded scopes attend where the mask allows") {
  // D stays 64: the bodies scale by the literal 0.125 = 1/sqrt(64).
  const int64_t L = 11, D = 64, W = 4;
  for (const bool window : {false, true}) {
    const std::string form = window ? "sliding window" : "causal";
    INFO(form);
    Run r = window ? run_resized("sliding-window-attention-bounded", {{"L", L}, {"W", W}}, 43)
                   : run_resized("causal-attention-bounded", {{"L", L}}, 43);
    const auto Q = input(r, "Q", {L, D});
    const auto Kt = input(r, "K", {L, D});
    const auto V = input(r, "V", {L, D});
    std::vector<float> O(static_cast<size_t>(L * D), 0.0f);
    for (int64_t i = 0; i < L; ++i) {
      const int64_t first = window ? std::max<int64_t>(0, i - W + 1) : 0;
      std::vector<float> s;
      for (int64_t j = first; j <= i; ++j) {
        float acc = 0.0f;
        for (int64_t k = 0; k < D; ++k) acc = acc + Q[i * D + k] * Kt[j * D + k];
        s.push_back(acc * 0.125f);
      }
      const auto p = direct_softmax(s, 1, static_cast<int64_t>(s.size()));
      for (int64_t d = 0; d < D; ++d)
        for (int64_t j = first; j <= i; ++j)
          O[i * D + d] = O[i * D + d] + p[static_cast<size_t>(j - first)] * V[j * D + d];
    }
    check_outputs(r, {{"O", tensor_of({L, D}, O)}});
  }
}

// ---- the suite as a whole -----------------------------------------------------------------------

TEST_CASE("every suite kernel parses, checks cleanly at full size and describes itself") {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(PERFDOJO_KERNEL_DIR))
    if (entry.is_regular_file() && entry.path().extension() == ".pdj")
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  CHECK(files.size() >= 18);
  std::set<std::string> names;
  for (const auto& path : files) {
    INFO("kernel ", path.filename().string());
    names.insert(path.stem().string());
    const std::string text = read_text(path);
    CHECK_MESSAGE(text.rfind("# ", 0) == 0, "the file starts with a '# ' description line");
    auto loaded = perfdojo::ir::load_file(path.string());
    REQUIRE_MESSAGE(loaded.ok(), loaded.error_text());
    const Program& p = loaded.value();
    const std::string& doc = p.doc;
    CHECK(doc.find_first_not_of(" \t\r\n") != std::string::npos);
    CHECK(!p.body.empty());
    bool has_output = false;
    // f32, but for the recurrence that needs f64 and the exact integer dynamic program.
    const auto want = path.stem() == "levinson-durbin" ? perfdojo::ir::DType::kF64
                      : path.stem() == "lcs"           ? perfdojo::ir::DType::kI32
                                                       : perfdojo::ir::DType::kF32;
    for (const auto& b : p.buffers) {
      // An index buffer (docs/ir.md, "Indirect indices") is i32 in any kernel.
      CHECK_MESSAGE((b.dtype == want || perfdojo::ir::used_as_index(p, b.name)),
                    "buffer " << b.name << " has the kernel's type");
      has_output = has_output || b.role == Role::kOutput;
    }
    CHECK(has_output);
  }
  for (const char* required : {"matmul-1024",
                               "matmul-256",
                               "matmul-skinny",
                               "matmul-tall-k",
                               "bmm",
                               "gemv",
                               "softmax",
                               "layernorm",
                               "rmsnorm",
                               "batchnorm-inference",
                               "conv2d-3x3",
                               "conv2d-3x3-s2",
                               "depthwise-conv",
                               "maxpool",
                               "avgpool",
                               "transpose",
                               "bias-gelu",
                               "bias-relu",
                               "rowsum",
                               "global-sum",
                               "attention",
                               "mlp"}) {
    INFO("required kernel ", required);
    CHECK(names.count(required) == 1);
  }
}

TEST_CASE("the suite keeps the brief's matmul and softmax lines verbatim") {
  const std::string matmul = read_text(kernel_path("matmul-1024"));
  CHECK(matmul.find("\nM N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n") != std::string::npos);
  const std::string softmax = read_text(kernel_path("softmax"));
  CHECK(softmax.find("\nB N m[{0}] = max(s[{0},{1}])\n"
                     "| N x[{0},{1}] = s[{0},{1}] - m[{0}]\n"
                     "| | e[{0},{1}] = exp(x[{0},{1}])\n"
                     "| | a[{0}] += e[{0},{1}]\n"
                     "B i[{0}] = 1 / a[{0}]\n"
                     "| N d[{0},{1}] = e[{0},{1}] * i[{0}]\n") != std::string::npos);
}

TEST_CASE("every suite kernel runs at a small size and defines every output element") {
  // Small sizes per kernel; sizes the body relies on through literals (layernorm's and
  // rmsnorm's row length, attention's head size) keep their full value.
  const std::map<std::string, std::map<std::string, int64_t>> small = {
      {"matmul-1024", {{"M", 5}, {"N", 4}, {"K", 3}}},
      {"matmul-256", {{"M", 5}, {"N", 4}, {"K", 3}}},
      {"matmul-skinny", {{"M", 5}, {"N", 4}, {"K", 3}}},
      {"matmul-tall-k", {{"M", 5}, {"N", 4}, {"K", 3}}},
      {"bmm", {{"BATCH", 2}, {"M", 5}, {"N", 4}, {"K", 3}}},
      {"gemv", {{"M", 7}, {"K", 5}}},
      {"softmax", {{"B", 3}, {"N", 9}}},
      {"layernorm", {{"R", 2}}},
      {"rmsnorm", {{"R", 2}}},
      {"batchnorm-inference", {{"N", 2}, {"C", 3}, {"H", 4}, {"W", 5}}},
      {"conv2d-3x3", {{"N", 1}, {"C", 2}, {"K", 3}, {"H", 4}, {"W", 5}, {"HI", 6}, {"WI", 7}}},
      {"conv2d-3x3-s2", {{"N", 1}, {"C", 2}, {"K", 3}, {"H", 2}, {"W", 3}, {"HI", 5}, {"WI", 7}}},
      {"depthwise-conv", {{"N", 1}, {"C", 3}, {"H", 4}, {"W", 5}, {"HI", 6}, {"WI", 7}}},
      {"maxpool", {{"N", 1}, {"C", 3}, {"H", 2}, {"W", 3}, {"HI", 4}, {"WI", 6}}},
      {"avgpool", {{"N", 2}, {"C", 3}, {"H", 2}, {"W", 3}, {"HI", 4}, {"WI", 6}}},
      {"transpose", {{"M", 5}, {"N", 7}}},
      {"bias-gelu", {{"M", 5}, {"N", 7}}},
      {"bias-relu", {{"M", 5}, {"N", 7}}},
      {"rowsum", {{"M", 5}, {"N", 7}}},
      {"global-sum", {{"N", 37}}},
      {"attention", {{"L", 6}}},
      {"mlp", {{"M", 5}, {"K", 3}, {"N", 4}}},
  };
  for (const auto& entry : small) {
    const std::string& name = entry.first;  // a plain name: clang 14 cannot capture bindings
    const auto& sizes = entry.second;
    INFO("kernel ", name);
    if (!fs::exists(kernel_path(name))) continue;  // the suite test reports missing kernels
    Run r = run_resized(name, sizes, 23);
    for (const auto& b : r.prog.buffers) {
      if (b.role != Role::kOutput) continue;
      INFO("output ", b.name);
      const Tensor& t = r.results.at(b.name);
      CHECK(static_cast<int64_t>(t.data.size()) == b.elements());
      CHECK(std::all_of(t.data.begin(), t.data.end(), [](double v) { return std::isfinite(v); }));
    }
  }
}

TEST_CASE("the elementwise and pooling kernels match their direct definitions") {
  SUBCASE("bias-relu") {
    const int64_t M = 5, N = 7;
    Run r = run_resized("bias-relu", {{"M", M}, {"N", N}}, 29);
    const auto x = input(r, "x", {M, N});
    const auto b = input(r, "b", {N});
    std::vector<float> y(x.size());
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const float t = x[i * N + j] + b[j];
        y[i * N + j] = t > 0.0f ? t : 0.0f;
      }
    check_outputs(r, {{"y", tensor_of({M, N}, y)}});
  }
  SUBCASE("bias-gelu") {
    const int64_t M = 5, N = 7;
    Run r = run_resized("bias-gelu", {{"M", M}, {"N", N}}, 31);
    const auto x = input(r, "x", {M, N});
    const auto b = input(r, "b", {N});
    std::vector<float> y(x.size());
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const float t = x[i * N + j] + b[j];
        const float t3 = 0.044715f * t * t * t;
        const float inner = 0.7978845608f * (t + t3);
        y[i * N + j] = 0.5f * t * (1.0f + std::tanh(inner));
      }
    check_outputs(r, {{"y", tensor_of({M, N}, y)}});
  }
  SUBCASE("maxpool") {
    const int64_t N = 2, C = 3, H = 2, W = 3;
    Run r = run_resized("maxpool",
                        {{"N", N}, {"C", C}, {"H", H}, {"W", W}, {"HI", 2 * H}, {"WI", 2 * W}}, 37);
    const auto x = input(r, "x", {N, C, 2 * H, 2 * W});
    std::vector<float> y(static_cast<size_t>(N * C * H * W));
    for (int64_t nc = 0; nc < N * C; ++nc)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          float m = -INFINITY;
          for (int64_t p = 0; p < 2; ++p)
            for (int64_t q = 0; q < 2; ++q)
              m = fmax_like_ir(m, x[(nc * 2 * H + 2 * h + p) * 2 * W + 2 * w + q]);
          y[(nc * H + h) * W + w] = m;
        }
    check_outputs(r, {{"y", tensor_of({N, C, H, W}, y)}});
  }
  SUBCASE("transpose") {
    const int64_t M = 5, N = 7;
    Run r = run_resized("transpose", {{"M", M}, {"N", N}}, 41);
    const auto x = input(r, "x", {M, N});
    std::vector<float> y(x.size());
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) y[j * M + i] = x[i * N + j];
    check_outputs(r, {{"y", tensor_of({N, M}, y)}});
  }
}
