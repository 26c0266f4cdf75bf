#include "transforms/flat_space.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include "transforms/analysis.h"

namespace perfdojo::transforms {

FlatActionSpace::FlatActionSpace(FlatSpaceConfig config, Target target)
    : config_(config), target_(std::move(target)) {
  for (int k = 0; k < kNumKinds; ++k) {
    offsets_.push_back(size_);
    Kind kind = static_cast<Kind>(k);
    params_.push_back(param_values(param_kind(kind), target_));
    // Kinds after the config's first `kinds` have no slots (an older layout).
    counts_.push_back(k < config_.kinds ? param_slots(kind) : 0);
    // The mask keeps one bit per parameter value (Precheck, NodeVerdicts).
    if (params_.back().size() > static_cast<size_t>(kMaxParams))
      throw std::invalid_argument(std::string("target '") + target_.name + "' gives " +
                                  kind_name(kind) + " " + std::to_string(params_.back().size()) +
                                  " parameter values; the flat space takes at most " +
                                  std::to_string(kMaxParams));
    size_ += slots(kind) * counts_.back();
  }
}

int FlatActionSpace::slots(Kind k) const {
  const int b = config_.max_buffers;
  switch (loc_kind(k)) {
    case LocKind::kScope:
      return config_.max_scopes;
    case LocKind::kNode:
      return config_.max_nodes;
    case LocKind::kBuffer:
      return b;
    case LocKind::kBufferPair:
      return b * (b - 1) / 2;
    case LocKind::kScopeBuffer:
      return config_.max_scopes * b;
  }
  return 0;
}

namespace {

// Pair slot s <-> (i, j), i < j, enumerated row by row.
std::pair<int, int> pair_of(int s, int n) {
  for (int i = 0; i < n; ++i) {
    int row = n - 1 - i;
    if (s < row) return {i, i + 1 + s};
    s -= row;
  }
  return {-1, -1};
}

int buffer_index(const ir::Program& p, const std::string& name) {
  for (size_t i = 0; i < p.buffers.size(); ++i)
    if (p.buffers[i].name == name) return static_cast<int>(i);
  return -1;
}

// The path of the n-th node (the n-th scope when `scopes_only`) in pre-order, as scope_paths /
// node_paths would list it, without building the whole list. Counts n down; true when found.
bool nth_path(const std::vector<ir::NodePtr>& body, bool scopes_only, int& n, Path& cur) {
  for (int i = 0; i < static_cast<int>(body.size()); ++i) {
    cur.push_back(i);
    if (body[i]->is_scope || !scopes_only) {
      if (n == 0) return true;
      --n;
    }
    if (body[i]->is_scope && nth_path(body[i]->body, scopes_only, n, cur)) return true;
    cur.pop_back();
  }
  return false;
}

}  // namespace

std::optional<Action> FlatActionSpace::decode(const ir::Program& p, int index) const {
  if (index < 0 || index >= size_) return std::nullopt;
  const FlatSlotParts parts = this->parts(index);
  Action a;
  a.kind = parts.kind;
  const bool factor = param_kind(parts.kind) == ParamKind::kFactor;
  if (!factor) a.param = params(parts.kind)[parts.param_index];
  auto buffer = [&](int i) -> const ir::BufferDecl* {
    return i < static_cast<int>(p.buffers.size()) ? &p.buffers[i] : nullptr;
  };
  auto path = [&](int n, bool scopes_only) {
    a.path.reserve(16);  // one allocation for the usual depths, not one per doubling
    return nth_path(p.body, scopes_only, n, a.path);
  };
  switch (loc_kind(parts.kind)) {
    case LocKind::kScope:
      if (!path(parts.scope, true)) return std::nullopt;
      if (factor) {  // the slot's value at this scope, if it has that many
        const ParamList values = factor_values(parts.kind, node_at(p, a.path)->extent);
        if (parts.param_index >= values.n) return std::nullopt;
        a.param = values.v[parts.param_index];
      }
      break;
    case LocKind::kNode:
      if (!path(parts.node, false)) return std::nullopt;
      break;
    case LocKind::kBuffer:
      if (!buffer(parts.buffer)) return std::nullopt;
      a.buffer = buffer(parts.buffer)->name;
      break;
    case LocKind::kBufferPair:
      if (parts.buffer < 0 || !buffer(parts.buffer) || !buffer(parts.buffer2)) return std::nullopt;
      a.buffer = buffer(parts.buffer)->name;
      a.buffer2 = buffer(parts.buffer2)->name;
      break;
    case LocKind::kScopeBuffer:
      if (!buffer(parts.buffer) || !path(parts.scope, true)) return std::nullopt;
      a.buffer = buffer(parts.buffer)->name;
      break;
  }
  return a;
}

int FlatActionSpace::encode(const ir::Program& p, const Action& a) const {
  int k = static_cast<int>(a.kind);
  if (k < 0 || k >= kNumKinds || counts_[k] == 0) return -1;  // not a move of this space
  int pi = -1;
  if (param_kind(a.kind) == ParamKind::kFactor) {
    const ir::Node* s = loc_kind(a.kind) == LocKind::kScope ? node_at(p, a.path) : nullptr;
    if (!s || !s->is_scope) return -1;
    pi = factor_values(a.kind, s->extent).find(a.param);
  } else {
    const auto& params = params_[k];
    auto pit = std::find(params.begin(), params.end(), a.param);
    if (pit != params.end()) pi = static_cast<int>(pit - params.begin());
  }
  if (pi < 0) return -1;
  const int nb = config_.max_buffers;
  int slot = -1;
  switch (loc_kind(a.kind)) {
    case LocKind::kScope:
      slot = position_of(scope_paths(p), a.path);
      break;
    case LocKind::kNode:
      slot = position_of(node_paths(p), a.path);
      break;
    case LocKind::kBuffer:
      slot = buffer_index(p, a.buffer);
      break;
    case LocKind::kBufferPair: {
      int i = buffer_index(p, a.buffer), j = buffer_index(p, a.buffer2);
      if (i >= 0 && j > i && j < nb) slot = pair_slot(i, j);
      break;
    }
    case LocKind::kScopeBuffer: {
      int s = position_of(scope_paths(p), a.path), b = buffer_index(p, a.buffer);
      if (s >= 0 && b >= 0 && s < config_.max_scopes && b < nb) slot = s * nb + b;
      break;
    }
  }
  if (slot < 0 || slot >= slots(a.kind)) return -1;
  return offsets_[k] + slot * counts_[k] + pi;
}

FlatSlotParts FlatActionSpace::parts(int index) const {
  FlatSlotParts out;
  if (index < 0 || index >= size_) return out;
  int k = static_cast<int>(std::upper_bound(offsets_.begin(), offsets_.end(), index) -
                           offsets_.begin()) -
          1;
  out.kind = static_cast<Kind>(k);
  const int np = counts_[k];
  const int local = index - offsets_[k];
  const int slot = local / np;
  out.param_index = local % np;
  const int nb = config_.max_buffers;
  switch (loc_kind(out.kind)) {
    case LocKind::kScope:
      out.scope = slot;
      break;
    case LocKind::kNode:
      out.node = slot;
      break;
    case LocKind::kBuffer:
      out.buffer = slot;
      break;
    case LocKind::kBufferPair:
      std::tie(out.buffer, out.buffer2) = pair_of(slot, nb);
      break;
    case LocKind::kScopeBuffer:
      out.scope = slot / nb;
      out.buffer = slot % nb;
      break;
  }
  return out;
}

std::string FlatActionSpace::describe(int index) const {
  if (index < 0 || index >= size_) return "invalid";
  const FlatSlotParts parts = this->parts(index);
  std::string s = std::string(kind_name(parts.kind)) + "[";
  switch (loc_kind(parts.kind)) {
    case LocKind::kScope:
      s += "scope " + std::to_string(parts.scope);
      break;
    case LocKind::kNode:
      s += "node " + std::to_string(parts.node);
      break;
    case LocKind::kBuffer:
      s += "buffer " + std::to_string(parts.buffer);
      break;
    case LocKind::kBufferPair:
      s += "buffers " + std::to_string(parts.buffer) + "," + std::to_string(parts.buffer2);
      break;
    case LocKind::kScopeBuffer:
      s += "scope " + std::to_string(parts.scope) + ", buffer " + std::to_string(parts.buffer);
      break;
  }
  s += "]";
  if (param_kind(parts.kind) == ParamKind::kFactor)
    s += "[#" + std::to_string(parts.param_index) + "]";
  else if (param_kind(parts.kind) != ParamKind::kNone)
    s += "[" + std::to_string(params(parts.kind)[parts.param_index]) + "]";
  return s;
}

}  // namespace perfdojo::transforms
