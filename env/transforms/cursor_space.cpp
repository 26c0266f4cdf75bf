#include "transforms/cursor_space.h"

#include <algorithm>

#include "transforms/analysis.h"
#include "transforms/registry.h"

namespace perfdojo::transforms {

CursorActionSpace::CursorActionSpace(Target target) : target_(std::move(target)) {
  for (auto m : {CursorMove::kUp, CursorMove::kDown, CursorMove::kOut, CursorMove::kIn})
    actions_.push_back({true, m, Kind::kTileScope, 0});
  auto add = [&](Kind k, int64_t p) { actions_.push_back({false, CursorMove::kUp, k, p}); };
  for (int64_t f : {2, 4, 8, 16, 32}) add(Kind::kTileScope, f);
  add(Kind::kSwapScopes, 0);
  add(Kind::kJoinNested, 0);
  add(Kind::kJoinScopes, 0);
  add(Kind::kSplitScope, 1);
  for (int64_t w : vector_width_params()) add(Kind::kVectorize, w);  // one space on every target
  add(Kind::kUnroll, 4);
  add(Kind::kUnroll, 8);
  add(Kind::kParallelize, 0);
}

std::string CursorActionSpace::describe(int i) const {
  const CursorAction& a = actions_.at(i);
  if (a.is_move) {
    static const char* kNames[] = {"up", "down", "out", "in"};
    return kNames[static_cast<int>(a.move)];
  }
  std::string s = kind_name(a.kind);
  if (param_kind(a.kind) != ParamKind::kNone) s += " " + std::to_string(a.param);
  return s;
}

std::optional<Action> CursorActionSpace::to_action(const ir::Program& p, int cursor, int i) const {
  const CursorAction& c = actions_.at(i);
  if (c.is_move) return std::nullopt;
  auto scopes = scope_paths(p);
  if (cursor < 0 || cursor >= static_cast<int>(scopes.size())) return std::nullopt;
  return Action{c.kind, scopes[cursor], "", "", c.param};
}

int CursorActionSpace::moved(const ir::Program& p, int cursor, int i) const {
  const CursorAction& c = actions_.at(i);
  auto scopes = scope_paths(p);
  const int n = static_cast<int>(scopes.size());
  if (!c.is_move || cursor < 0 || cursor >= n) return cursor;
  const Path& cur = scopes[cursor];
  switch (c.move) {
    case CursorMove::kUp:
      return cursor > 0 ? cursor - 1 : cursor;
    case CursorMove::kDown:
      return cursor + 1 < n ? cursor + 1 : cursor;
    case CursorMove::kOut: {
      if (cur.size() < 2) return cursor;
      Path parent(cur.begin(), cur.end() - 1);
      return position_of(scopes, parent);
    }
    case CursorMove::kIn: {
      // The next scope in pre-order is the first child scope when it lies below the cursor.
      if (cursor + 1 < n && scopes[cursor + 1].size() == cur.size() + 1 &&
          std::equal(cur.begin(), cur.end(), scopes[cursor + 1].begin()))
        return cursor + 1;
      return cursor;
    }
  }
  return cursor;
}

std::vector<uint8_t> CursorActionSpace::mask(const ir::Program& p, int cursor) const {
  std::vector<uint8_t> m(actions_.size(), 0);
  for (int i = 0; i < size(); ++i) {
    if (actions_[i].is_move) {
      m[i] = moved(p, cursor, i) != cursor;
    } else if (auto a = to_action(p, cursor, i)) {
      m[i] = check(p, *a, target_).ok();
    }
  }
  return m;
}

int CursorActionSpace::clamp(const ir::Program& p, int cursor) {
  int n = static_cast<int>(scope_paths(p).size());
  return std::clamp(cursor, 0, std::max(n - 1, 0));
}

}  // namespace perfdojo::transforms
