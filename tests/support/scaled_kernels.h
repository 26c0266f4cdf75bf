// The shipped kernel suite at sizes small enough for the reference interpreter, with the same
// bodies: only the `NAME = VALUE` size lines are replaced.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ir/load.h"
#include "ir/parse.h"

namespace perfdojo::testing {

/// Small sizes per kernel; sizes not listed keep their value.
inline const std::map<std::string, std::map<std::string, int>>& small_sizes() {
  static const std::map<std::string, std::map<std::string, int>> kSizes = {
      {"add-rmsnorm", {{"T", 4}, {"D", 16}}},
      {"alibi-attention", {{"NH", 2}, {"L", 8}, {"D", 4}}},
      {"alibi-attention-bounded", {{"NH", 2}, {"L", 8}, {"D", 4}}},
      {"argmax", {{"R", 4}, {"N", 16}}},
      {"attention", {{"L", 8}, {"D", 4}}},
      {"attention-bias", {{"L", 8}, {"D", 4}}},
      {"avgpool", {{"N", 1}, {"C", 2}, {"H", 4}, {"W", 4}, {"HI", 8}, {"WI", 8}}},
      {"batchnorm-inference", {{"N", 2}, {"C", 3}, {"H", 4}, {"W", 4}}},
      {"bias-gelu", {{"M", 4}, {"N", 16}}},
      {"bias-relu", {{"M", 4}, {"N", 16}}},
      {"bmm", {{"BATCH", 2}, {"M", 4}, {"N", 8}, {"K", 4}}},
      {"causal-attention", {{"L", 16}, {"D", 4}}},
      {"causal-attention-bounded", {{"L", 16}, {"D", 4}}},
      {"cholesky", {{"N", 8}}},
      {"cholesky-bounded", {{"N", 8}}},
      {"conv2d-3x3", {{"N", 1}, {"C", 2}, {"K", 4}, {"H", 4}, {"W", 4}, {"HI", 6}, {"WI", 6}}},
      {"conv2d-3x3-s2", {{"N", 1}, {"C", 2}, {"K", 4}, {"H", 4}, {"W", 4}, {"HI", 9}, {"WI", 9}}},
      {"depthwise-conv", {{"N", 1}, {"C", 4}, {"H", 4}, {"W", 4}, {"HI", 6}, {"WI", 6}}},
      {"geglu-mlp", {{"T", 4}, {"D", 8}, {"H", 16}}},
      {"bsr-spmm", {{"MB", 2}, {"NB", 3}, {"N", 8}, {"NNZB", 4}, {"MB1", 3}, {"NNZB1", 5}}},
      {"sparse24-gemm", {{"M", 4}, {"G", 3}, {"N", 8}}},
      {"csr-spmm", {{"M", 5}, {"N", 6}, {"K", 16}, {"NNZ", 12}, {"M1", 6}, {"NNZ1", 13}}},
      {"csr-spmv", {{"M", 5}, {"N", 6}, {"NNZ", 12}, {"M1", 6}, {"NNZ1", 13}}},
      {"embedding", {{"N", 6}, {"D", 16}, {"V", 10}}},
      {"embedding-bag-mean", {{"B", 4}, {"L", 3}, {"D", 16}, {"V", 10}}},
      {"embedding-bag-sum", {{"B", 4}, {"L", 3}, {"D", 16}, {"V", 10}}},
      {"gemv", {{"M", 8}, {"K", 16}}},
      {"global-sum", {{"N", 64}}},
      {"gqa-attention", {{"KVH", 2}, {"G", 2}, {"L", 4}, {"D", 4}}},
      {"group-norm", {{"G", 2}, {"CG", 2}, {"HW", 8}}},
      {"layernorm", {{"R", 4}, {"N", 16}}},
      {"lcs", {{"N", 8}, {"M", 6}, {"N1", 9}, {"M1", 7}}},
      {"levinson-durbin", {{"P", 6}, {"Q", 7}, {"R", 14}}},
      {"lu", {{"N", 8}}},
      {"lu-bounded", {{"N", 8}}},
      {"matmul-1024", {{"M", 8}, {"N", 16}, {"K", 8}}},
      {"matmul-256", {{"M", 8}, {"N", 16}, {"K", 8}}},
      {"matmul-skinny", {{"M", 16}, {"N", 8}, {"K", 4}}},
      {"matmul-tall-k", {{"M", 4}, {"N", 4}, {"K", 32}}},
      {"maxpool", {{"N", 1}, {"C", 2}, {"H", 4}, {"W", 4}, {"HI", 8}, {"WI", 8}}},
      {"mlp", {{"M", 4}, {"K", 8}, {"N", 16}}},
      {"mqa-decode", {{"NH", 2}, {"L", 16}, {"D", 4}}},
      {"pointwise-conv", {{"CI", 4}, {"CO", 4}, {"P", 16}}},
      {"rmsnorm", {{"R", 4}, {"N", 16}}},
      {"rope", {{"T", 4}, {"NH", 2}, {"D", 8}, {"P", 4}}},
      {"rope-inline", {{"T", 4}, {"NH", 2}, {"D", 8}, {"P", 4}}},
      {"rowsum", {{"M", 8}, {"N", 16}}},
      {"sinusoidal-position", {{"T", 8}, {"D", 16}, {"P", 8}}},
      {"sliding-window-attention", {{"L", 16}, {"D", 4}, {"W", 4}}},
      {"sliding-window-attention-bounded", {{"L", 16}, {"D", 4}, {"W", 4}}},
      {"softmax", {{"B", 4}, {"N", 16}}},
      {"softmax-temperature", {{"R", 4}, {"N", 16}}},
      {"swiglu-mlp", {{"T", 4}, {"D", 8}, {"H", 16}}},
      {"transpose", {{"M", 8}, {"N", 16}}},
      {"syrk-lower", {{"N", 8}, {"K", 4}}},
      {"trmm", {{"N", 8}}},
      {"trsv-lower", {{"N", 16}}},
      {"trsv-lower-bounded", {{"N", 16}}},
  };
  return kSizes;
}

/// Names of the suite's kernels (file stems), sorted.
inline std::vector<std::string> suite_kernel_names() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(PERFDOJO_KERNEL_DIR))
    if (e.path().extension() == ".pdj") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// Every `stride`-th suite kernel from `first`: tests that repeat one check per target share
/// the suite between them (each kernel checked on one of them, all of them on the native one);
/// PERFDOJO_SUITE_ALL=1 gives every kernel to each.
inline std::vector<std::string> suite_kernel_share(size_t first, size_t stride) {
  const auto all = suite_kernel_names();
  if (const char* e = std::getenv("PERFDOJO_SUITE_ALL"); e && std::string(e) == "1") return all;
  std::vector<std::string> out;
  for (size_t k = first; k < all.size(); k += stride) out.push_back(all[k]);
  return out;
}

/// The suite for the checks that walk random trajectories on every kernel: all of it, except in
/// the sanitized run (scripts/test sets PERFDOJO_SANITIZED_RUN=1), which takes every other
/// kernel: ASan and UBSan look for memory and undefined-behaviour errors along the code paths,
/// which half the suite exercises, while the normal build walks every kernel.
/// PERFDOJO_SUITE_ALL=1 gives every kernel there too.
inline std::vector<std::string> suite_kernels_to_walk() {
  const char* e = std::getenv("PERFDOJO_SANITIZED_RUN");
  return e && std::string(e) == "1" ? suite_kernel_share(0, 2) : suite_kernel_names();
}

/// The kernel's text with its size lines replaced by the small sizes.
inline std::string scaled_kernel_text(const std::string& name) {
  std::ifstream in(std::string(PERFDOJO_KERNEL_DIR) + "/" + name + ".pdj");
  std::stringstream ss;
  ss << in.rdbuf();
  auto it = small_sizes().find(name);
  std::string out, line;
  std::istringstream lines(ss.str());
  while (std::getline(lines, line)) {
    if (it != small_sizes().end()) {
      auto eq = line.find(" = ");
      if (eq != std::string::npos && line.find('[') == std::string::npos && line[0] != '#' &&
          line.rfind("temp", 0) != 0 && line.rfind("output", 0) != 0) {
        auto s = it->second.find(line.substr(0, eq));
        if (s != it->second.end()) line = s->first + " = " + std::to_string(s->second);
      }
    }
    out += line + "\n";
  }
  return out;
}

/// The scaled kernel, loaded and checked.
inline ir::Result<ir::Program> load_scaled_kernel(const std::string& name) {
  return ir::load_program(scaled_kernel_text(name), name + ".pdj");
}

}  // namespace perfdojo::testing
