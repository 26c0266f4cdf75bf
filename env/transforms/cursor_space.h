// The LoopTune-style cursor space: a cursor names one scope, and actions move it or apply a
// transformation at it with a fixed parameter (docs/actions.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "transforms/action.h"

namespace perfdojo::transforms {

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
