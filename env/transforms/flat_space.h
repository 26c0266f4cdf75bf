// The flat action space: a Discrete space of fixed size over the registry, its mask, and the
// memo that lets a mask re-check only what a step rebuilt (docs/actions.md). Encoding lives in
// flat_space.cpp, the mask and its memo in mask.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "transforms/action.h"
#include "transforms/registry.h"

namespace perfdojo::transforms {

/// Sizes of the flat space's location slots: locations beyond them are not addressable.
struct FlatSpaceConfig {
  int max_scopes = 96;   ///< scopes, in pre-order (the experts' traces reach slot 86)
  int max_nodes = 32;    ///< statements and scopes, in pre-order
  int max_buffers = 16;  ///< buffers, in declaration order
  /// The first `kinds` kinds of the registry have slots; the default is all of them. A smaller
  /// value gives an older layout (kinds are append-only, so its indices are the same), which is
  /// how an agent trained before a kind was added is read and migrated (agents/q_network.h).
  int kinds = kNumKinds;
};

/// Verdicts of the last program's checks, kept for the next mask.
///
/// Each kind's registry row says what its check reads (Reads): a check at a scope or statement
/// reads that node's subtree and the extents and annotations of the scopes enclosing it, and
/// perhaps its next sibling or its parent; a kLiveRange check at a buffer reads the buffer's
/// declaration and the top-level nodes from its first use to its last. Programs are immutable
/// and a transformation shares every subtree it does not touch, so a node met again under the
/// same enclosing scopes, or a buffer whose declaration and nests are the same nodes, has the
/// verdicts computed before: a step re-checks only what it rebuilt. The memo holds the nodes of
/// the last program it saw (an address is never reused while remembered) and nothing older.
/// A memo serves one FlatActionSpace at a time (given to another, it starts over). Not
/// thread-safe: one per env.
class MaskMemo {
 public:
  MaskMemo();
  ~MaskMemo();
  MaskMemo(MaskMemo&&) noexcept;
  MaskMemo& operator=(MaskMemo&&) noexcept;
  /// Forgets everything.
  void clear();
  /// Nodes and buffers remembered.
  size_t size() const;
  /// Lookups (nodes and buffers) answered from memory, and those that had to check.
  uint64_t hits() const;
  uint64_t misses() const;
  /// Keeps the nodes the last mask met, besides each later mask's, until the next pin. An Env
  /// pins its episodes' starting program, to which every reset returns.
  void pin();

  /// What it remembers (mask.cpp); opaque.
  struct Impl;

 private:
  friend class FlatActionSpace;
  std::unique_ptr<Impl> impl_;
};

/// What an index of the flat space is made of, independent of any program: the kind, the
/// position of its parameter among params(kind), and the slots of its location (-1 where the
/// kind's location has none). A learner can score actions from these parts and the features of
/// the slots they name (agents' factored Q-head) instead of learning each index by itself.
struct FlatSlotParts {
  Kind kind = Kind::kTileScope;
  int param_index = 0;
  int scope = -1;    ///< scope slot (kScope, kScopeBuffer): the features' scope row
  int node = -1;     ///< node slot (kNode), pre-order over statements and scopes
  int buffer = -1;   ///< buffer slot (kBuffer, kScopeBuffer, first of kBufferPair)
  int buffer2 = -1;  ///< second buffer of kBufferPair
};

/// Flat space: index = offset(kind) + slot * param_count(kind) + param_index. Fixed for a given
/// config, so an index means the same (kind, slot, parameter slot) on every program; a factor
/// kind's parameter slot j names the j-th of the values derived at the scope (factor_values).
class FlatActionSpace {
 public:
  /// Throws std::invalid_argument when the target gives a kind more than kMaxParams values.
  FlatActionSpace(FlatSpaceConfig config, Target target);

  /// Number of actions N.
  int size() const { return size_; }
  /// The action an index denotes on `p`, or nullopt when the slot is empty on this program.
  std::optional<Action> decode(const ir::Program& p, int index) const;
  /// The index of `a` on `p`, or -1 when its location has no slot.
  int encode(const ir::Program& p, const Action& a) const;
  /// 1 where the action exists and is legal, else 0. With a memo, nodes it remembers are not
  /// checked again (the result is the same, a tested invariant).
  std::vector<uint8_t> mask(const ir::Program& p, MaskMemo* memo = nullptr) const;
  /// The parts of index `index` (0 <= index < size()); kind kTileScope with no slots otherwise.
  FlatSlotParts parts(int index) const;
  /// Human-readable name of index i's (kind, slot, parameter), e.g. "vectorize[scope 3][8]",
  /// "tile_scope[scope 3][#2]" (a factor kind's parameter slot: the third value at the scope).
  std::string describe(int index) const;
  /// First index of a kind's block.
  int offset(Kind k) const { return offsets_[static_cast<int>(k)]; }
  /// The fixed parameter values of a kind (param_values, kept); empty for a factor kind, whose
  /// values are derived at each scope (factor_values: slot j is the j-th value there).
  const std::vector<int64_t>& params(Kind k) const { return params_[static_cast<int>(k)]; }
  /// Parameter slots of a kind (param_slots): 32 for tile_scope, 16 for the other factor kinds.
  int param_count(Kind k) const { return counts_[static_cast<int>(k)]; }
  /// The slot of buffer pair (i, j), i < j < max_buffers: pairs enumerated row by row.
  int pair_slot(int i, int j) const {
    return i * (2 * config_.max_buffers - i - 1) / 2 + (j - i - 1);
  }
  const Target& target() const { return target_; }
  const FlatSpaceConfig& config() const { return config_; }

 private:
  int slots(Kind k) const;
  FlatSpaceConfig config_;
  Target target_;
  std::vector<int> offsets_;
  std::vector<std::vector<int64_t>> params_;  ///< param_values of each kind on the target
  std::vector<int> counts_;                   ///< param_slots of each kind
  int size_ = 0;
};

}  // namespace perfdojo::transforms
