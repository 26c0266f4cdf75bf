#include "transforms/action_space.h"

#include <algorithm>
#include <optional>

#include "transforms/analysis.h"

namespace perfdojo::transforms {

FlatActionSpace::FlatActionSpace(FlatSpaceConfig config, Target target)
    : config_(config), target_(std::move(target)) {
  for (int k = 0; k < kNumKinds; ++k) {
    offsets_.push_back(size_);
    Kind kind = static_cast<Kind>(k);
    size_ += slots(kind) * static_cast<int>(param_values(param_kind(kind), target_).size());
  }
}

int FlatActionSpace::slots(Kind k) const {
  const int b = config_.max_buffers;
  switch (loc_kind(k)) {
    case LocKind::kScope: return config_.max_scopes;
    case LocKind::kNode: return config_.max_nodes;
    case LocKind::kBuffer: return b;
    case LocKind::kBufferPair: return b * (b - 1) / 2;
    case LocKind::kScopeBuffer: return config_.max_scopes * b;
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

int slot_of_pair(int i, int j, int n) { return i * (2 * n - i - 1) / 2 + (j - i - 1); }

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

int path_index(const std::vector<Path>& paths, const Path& p) {
  auto it = std::find(paths.begin(), paths.end(), p);
  return it == paths.end() ? -1 : static_cast<int>(it - paths.begin());
}

}  // namespace

std::optional<Action> FlatActionSpace::decode(const ir::Program& p, int index) const {
  if (index < 0 || index >= size_) return std::nullopt;
  int k = static_cast<int>(std::upper_bound(offsets_.begin(), offsets_.end(), index) - offsets_.begin()) - 1;
  Kind kind = static_cast<Kind>(k);
  const auto& params = param_values(param_kind(kind), target_);
  int local = index - offsets_[k];
  int slot = local / static_cast<int>(params.size());
  Action a;
  a.kind = kind;
  a.param = params[local % params.size()];
  const int nb = config_.max_buffers;
  auto buffer = [&](int i) -> const ir::BufferDecl* {
    return i < static_cast<int>(p.buffers.size()) ? &p.buffers[i] : nullptr;
  };
  switch (loc_kind(kind)) {
    case LocKind::kScope:
    case LocKind::kNode: {
      int n = slot;
      if (!nth_path(p.body, loc_kind(kind) == LocKind::kScope, n, a.path)) return std::nullopt;
      break;
    }
    case LocKind::kBuffer:
      if (!buffer(slot)) return std::nullopt;
      a.buffer = buffer(slot)->name;
      break;
    case LocKind::kBufferPair: {
      auto [i, j] = pair_of(slot, nb);
      if (i < 0 || !buffer(i) || !buffer(j)) return std::nullopt;
      a.buffer = buffer(i)->name;
      a.buffer2 = buffer(j)->name;
      break;
    }
    case LocKind::kScopeBuffer: {
      int s = slot / nb, b = slot % nb;
      if (!buffer(b) || !nth_path(p.body, true, s, a.path)) return std::nullopt;
      a.buffer = buffer(b)->name;
      break;
    }
  }
  return a;
}

int FlatActionSpace::encode(const ir::Program& p, const Action& a) const {
  int k = static_cast<int>(a.kind);
  const auto& params = param_values(param_kind(a.kind), target_);
  auto pit = std::find(params.begin(), params.end(), a.param);
  if (pit == params.end()) return -1;
  int pi = static_cast<int>(pit - params.begin());
  const int nb = config_.max_buffers;
  int slot = -1;
  switch (loc_kind(a.kind)) {
    case LocKind::kScope: slot = path_index(scope_paths(p), a.path); break;
    case LocKind::kNode: slot = path_index(node_paths(p), a.path); break;
    case LocKind::kBuffer: slot = buffer_index(p, a.buffer); break;
    case LocKind::kBufferPair: {
      int i = buffer_index(p, a.buffer), j = buffer_index(p, a.buffer2);
      if (i >= 0 && j > i && j < nb) slot = slot_of_pair(i, j, nb);
      break;
    }
    case LocKind::kScopeBuffer: {
      int s = path_index(scope_paths(p), a.path), b = buffer_index(p, a.buffer);
      if (s >= 0 && b >= 0 && s < config_.max_scopes && b < nb) slot = s * nb + b;
      break;
    }
  }
  if (slot < 0 || slot >= slots(a.kind)) return -1;
  return offsets_[k] + slot * static_cast<int>(params.size()) + pi;
}

namespace {

// Necessary conditions for legality that are cheap to test from a summary of the program made
// once per mask. A candidate failing one is illegal without running its check; every other
// candidate is decided by the full check, so the mask equals the checks (a tested invariant).
class Prefilter {
 public:
  explicit Prefilter(const ProgramIndex& ix, int max_scopes) : ix_(ix), p_(ix.program()) {
    const ir::Program& p = p_;
    const size_t nb = std::min<size_t>(p.buffers.size(), 64);
    buffers_.resize(nb);
    for (size_t b = 0; b < nb; ++b) {
      buffers_[b].dim_ok.assign(p.buffers[b].shape.size(), true);
      buffers_[b].depth.assign(p.buffers[b].shape.size(), -1);
    }
    const int ns = std::min<int>(max_scopes, static_cast<int>(ix.scopes().size()));
    slot_of_.assign(ix.size(), -1);
    std::vector<bool> parallel_inside(ix.size(), false);  // a :par scope in the subtree
    for (int n = ix.size() - 1; n >= 0; --n) {
      const ProgramIndex::NodeInfo& info = ix.node(n);
      if (info.node->annot == ir::Annot::kParallel && info.node->is_scope)
        parallel_inside[n] = true;
      if (parallel_inside[n] && info.parent >= 0) parallel_inside[info.parent] = true;
    }
    for (int i = 0; i < ns; ++i) {
      const int n = ix.scopes()[i];
      slot_of_[n] = i;
      ScopeSummary sum;
      sum.node = ix.node(n).node;
      sum.innermost = true;
      for (const auto& c : sum.node->body) sum.innermost = sum.innermost && !c->is_scope;
      sum.near_parallel = parallel_inside[n];
      for (int e = ix.node(n).parent; e >= 0; e = ix.node(e).parent)
        sum.near_parallel = sum.near_parallel || ix.node(e).node->annot == ir::Annot::kParallel;
      scopes_.push_back(std::move(sum));
    }
    first_.assign(scopes_.size() * nb, nullptr);
    // The declaration each site's buffer names (the first of that name), -1 beyond 64.
    std::vector<int> decl_of;
    for (int s = 0; s < static_cast<int>(ix.sites().size()); ++s) {
      const int id = ix.site_buffer(s);
      if (id >= static_cast<int>(decl_of.size())) {
        const std::string& name = ix.sites()[s].access->buffer;
        int b = -1;
        for (size_t i = 0; i < nb && b < 0; ++i)
          if (p.buffers[i].name == name) b = static_cast<int>(i);
        decl_of.push_back(b);
      }
      if (decl_of[id] >= 0) site(s, decl_of[id]);
    }
  }

  // `scope_slot`, `b`, `b2`: the candidate's scope slot and buffer indices (-1 when unused);
  // `node`: the node index of a node location (-1 when unused).
  // Inlined into the mask's loops: it runs once per candidate.
  [[gnu::always_inline]] bool maybe_legal(Kind k, int scope_slot, int node, int b, int b2,
                                          int64_t param) const {
    const ir::Node* s = scope_slot >= 0 ? scopes_[scope_slot].node : nullptr;
    struct {
      int64_t param;
    } a{param};
    constexpr ir::Annot kNone = ir::Annot::kNone;
    switch (k) {
      case Kind::kTileScope:
        return s->annot == kNone && a.param > 1 && a.param < s->extent && s->extent % a.param == 0;
      case Kind::kUnroll:
        return s->annot == kNone && a.param > 1 && a.param <= s->extent && s->extent % a.param == 0;
      case Kind::kVectorize:
        return s->annot == kNone && a.param > 0 && s->extent % a.param == 0 &&
               scopes_[scope_slot].innermost;
      case Kind::kSplitScope:
        return a.param >= 1 && a.param < static_cast<int64_t>(s->body.size());
      case Kind::kSwapScopes:
        return s->body.size() == 1 && s->body[0]->is_scope && s->annot != ir::Annot::kVector &&
               s->body[0]->annot != ir::Annot::kVector;
      case Kind::kJoinNested:
        return s->body.size() == 1 && s->body[0]->is_scope && s->annot == kNone &&
               s->body[0]->annot == kNone;
      case Kind::kJoinScopes: {
        // The next sibling is a scope of the same extent and annotation.
        const int next = ix_.node(ix_.scopes()[scope_slot]).next;
        if (next < 0) return false;
        const ir::Node* t = ix_.node(next).node;
        return t->is_scope && t->extent == s->extent && t->annot == s->annot;
      }
      case Kind::kParallelize:
        return s->annot == kNone && s->extent > 1 && !scopes_[scope_slot].near_parallel;
      case Kind::kMoveStatement:
        return ix_.node(node).next >= 0;
      case Kind::kHoist: {
        // A plain store, first or last in a scope, none of whose accesses uses that scope's
        // iterator or a deeper one.
        const ProgramIndex::NodeInfo& n = ix_.node(node);
        if (n.node->is_scope || n.parent < 0 || n.node->stmt.op != ir::Reduce::kNone) return false;
        if (ix_.node(n.parent).first_child != node && n.next >= 0) return false;
        const int d = static_cast<int>(ix_.path(node).size()) - 2;
        for (const AccessSite& x : ix_.sites(n.site_begin, n.site_end))
          for (const ir::Affine& f : x.access->index)
            if (f.max_depth() >= d) return false;
        return true;
      }
      case Kind::kCreateTemporary: {
        // Used inside the scope, always with one and the same index.
        if (b < 0 || b >= static_cast<int>(buffers_.size())) return true;
        const ScopeSummary& sum = scopes_[scope_slot];
        return ((sum.used >> b) & 1) && !((sum.irregular >> b) & 1);
      }
      case Kind::kShrinkBuffer: {
        if (b < 0 || b >= static_cast<int>(buffers_.size())) return true;
        const ir::BufferDecl& d = p_.buffers[b];
        return d.role == ir::Role::kTemp && a.param >= 0 && a.param < static_cast<int64_t>(d.shape.size()) &&
               buffers_[b].dim_ok[a.param];
      }
      case Kind::kInlineTemporary: {
        // A temporary without initial value written by exactly one plain store.
        if (b < 0 || b >= static_cast<int>(buffers_.size())) return true;
        const ir::BufferDecl& d = p_.buffers[b];
        return d.role == ir::Role::kTemp && !d.init && buffers_[b].writers == 1 && !buffers_[b].reduced;
      }
      case Kind::kSwapBufferDims: {
        if (b < 0) return true;
        const ir::BufferDecl& d = p_.buffers[b];
        return d.role != ir::Role::kOutput && a.param + 1 < static_cast<int64_t>(d.shape.size());
      }
      case Kind::kReuseBuffers: {
        const int bx = b, by = b2;
        if (bx < 0 || by < 0 || bx >= static_cast<int>(buffers_.size()) || by >= static_cast<int>(buffers_.size()))
          return true;
        const ir::BufferDecl& x = p_.buffers[bx];
        const ir::BufferDecl& y = p_.buffers[by];
        if (x.role != ir::Role::kTemp || y.role != ir::Role::kTemp || x.dtype != y.dtype || x.shape != y.shape || y.init)
          return false;
        const BufferSummary& fx = buffers_[bx];
        const BufferSummary& fy = buffers_[by];
        if (fx.first < 0 || fy.first < 0) return true;
        return fx.last < fy.first || (fy.last < fx.first && !x.init);
      }
      default:
        return true;
    }
  }

 private:
  // Site `si` of declared buffer `b`.
  void site(int si, int b) {
    const AccessSite& x = ix_.sites()[si];
    const ir::Access& a = *x.access;
    BufferSummary& bs = buffers_[b];
    if (x.write) {
      ++bs.writers;
      bs.reduced = bs.reduced || x.reduction;
    }
    const int node = ix_.site_node(si);
    const int top = ix_.node(node).top;
    if (bs.first < 0) bs.first = top;
    bs.last = top;
    for (size_t d = 0; d < bs.dim_ok.size() && d < a.index.size(); ++d) {
      const ir::Affine& ix = a.index[d];
      int k = ix.max_depth();
      bool single = k >= 0 && ix.constant == 0 && ix.coeff(k) == 1;
      for (int j = 0; single && j < k; ++j) single = ix.coeff(j) == 0;
      if (!single || (bs.depth[d] >= 0 && bs.depth[d] != k)) bs.dim_ok[d] = false;
      else bs.depth[d] = k;
    }
    for (int n = ix_.node(node).parent; n >= 0; n = ix_.node(n).parent) {
      if (slot_of_[n] < 0) continue;
      ScopeSummary& sum = scopes_[slot_of_[n]];
      sum.used |= uint64_t{1} << b;
      const std::vector<ir::Affine>*& first = first_[slot_of_[n] * buffers_.size() + b];
      if (!first)
        first = &a.index;
      else if (*first != a.index)
        sum.irregular |= uint64_t{1} << b;
    }
  }

  struct ScopeSummary {
    const ir::Node* node = nullptr;
    bool innermost = false;      ///< no child is a scope
    bool near_parallel = false;  ///< a :par scope encloses it, is it, or lies inside it
    uint64_t used = 0;       ///< bit b: buffer b is accessed in the subtree
    uint64_t irregular = 0;  ///< bit b: accesses of buffer b in the subtree differ in index
  };
  struct BufferSummary {
    int writers = 0;          ///< statements writing the buffer
    bool reduced = false;     ///< some writer is a reduction
    int first = -1, last = -1;  ///< top-level nodes using it
    std::vector<bool> dim_ok;   ///< dimension is exactly one {k}, the same k everywhere
    std::vector<int> depth;     ///< the k of dimension d's {k}, -1 before the first access
  };
  const ProgramIndex& ix_;
  const ir::Program& p_;
  std::vector<int> slot_of_;  ///< node index -> scope slot, -1 for none
  std::vector<ScopeSummary> scopes_;
  std::vector<BufferSummary> buffers_;
  /// [scope slot][buffer]: the first index of the buffer seen in the scope's subtree
  std::vector<const std::vector<ir::Affine>*> first_;
};

}  // namespace

std::vector<uint8_t> FlatActionSpace::mask(const ir::Program& p) const {
  // Room for one more entry: Env appends the stop action without reallocating.
  std::vector<uint8_t> m;
  m.reserve(size_ + 1);
  m.resize(size_, 0);
  const ProgramIndex ix(p);
  const int nb = std::min<int>(config_.max_buffers, static_cast<int>(p.buffers.size()));
  const int ns = std::min<int>(config_.max_scopes, static_cast<int>(ix.scopes().size()));
  const int nn = std::min<int>(config_.max_nodes, ix.size());
  const Prefilter pre(ix, ns);
  Action a;
  for (int k = 0; k < kNumKinds; ++k) {
    Kind kind = static_cast<Kind>(k);
    const auto& params = param_values(param_kind(kind), target_);
    const int np = static_cast<int>(params.size());
    // The Action is built only for candidates that pass the prefilter.
    // One Action is reused (its path and names keep their storage); its location is set only
    // for candidates that pass the prefilter.
    a.kind = kind;
    auto fill = [&](int slot, int scope_slot, int node, int b, int b2) {
      bool located = false;
      for (int pi = 0; pi < np; ++pi) {
        if (!pre.maybe_legal(kind, scope_slot, node, b, b2, params[pi])) continue;
        if (!located) {
          const int at = scope_slot >= 0 ? ix.scopes()[scope_slot] : node;
          if (at >= 0) {
            const std::span<const int> path = ix.path(at);
            a.path.assign(path.begin(), path.end());
          } else {
            a.path.clear();
          }
          if (b >= 0)
            a.buffer = p.buffers[b].name;
          else
            a.buffer.clear();
          if (b2 >= 0)
            a.buffer2 = p.buffers[b2].name;
          else
            a.buffer2.clear();
          located = true;
        }
        a.param = params[pi];
        if (check(p, a, target_, ix).ok()) m[offsets_[k] + slot * np + pi] = 1;
      }
    };
    switch (loc_kind(kind)) {
      case LocKind::kScope:
        for (int s = 0; s < ns; ++s) fill(s, s, -1, -1, -1);
        break;
      case LocKind::kNode:
        for (int s = 0; s < nn; ++s) fill(s, -1, s, -1, -1);
        break;
      case LocKind::kBuffer:
        for (int b = 0; b < nb; ++b) fill(b, -1, -1, b, -1);
        break;
      case LocKind::kBufferPair:
        for (int i = 0; i < nb; ++i)
          for (int j = i + 1; j < nb; ++j)
            fill(slot_of_pair(i, j, config_.max_buffers), -1, -1, i, j);
        break;
      case LocKind::kScopeBuffer:
        for (int s = 0; s < ns; ++s)
          for (int b = 0; b < nb; ++b) fill(s * config_.max_buffers + b, s, -1, b, -1);
        break;
    }
  }
  return m;
}

std::string FlatActionSpace::describe(int index) const {
  if (index < 0 || index >= size_) return "invalid";
  int k = static_cast<int>(std::upper_bound(offsets_.begin(), offsets_.end(), index) - offsets_.begin()) - 1;
  Kind kind = static_cast<Kind>(k);
  const auto& params = param_values(param_kind(kind), target_);
  int local = index - offsets_[k];
  int slot = local / static_cast<int>(params.size());
  std::string s = std::string(kind_name(kind)) + "[";
  switch (loc_kind(kind)) {
    case LocKind::kScope: s += "scope " + std::to_string(slot); break;
    case LocKind::kNode: s += "node " + std::to_string(slot); break;
    case LocKind::kBuffer: s += "buffer " + std::to_string(slot); break;
    case LocKind::kBufferPair: {
      auto [i, j] = pair_of(slot, config_.max_buffers);
      s += "buffers " + std::to_string(i) + "," + std::to_string(j);
      break;
    }
    case LocKind::kScopeBuffer:
      s += "scope " + std::to_string(slot / config_.max_buffers) + ", buffer " +
           std::to_string(slot % config_.max_buffers);
      break;
  }
  s += "]";
  if (param_kind(kind) != ParamKind::kNone) s += "[" + std::to_string(params[local % params.size()]) + "]";
  return s;
}

CursorActionSpace::CursorActionSpace(Target target) : target_(std::move(target)) {
  for (auto m : {CursorMove::kUp, CursorMove::kDown, CursorMove::kOut, CursorMove::kIn})
    actions_.push_back({true, m, Kind::kTileScope, 0});
  auto add = [&](Kind k, int64_t p) { actions_.push_back({false, CursorMove::kUp, k, p}); };
  for (int64_t f : {2, 4, 8, 16, 32}) add(Kind::kTileScope, f);
  add(Kind::kSwapScopes, 0);
  add(Kind::kJoinNested, 0);
  add(Kind::kJoinScopes, 0);
  add(Kind::kSplitScope, 1);
  for (int w : target_.vector_widths) add(Kind::kVectorize, w);
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
    case CursorMove::kUp: return cursor > 0 ? cursor - 1 : cursor;
    case CursorMove::kDown: return cursor + 1 < n ? cursor + 1 : cursor;
    case CursorMove::kOut: {
      if (cur.size() < 2) return cursor;
      Path parent(cur.begin(), cur.end() - 1);
      return path_index(scopes, parent);
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
