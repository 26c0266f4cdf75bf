// The reference interpreter: the semantic oracle. Simple and obviously right, not fast.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/ir.h"

namespace perfdojo::ir {

/// A buffer's contents, row-major (C order). Values are held as double but always rounded to
/// the declared element type on every store, so f32 buffers hold exact f32 values.
struct Tensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<double> data;
};

/// Buffer name -> contents.
using TensorMap = std::map<std::string, Tensor>;

/// Deterministic input data: the values depend only on (seed, buffer name, shape, dtype, range),
/// so two programs that declare the same input receive the same values.
Tensor make_input(const BufferDecl& decl, uint64_t seed);
/// make_input for every input buffer of `p`.
TensorMap make_inputs(const Program& p, uint64_t seed);

/// How interpret runs.
struct InterpretOptions {
  /// Refuse the run at the first read of an element of an output or temporary without an
  /// initial value that nothing has written yet (a value generated code would read from
  /// uninitialised memory, even where it is dead). The error names the access's file:line:col,
  /// the buffer and the element.
  bool forbid_uninitialised_reads = false;
  /// When given, receives a tensor per buffer (f64, the buffer's shape): a first-order bound on
  /// the rounding error in each element's value (running error analysis; inputs are exact).
  /// Verification compares a result that may round differently against it (docs/ir.md,
  /// "Verification").
  TensorMap* error_bounds = nullptr;
  /// Refuse the run at the first element that two different iterations of one execution of a
  /// `:par` scope both touch, at least one of them writing it: a data race in the threaded code
  /// (parallelize's promise is that no dependence is carried, reductions included). The error
  /// names the access's file:line:col, the buffer, the element and both iterations. A `:par`
  /// nested in another is checked as part of the outer one.
  bool detect_races = false;
  /// The order in which a `:par` scope's iterations run (each iteration's own body in order): a
  /// race-free program computes the same bits in every order.
  enum class ParOrder { kForward, kReverse, kShuffle };
  ParOrder par_order = ParOrder::kForward;
  uint64_t shuffle_seed = 0;  ///< for kShuffle
  /// Run each `:vec` scope whose body is statements as vector code does: statement by
  /// statement across all lanes, every lane's value computed before any lane stores. Where
  /// vectorize's promise holds (no lane reads what another lane of the same statement or a
  /// later one writes) this gives the same bits as the sequential run; reductions into an
  /// element all lanes share run lane by lane (the code's partial sums are checked by bound).
  bool simd_vectors = false;
};

/// "[i,j,k]": the element at row-major `offset` of a buffer of `shape`, for messages.
std::string element_text(const std::vector<int64_t>& shape, int64_t offset);

/// Runs a checked program on `inputs` (every input buffer must be present with its shape).
/// Returns every buffer (inputs, outputs and temporaries) after execution.
Result<TensorMap> interpret(const Program& p, const TensorMap& inputs,
                            const InterpretOptions& options = {});

/// Every value of the i32 inputs that indirect indices read lies in the range the input
/// declares (`in [LO, HI)`): else one error naming the buffer, the element and the value. Run
/// before a kernel touches data it did not generate (interpret runs it first; the generated
/// code relies on it, as it reads through the values unchecked outside debug builds).
std::vector<Diagnostic> check_index_data(const Program& p, const TensorMap& inputs);
/// The message of an index value `value` at row-major `offset` of `b` outside its range.
std::string index_range_message(const BufferDecl& b, int64_t offset, double value);
/// Whether an indirect index of `p` reads the buffer `name`.
bool used_as_index(const Program& p, const std::string& name);

/// Largest elementwise error between two tensors: max |a-b| / max(1, |a|, |b|);
/// NaN in exactly one of them, or a shape mismatch, gives +infinity.
double max_relative_error(const Tensor& a, const Tensor& b);

}  // namespace perfdojo::ir
