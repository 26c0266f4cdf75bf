// Benchmarks by URI: the shipped suite, generators of unbounded training data, and user files.
//
//   perfdojo://suite/NAME            kernels/NAME.pdj
//   perfdojo://gen/FAMILY?seed=S     a random instance of FAMILY (matmul, conv2d, softmax,
//                                    layernorm, elementwise, attention); same seed, same program
//   PATH.pdj (or file://PATH)        a user's kernel
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/ir.h"

namespace perfdojo::env {

/// Folder holding the shipped suite (PERFDOJO_KERNELS overrides the built-in path).
std::string kernel_dir();
/// URIs of every shipped kernel, sorted.
std::vector<std::string> suite_uris();
/// The fixed split of the suite: held-out kernels for evaluation.
std::vector<std::string> test_split();
/// The rest of the suite: kernels for training.
std::vector<std::string> train_split();
/// Suite kernel name -> its family: gemm, ffn, conv, pooling, norm, softmax, attention,
/// elementwise, reduction. Every shipped kernel has one (tested).
const std::map<std::string, std::string>& kernel_families();
/// The family of a suite URI or name; "" for anything else.
std::string kernel_family(const std::string& uri);
/// Suite URIs whose family is (inside) or is not (!inside) among `families`: a split that
/// holds whole families out.
std::vector<std::string> family_kernels(const std::vector<std::string>& families, bool inside);
/// Generator families.
std::vector<std::string> generator_families();
/// Loads (and checks) the program a URI names. Errors name the URI.
ir::Result<ir::Program> load_benchmark(const std::string& uri);

}  // namespace perfdojo::env
