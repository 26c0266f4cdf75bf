// The two action spaces an agent sees: a flat Discrete space of fixed size with its mask, and a
// small cursor space in the LoopTune style. Both are views over the registry (docs/actions.md).
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
  int max_scopes = 24;   ///< scopes, in pre-order
  int max_nodes = 32;    ///< statements and scopes, in pre-order
  int max_buffers = 16;  ///< buffers, in declaration order
};

/// Verdicts of the last program's checks, kept for the next mask.
///
/// A check at a scope or statement reads only that node's subtree, the extents and annotations
/// of the scopes enclosing it, and (join_scopes and move_statement) its next sibling or (hoist)
/// its parent. shrink_buffer, inline_temporary and swap_buffer_dims read the buffer's
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

 private:
  friend class FlatActionSpace;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Flat space: index = offset(kind) + slot * |params(kind)| + param_index. Fixed for a given
/// config and target, so an index means the same (kind, slot, parameter) on every program.
class FlatActionSpace {
 public:
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
  /// Human-readable name of index i's (kind, slot, parameter), e.g. "tile_scope[scope 3][8]".
  std::string describe(int index) const;
  /// First index of a kind's block.
  int offset(Kind k) const { return offsets_[static_cast<int>(k)]; }
  const Target& target() const { return target_; }
  const FlatSpaceConfig& config() const { return config_; }

 private:
  int slots(Kind k) const;
  FlatSpaceConfig config_;
  Target target_;
  std::vector<int> offsets_;
  std::vector<std::vector<int64_t>> params_;  ///< param_values of each kind on the target
  int size_ = 0;
};

/// Cursor space moves: the cursor names one scope (pre-order index) and actions either move it
/// or apply a transformation at it with a fixed parameter.
enum class CursorMove { kUp, kDown, kOut, kIn };

/// One cursor-space action: a move, or (kind, parameter) applied at the cursor.
struct CursorAction {
  bool is_move = true;
  CursorMove move = CursorMove::kUp;
  Kind kind = Kind::kTileScope;
  int64_t param = 0;
};

/// The LoopTune-style space: 4 moves plus a short list of transformations at the cursor.
class CursorActionSpace {
 public:
  explicit CursorActionSpace(Target target);

  /// Number of actions.
  int size() const { return static_cast<int>(actions_.size()); }
  /// The i-th action.
  const CursorAction& at(int i) const { return actions_[i]; }
  /// Name of action i ("up", "tile_scope 8", ...).
  std::string describe(int i) const;
  /// The registry action that action i means at `cursor` on `p` (nullopt for moves).
  std::optional<Action> to_action(const ir::Program& p, int cursor, int i) const;
  /// Cursor after move action i; unchanged when the move is impossible.
  int moved(const ir::Program& p, int cursor, int i) const;
  /// 1 where action i is possible (a move that goes somewhere, a legal transformation).
  std::vector<uint8_t> mask(const ir::Program& p, int cursor) const;
  /// Keeps a cursor valid on `p` after a transformation changed the tree.
  static int clamp(const ir::Program& p, int cursor);

 private:
  Target target_;
  std::vector<CursorAction> actions_;
};

}  // namespace perfdojo::transforms
