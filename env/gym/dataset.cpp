#include "gym/dataset.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "ir/load.h"
#include "ir/parse.h"

namespace perfdojo::env {
namespace {

namespace fs = std::filesystem;
constexpr const char* kSuite = "perfdojo://suite/";
constexpr const char* kGen = "perfdojo://gen/";

ir::Result<ir::Program> fail(const std::string& uri, const std::string& msg) {
  return std::vector<ir::Diagnostic>{{{uri, 0, 0}, msg}};
}

// Random power-of-two-rich sizes: tiling and vectorisation need divisors.
int64_t pick(std::mt19937_64& rng, std::initializer_list<int64_t> choices) {
  std::vector<int64_t> v(choices);
  return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}

// A suite kernel's text with its size lines replaced.
ir::Result<ir::Program> from_template(const std::string& uri, const std::string& kernel,
                                      const std::map<std::string, int64_t>& sizes,
                                      const std::string& doc) {
  std::ifstream in(kernel_dir() + "/" + kernel + ".pdj");
  if (!in)
    return fail(uri, "generator template '" + kernel + "' is missing from the kernel folder");
  std::string line, out = "# " + doc + "\n";
  bool first_comment = true;
  while (std::getline(in, line)) {
    if (first_comment && !line.empty() && line[0] == '#') continue;  // replaced by `doc`
    first_comment = false;
    auto eq = line.find(" = ");
    if (eq != std::string::npos && line.find('[') == std::string::npos &&
        line.find(':') == std::string::npos) {
      auto it = sizes.find(line.substr(0, eq));
      if (it != sizes.end()) line = it->first + " = " + std::to_string(it->second);
    }
    out += line + "\n";
  }
  return ir::load_program(out, uri);
}

ir::Result<ir::Program> generate(const std::string& uri, const std::string& family, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 0x5045);
  auto s = [](int64_t v) { return std::to_string(v); };
  if (family == "matmul") {
    int64_t m = pick(rng, {16, 32, 64, 128, 256, 512}), n = pick(rng, {16, 32, 64, 128, 256, 512}),
            k = pick(rng, {16, 32, 64, 128, 256, 512});
    return from_template(uri, "matmul-256", {{"M", m}, {"N", n}, {"K", k}},
                         "generated matmul " + s(m) + "x" + s(n) + "x" + s(k));
  }
  if (family == "conv2d") {
    int64_t c = pick(rng, {3, 8, 16, 32, 64}), k = pick(rng, {8, 16, 32, 64}),
            h = pick(rng, {7, 14, 16, 28, 32}), w = pick(rng, {7, 14, 16, 28, 32});
    return from_template(
        uri, "conv2d-3x3",
        {{"N", 1}, {"C", c}, {"K", k}, {"H", h}, {"W", w}, {"HI", h + 2}, {"WI", w + 2}},
        "generated conv2d 3x3 C=" + s(c) + " K=" + s(k) + " " + s(h) + "x" + s(w));
  }
  if (family == "softmax") {
    int64_t b = pick(rng, {16, 32, 64, 128, 256}), n = pick(rng, {64, 128, 256, 512, 1024});
    return from_template(uri, "softmax", {{"B", b}, {"N", n}},
                         "generated softmax " + s(b) + "x" + s(n));
  }
  if (family == "layernorm") {
    // The template divides by the literal 1024 (N), so only the row count varies.
    int64_t r = pick(rng, {16, 32, 64, 128, 256, 512});
    return from_template(uri, "layernorm", {{"R", r}}, "generated layernorm " + s(r) + "x1024");
  }
  if (family == "elementwise") {
    int64_t m = pick(rng, {16, 64, 256, 1024}), n = pick(rng, {64, 256, 1024, 4096});
    bool gelu = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    return from_template(
        uri, gelu ? "bias-gelu" : "bias-relu", {{"M", m}, {"N", n}},
        std::string("generated bias + ") + (gelu ? "GELU " : "ReLU ") + s(m) + "x" + s(n));
  }
  if (family == "attention") {
    int64_t l = pick(rng, {16, 32, 64, 128, 256});
    return from_template(uri, "attention", {{"L", l}}, "generated attention L=" + s(l) + " D=64");
  }
  return fail(uri, "unknown generator family '" + family + "'");
}

}  // namespace

std::string kernel_dir() {
  if (const char* e = std::getenv("PERFDOJO_KERNELS")) return e;
  return PERFDOJO_KERNEL_DIR;
}

std::vector<std::string> suite_uris() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kernel_dir(), ec))
    if (e.path().extension() == ".pdj") out.push_back(kSuite + e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> test_split() {
  return {"perfdojo://suite/avgpool", "perfdojo://suite/bmm", "perfdojo://suite/conv2d-3x3-s2",
          "perfdojo://suite/matmul-skinny", "perfdojo://suite/rmsnorm"};
}

std::vector<std::string> train_split() {
  auto test = test_split();
  std::vector<std::string> out;
  for (auto& u : suite_uris())
    if (std::find(test.begin(), test.end(), u) == test.end()) out.push_back(u);
  return out;
}

const std::map<std::string, std::string>& kernel_families() {
  // Kernels that an optimiser treats alike: a split that holds a family out tests transfer to
  // a kind of kernel the agent never saw, not only to new sizes.
  static const std::map<std::string, std::string> kFamilies = {
      {"matmul-256", "gemm"},
      {"matmul-1024", "gemm"},
      {"matmul-skinny", "gemm"},
      {"matmul-tall-k", "gemm"},
      {"bmm", "gemm"},
      {"gemv", "gemm"},
      {"mlp", "ffn"},
      {"swiglu-mlp", "ffn"},
      {"geglu-mlp", "ffn"},
      {"conv2d-3x3", "conv"},
      {"conv2d-3x3-s2", "conv"},
      {"depthwise-conv", "conv"},
      {"pointwise-conv", "conv"},
      {"avgpool", "pooling"},
      {"maxpool", "pooling"},
      {"layernorm", "norm"},
      {"rmsnorm", "norm"},
      {"add-rmsnorm", "norm"},
      {"group-norm", "norm"},
      {"batchnorm-inference", "norm"},
      {"softmax", "softmax"},
      {"softmax-temperature", "softmax"},
      {"attention", "attention"},
      {"attention-bias", "attention"},
      {"gqa-attention", "attention"},
      {"mqa-decode", "attention"},
      {"causal-attention", "attention"},
      {"alibi-attention", "attention"},
      {"sliding-window-attention", "attention"},
      {"causal-attention-bounded", "attention"},
      {"alibi-attention-bounded", "attention"},
      {"sliding-window-attention-bounded", "attention"},
      {"rope-inline", "elementwise"},
      {"sinusoidal-position", "elementwise"},
      {"argmax", "reduction"},
      {"bias-gelu", "elementwise"},
      {"bias-relu", "elementwise"},
      {"rope", "elementwise"},
      {"transpose", "elementwise"},
      {"rowsum", "reduction"},
      {"global-sum", "reduction"},
      {"trsv-lower", "linalg"},
      {"lu", "linalg"},
      {"cholesky", "linalg"},
      {"trsv-lower-bounded", "linalg"},
      {"lu-bounded", "linalg"},
      {"cholesky-bounded", "linalg"},
      {"trmm", "linalg"},
      {"syrk-lower", "linalg"},
      {"levinson-durbin", "linalg"},
      {"lcs", "dp"},
      {"embedding", "gather"},
      {"embedding-bag-sum", "gather"},
      {"embedding-bag-mean", "gather"},
      {"csr-spmv", "gather"},
      {"csr-spmm", "gather"},
      {"bsr-spmm", "gather"},
      {"sparse24-gemm", "gather"},
  };
  return kFamilies;
}

std::string kernel_family(const std::string& uri) {
  const std::string name = uri.rfind(kSuite, 0) == 0 ? uri.substr(std::string(kSuite).size()) : uri;
  auto it = kernel_families().find(name);
  return it == kernel_families().end() ? "" : it->second;
}

std::vector<std::string> family_kernels(const std::vector<std::string>& families, bool inside) {
  std::vector<std::string> out;
  for (const auto& u : suite_uris()) {
    const bool in = std::find(families.begin(), families.end(), kernel_family(u)) != families.end();
    if (in == inside) out.push_back(u);
  }
  return out;
}

std::vector<std::string> generator_families() {
  return {"matmul", "conv2d", "softmax", "layernorm", "elementwise", "attention"};
}

ir::Result<ir::Program> load_benchmark(const std::string& uri) {
  if (uri.rfind(kSuite, 0) == 0) {
    std::string name = uri.substr(std::string(kSuite).size());
    if (name.empty() || name.find('/') != std::string::npos || name.find("..") != std::string::npos)
      return fail(uri, "expected perfdojo://suite/NAME");
    std::string path = kernel_dir() + "/" + name + ".pdj";
    if (!fs::exists(path))
      return fail(uri, "no kernel '" + name + "' in the suite (see `perfdojo kernels`)");
    return ir::load_file(path);
  }
  if (uri.rfind(kGen, 0) == 0) {
    std::string rest = uri.substr(std::string(kGen).size());
    std::string family = rest.substr(0, rest.find('?'));
    uint64_t seed = 0;
    if (auto q = rest.find("?seed="); q != std::string::npos) {
      std::string v = rest.substr(q + 6);
      auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), seed);
      if (v.empty() || ec != std::errc() || ptr != v.data() + v.size())
        return fail(uri, "seed must be an integer in [0, 2^64)");
    } else if (rest.find('?') != std::string::npos) {
      return fail(uri, "expected perfdojo://gen/FAMILY?seed=S");
    }
    return generate(uri, family, seed);
  }
  std::string path = uri.rfind("file://", 0) == 0 ? uri.substr(7) : uri;
  if (path.find("://") != std::string::npos)
    return fail(uri,
                "unknown benchmark URI scheme (expected perfdojo://suite/, perfdojo://gen/ or a "
                ".pdj path)");
  return ir::load_file(path);
}

}  // namespace perfdojo::env
