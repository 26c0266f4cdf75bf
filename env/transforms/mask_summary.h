// What the flat mask's prechecks read: a summary of one program, made once per mask from its
// ProgramIndex. Each transformation's precheck (its file pair) asks it for the facts it needs;
// per-scope and per-buffer facts that few masks need are made on first use.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ir/ir.h"
#include "transforms/analysis.h"

namespace perfdojo::transforms {

/// Facts about one program for the mask's prechecks. Scopes are addressed by scope slot (their
/// pre-order position, as in the flat space), buffers by declaration index; the first 64
/// declarations are summarised, later ones report `summarised(b) == false` and must be left to
/// the full check.
class MaskSummary {
 public:
  /// Summarises the program `ix` indexes, its first `max_scopes` scopes.
  MaskSummary(const ProgramIndex& ix, int max_scopes) { reset(ix, max_scopes); }
  /// Summarises another program instead, keeping the storage (a MaskMemo keeps one).
  void reset(const ProgramIndex& ix, int max_scopes);

  const ProgramIndex& index() const { return *ix_; }
  const ir::Program& program() const { return *p_; }

  /// The scope at scope slot `s`, and its node index.
  const ir::Node& scope(int s) const { return *scopes_[s].node; }
  int scope_node(int s) const { return ix_->scopes()[s]; }
  /// No child of scope slot `s` is a scope.
  bool innermost(int s) const { return scopes_[s].innermost; }
  /// A :par scope encloses scope slot `s`, is it, or lies inside it.
  bool near_parallel(int s) const { return scopes_[s].near_parallel; }
  /// Number of scopes enclosing scope slot `s`.
  int depth(int s) const { return scopes_[s].depth; }
  /// A scope enclosing scope slot `s` (itself excluded) shares storage between its iterations.
  bool shared_above(int s) const { return scopes_[s].shared_above; }
  /// Some scope of the program is :vec.
  bool has_vector() const { return has_vector_; }

  /// Declarations with a summary (the first 64).
  int summarised_buffers() const { return static_cast<int>(buffers_.size()); }
  bool summarised(int b) const { return b >= 0 && b < summarised_buffers(); }
  /// Statements writing declaration b (summarised), and whether one is a reduction.
  int writers(int b) const { return buffers_[b].writers; }
  bool reduced(int b) const { return buffers_[b].reduced; }
  /// Some access names declaration b (summarised).
  bool accessed(int b) const { return id_of_[b] >= 0; }
  /// First and last top-level node using declaration b, {-1, -1} when none does, {-2, -2}
  /// when not summarised.
  std::pair<int, int> live_range(int b) const {
    if (!summarised(b)) return {-2, -2};
    return {buffers_[b].first, buffers_[b].last};
  }
  /// Per dimension of declaration b (summarised): every access indexes it with exactly one
  /// same iterator {k}. Made on first use.
  const std::vector<bool>& single_iterator_dims(int b);

  /// Which summarised buffers scope slot `s`'s subtree accesses (bit b), and those whose
  /// accesses there do not all use one index.
  struct Uses {
    uint64_t used = 0;
    uint64_t irregular = 0;
    uint64_t written = 0;  ///< stored to (reduction targets included) in the scope
  };
  /// The uses of scope slot `s`, made on demand and kept for the last slot asked.
  const Uses& uses(int s) { return uses_slot_ == s ? uses_ : make_uses(s); }
  /// For the last slot given to uses(): the index of the first access of buffer b in it.
  const std::vector<ir::Affine>& first_index(int b) const { return *first_[b]; }

 private:
  void site(int si, int b);
  const Uses& make_uses(int s);

  struct ScopeSummary {
    const ir::Node* node = nullptr;
    bool innermost = false;
    bool near_parallel = false;
    bool shared_above = false;
    int depth = 0;
  };
  struct BufferSummary {
    std::vector<bool> dim_ok;   ///< single_iterator_dims
    int writers = 0;            ///< statements writing the buffer
    bool reduced = false;       ///< some writer is a reduction
    int first = -1, last = -1;  ///< top-level nodes using it
    bool dims_done = false;     ///< dim_ok is made
  };
  const ProgramIndex* ix_ = nullptr;
  const ir::Program* p_ = nullptr;
  std::vector<ScopeSummary> scopes_;
  std::vector<BufferSummary> buffers_;
  std::vector<int> decl_of_;  ///< buffer id (ProgramIndex) -> declaration index, -1 beyond 64
  std::vector<int> id_of_;    ///< declaration index -> buffer id, -1 when no site names it
  bool has_vector_ = false;
  Uses uses_;
  int uses_slot_ = -1;  ///< the slot uses_ and first_ describe
  std::vector<const std::vector<ir::Affine>*> first_;
  std::vector<char> parallel_inside_, parallel_above_, shared_above_;  ///< reset's scratch
};

}  // namespace perfdojo::transforms
