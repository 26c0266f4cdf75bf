#include "transforms/action_space.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "transforms/analysis.h"
#include "transforms/create_temporary.h"
#include "transforms/unroll.h"

namespace perfdojo::transforms {

FlatActionSpace::FlatActionSpace(FlatSpaceConfig config, Target target)
    : config_(config), target_(std::move(target)) {
  for (int k = 0; k < kNumKinds; ++k) {
    offsets_.push_back(size_);
    Kind kind = static_cast<Kind>(k);
    params_.push_back(param_values(param_kind(kind), target_));
    size_ += slots(kind) * static_cast<int>(params_.back().size());
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
      a.path.reserve(16);  // one allocation for the usual depths, not one per doubling
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
// For tile_scope and unroll at a scope slot the conditions are the whole check (`decides`);
// create_temporary is decided from the scope's summary (`temporary_ok`).
class Prefilter {
 public:
  static bool decides(Kind k) { return k == Kind::kTileScope || k == Kind::kUnroll; }

  explicit Prefilter(const ProgramIndex& ix, int max_scopes) { reset(ix, max_scopes); }

  // Summarises the program `ix` indexes instead, keeping the storage (a MaskMemo keeps one).
  void reset(const ProgramIndex& ix, int max_scopes) {
    ix_ = &ix;
    p_ = &ix.program();
    const ir::Program& p = *p_;
    const size_t nb = std::min<size_t>(p.buffers.size(), 64);
    for (auto& b : buffers_) b = BufferSummary{std::move(b.dim_ok)};
    buffers_.resize(nb);
    scopes_.clear();
    decl_of_.clear();
    first_scope_ = -1;
    const int ns = std::min<int>(max_scopes, static_cast<int>(ix.scopes().size()));
    std::vector<char>& parallel_inside = parallel_inside_;  // a :par scope in the subtree
    parallel_inside.assign(ix.size(), 0);
    for (int n = ix.size() - 1; n >= 0; --n) {
      const ProgramIndex::NodeInfo& info = ix.node(n);
      if (info.node->annot == ir::Annot::kParallel && info.node->is_scope) parallel_inside[n] = 1;
      if (parallel_inside[n] && info.parent >= 0) parallel_inside[info.parent] = 1;
    }
    // Of the scopes enclosing each node: a :par one, one sharing storage between iterations.
    // Node indices are pre-order, so a parent's flags are known before its children's.
    std::vector<char>& parallel_above = parallel_above_;
    std::vector<char>& shared_above = shared_above_;
    parallel_above.assign(ix.size(), 0);
    shared_above.assign(ix.size(), 0);
    for (int n = 0; n < ix.size(); ++n) {
      const int e = ix.node(n).parent;
      if (e < 0) continue;
      const ir::Annot annot = ix.node(e).node->annot;
      parallel_above[n] = parallel_above[e] || annot == ir::Annot::kParallel;
      shared_above[n] = shared_above[e] || shares_storage(annot);
    }
    for (int i = 0; i < ns; ++i) {
      const int n = ix.scopes()[i];
      ScopeSummary sum;
      sum.node = ix.node(n).node;
      sum.innermost = true;
      for (const auto& c : sum.node->body) sum.innermost = sum.innermost && !c->is_scope;
      sum.near_parallel = parallel_inside[n] || parallel_above[n];
      sum.depth = static_cast<int>(ix.path(n).size()) - 1;
      sum.temporary_scope = temporary_scope_annot(sum.node->annot) && !shared_above[n];
      scopes_.push_back(sum);
    }
    // The declaration each site's buffer names (the first of that name), -1 beyond 64.
    for (int s = 0; s < static_cast<int>(ix.sites().size()); ++s) {
      const int id = ix.site_buffer(s);
      if (id >= static_cast<int>(decl_of_.size())) {
        const std::string& name = ix.sites()[s].access->buffer;
        int b = -1;
        for (size_t i = 0; i < nb && b < 0; ++i)
          if (same_name(p.buffers[i].name, name)) b = static_cast<int>(i);
        decl_of_.push_back(b);
      }
      if (decl_of_[id] >= 0) site(s, decl_of_[id]);
    }
    id_of_.assign(nb, -1);
    for (int id = 0; id < static_cast<int>(decl_of_.size()); ++id)
      if (decl_of_[id] >= 0 && id_of_[decl_of_[id]] < 0) id_of_[decl_of_[id]] = id;
    has_vector_ = false;
    for (int n : ix.scopes())
      has_vector_ = has_vector_ || ix.node(n).node->annot == ir::Annot::kVector;
  }

  // swap_buffer_dims on summarised declaration b, when the program has no vector scope: its
  // check then only asks that some access names the buffer (the maybe_legal conditions aside),
  // since no access has a vectorised scope around it whose contiguity the swap could break.
  // Returns whether it decided, and the verdict in `legal`.
  bool swap_dims_verdict(int b, int64_t param, bool& legal) const {
    if (has_vector_ || b >= static_cast<int>(buffers_.size())) return false;
    legal = param >= 0 && id_of_[b] >= 0;
    return true;
  }

  // Declarations with a summary (the first 64).
  int summarised_buffers() const { return static_cast<int>(buffers_.size()); }

  // First and last top-level node using declaration b, {-1, -1} when none does, {-2, -2} when
  // not summarised (beyond 64 declarations).
  std::pair<int, int> live_range(int b) const {
    if (b >= static_cast<int>(buffers_.size())) return {-2, -2};
    return {buffers_[b].first, buffers_[b].last};
  }

  // create_temporary's verdict at scope slot `i` for declaration `b` (below 64): the check reads
  // the scope's annotation and those enclosing it, and the one index every access of the buffer
  // in the scope uses; the same functions decide here (a tested invariant).
  bool temporary_ok(int i, int b) {
    summarise_uses(i);
    const ScopeSummary& sum = scopes_[i];
    if (!sum.temporary_scope || !((sum.used >> b) & 1) || ((sum.irregular >> b) & 1)) return false;
    return inner_iterators(*first_[b], sum.depth, nullptr);
  }

  // Which buffers scope slot `i` uses, with more than one index, and the first index of each
  // (first_, for the last scope summarised). Made on demand: a mask with a memo needs few.
  void summarise_uses(int i) {
    if (first_scope_ == i) return;
    first_scope_ = i;
    ScopeSummary& sum = scopes_[i];
    const ProgramIndex::NodeInfo& info = ix_->node(ix_->scopes()[i]);
    const int nb = static_cast<int>(buffers_.size());
    first_.assign(nb, nullptr);
    sum.used = sum.irregular = 0;
    for (int s = info.site_begin; s < info.site_end; ++s) {
      const int b = decl_of_[ix_->site_buffer(s)];
      if (b < 0) continue;
      const std::vector<ir::Affine>& index = ix_->sites()[s].access->index;
      sum.used |= uint64_t{1} << b;
      if (!first_[b])
        first_[b] = &index;
      else if (*first_[b] != index)
        sum.irregular |= uint64_t{1} << b;
    }
  }

  // A kind located at a scope, at scope slot `scope_slot`. Inlined into the mask's loops: it
  // runs once per candidate.
  [[gnu::always_inline]] bool maybe_legal_at_scope(Kind k, int scope_slot, int64_t param) const {
    const ir::Node* s = scopes_[scope_slot].node;
    struct {
      int64_t param;
    } a{param};
    constexpr ir::Annot kNone = ir::Annot::kNone;
    switch (k) {
      case Kind::kTileScope:
        return s->annot == kNone && a.param > 1 && a.param < s->extent && s->extent % a.param == 0;
      case Kind::kUnroll:
        return s->annot == kNone && a.param > 1 && a.param <= kMaxUnroll && a.param <= s->extent &&
               s->extent % a.param == 0;
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
        const int next = ix_->node(ix_->scopes()[scope_slot]).next;
        if (next < 0) return false;
        const ir::Node* t = ix_->node(next).node;
        return t->is_scope && t->extent == s->extent && t->annot == s->annot;
      }
      case Kind::kParallelize:
        return s->annot == kNone && s->extent > 1 && !scopes_[scope_slot].near_parallel;
      default:
        return true;
    }
  }

  // A kind located at a node (`node`: its node index) or at buffers (`b`, `b2`: declaration
  // indices); the unused locations are -1.
  [[gnu::always_inline]] bool maybe_legal(Kind k, int node, int b, int b2, int64_t param) {
    struct {
      int64_t param;
    } a{param};
    switch (k) {
      case Kind::kMoveStatement:
        return ix_->node(node).next >= 0;
      case Kind::kHoist: {
        // A plain store, first or last in a scope, none of whose accesses uses that scope's
        // iterator or a deeper one.
        const ProgramIndex::NodeInfo& n = ix_->node(node);
        if (n.node->is_scope || n.parent < 0 || n.node->stmt.op != ir::Reduce::kNone) return false;
        if (ix_->node(n.parent).first_child != node && n.next >= 0) return false;
        const int d = static_cast<int>(ix_->path(node).size()) - 2;
        for (const AccessSite& x : ix_->sites(n.site_begin, n.site_end))
          for (const ir::Affine& f : x.access->index)
            if (f.max_depth() >= d) return false;
        return true;
      }
      case Kind::kShrinkBuffer: {
        if (b < 0 || b >= static_cast<int>(buffers_.size())) return true;
        const ir::BufferDecl& d = p_->buffers[b];
        return d.role == ir::Role::kTemp && a.param >= 0 &&
               a.param < static_cast<int64_t>(d.shape.size()) && dim_ok(b)[a.param];
      }
      case Kind::kInlineTemporary: {
        // A temporary without initial value written by exactly one plain store.
        if (b < 0 || b >= static_cast<int>(buffers_.size())) return true;
        const ir::BufferDecl& d = p_->buffers[b];
        return d.role == ir::Role::kTemp && !d.init && buffers_[b].writers == 1 && !buffers_[b].reduced;
      }
      case Kind::kSwapBufferDims: {
        if (b < 0) return true;
        const ir::BufferDecl& d = p_->buffers[b];
        return d.role != ir::Role::kOutput && a.param + 1 < static_cast<int64_t>(d.shape.size());
      }
      case Kind::kReuseBuffers: {
        const int bx = b, by = b2;
        if (bx < 0 || by < 0 || bx >= static_cast<int>(buffers_.size()) || by >= static_cast<int>(buffers_.size()))
          return true;
        const ir::BufferDecl& x = p_->buffers[bx];
        const ir::BufferDecl& y = p_->buffers[by];
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
    const AccessSite& x = ix_->sites()[si];
    BufferSummary& bs = buffers_[b];
    if (x.write) {
      ++bs.writers;
      bs.reduced = bs.reduced || x.reduction;
    }
    const int node = ix_->site_node(si);
    const int top = ix_->node(node).top;
    if (bs.first < 0) bs.first = top;
    bs.last = top;
  }

  // Per dimension of declaration b: every access indexes it with one same iterator {k}
  // (shrink_buffer's prefilter). Made on first use, from b's sites in order.
  const std::vector<bool>& dim_ok(int b) {
    BufferSummary& bs = buffers_[b];
    if (bs.dims_done) return bs.dim_ok;
    bs.dims_done = true;
    const size_t rank = p_->buffers[b].shape.size();
    bs.dim_ok.assign(rank, true);
    std::vector<int> depth(rank, -1);  // the k of dimension d's {k}, -1 before the first access
    if (id_of_[b] >= 0) {
      for (int si : ix_->buffer_sites(id_of_[b])) {
        const ir::Access& a = *ix_->sites()[si].access;
        for (size_t d = 0; d < rank && d < a.index.size(); ++d) {
          const ir::Affine& ix = a.index[d];
          int k = ix.max_depth();
          bool single = k >= 0 && ix.constant == 0 && ix.coeff(k) == 1;
          for (int j = 0; single && j < k; ++j) single = ix.coeff(j) == 0;
          if (!single || (depth[d] >= 0 && depth[d] != k))
            bs.dim_ok[d] = false;
          else
            depth[d] = k;
        }
      }
    }
    return bs.dim_ok;
  }

  struct ScopeSummary {
    const ir::Node* node = nullptr;
    bool innermost = false;      ///< no child is a scope
    bool near_parallel = false;  ///< a :par scope encloses it, is it, or lies inside it
    int depth = 0;               ///< number of scopes enclosing it
    bool temporary_scope = false;  ///< plain or unrolled, in no parallel or GPU-mapped scope
    uint64_t used = 0;       ///< bit b: buffer b is accessed in the subtree
    uint64_t irregular = 0;  ///< bit b: accesses of buffer b in the subtree differ in index
  };
  struct BufferSummary {
    std::vector<bool> dim_ok;  ///< dimension is exactly one {k}, the same k everywhere
    int writers = 0;          ///< statements writing the buffer
    bool reduced = false;     ///< some writer is a reduction
    int first = -1, last = -1;  ///< top-level nodes using it
    bool dims_done = false;     ///< dim_ok is made (dim_ok())
  };
  const ProgramIndex* ix_ = nullptr;
  const ir::Program* p_ = nullptr;
  std::vector<ScopeSummary> scopes_;
  std::vector<BufferSummary> buffers_;
  std::vector<int> decl_of_;  ///< buffer id (ProgramIndex) -> declaration index, -1 beyond 64
  std::vector<int> id_of_;    ///< declaration index -> buffer id, -1 when no site names it
  bool has_vector_ = false;   ///< some scope is :vec
  /// summarise_uses: per buffer, the first index seen in scope slot first_scope_'s subtree
  std::vector<const std::vector<ir::Affine>*> first_;
  int first_scope_ = -1;
  std::vector<char> parallel_inside_, parallel_above_, shared_above_;  ///< reset's scratch
};

// What MaskMemo remembers of one node.
struct NodeVerdicts {
  ir::NodePtr node;              ///< held: its address stays this node's while remembered
  uint32_t seen = 0;             ///< the last mask that met it
  bool pinned = false;           ///< kept while unseen (MaskMemo::pin)
  std::vector<int64_t> context;  ///< (extent, annot) of each enclosing scope, innermost first
  bool scope_done = false;
  uint16_t bits[kNumKinds] = {};  ///< scope kinds: bit i = the kind's i-th parameter is legal
  ir::NodePtr next;               ///< the next sibling join_scopes and move_statement saw
  bool join_done = false, join = false, move_done = false, move = false;
  ir::NodePtr parent;  ///< the parent hoist saw, and this node's index in it
  int index = -1;
  bool hoist_done = false, hoist = false;
  /// create_temporary: bit b = decided / legal for the memo's b-th buffer name (b < 64)
  uint64_t temp_known = 0, temp_ok = 0;
};

// What MaskMemo remembers of one buffer's shrink_buffer, inline_temporary and swap_buffer_dims.
struct BufferVerdicts {
  uint32_t seen = 0;  ///< the last mask that met it
  /// What the checks read of the declaration they saw.
  struct Decl {
    std::string name;
    ir::Role role = ir::Role::kTemp;
    ir::DType dtype = ir::DType::kF32;
    std::vector<int64_t> shape;
    std::optional<double> init;
    void assign(const ir::BufferDecl& d) {
      name = d.name;
      role = d.role;
      dtype = d.dtype;
      shape = d.shape;
      init = d.init;
    }
  } decl;
  std::vector<ir::NodePtr> tops;  ///< the top-level nodes from its first use to its last
  uint16_t bits[kNumKinds] = {};  ///< bit i = the kind's i-th parameter is legal
};

// What those checks read of a declaration.
bool same_decl(const BufferVerdicts::Decl& x, const ir::BufferDecl& y) {
  return x.role == y.role && x.dtype == y.dtype && x.shape == y.shape && x.init == y.init;
}

}  // namespace

struct MaskMemo::Impl {
  std::unordered_map<const ir::Node*, NodeVerdicts> nodes;
  std::vector<BufferVerdicts> buffers;
  std::vector<std::string> names;  ///< the buffer names (first 64) temp_known/temp_ok refer to
  uint32_t epoch = 0;  ///< masks made
  const FlatActionSpace* space = nullptr;  ///< the space whose verdicts it holds
  uint64_t hits = 0, misses = 0;
  std::unique_ptr<ProgramIndex> index;   ///< rebuilt for each mask, keeping its storage
  std::unique_ptr<Prefilter> prefilter;  ///< the same
};

MaskMemo::MaskMemo() : impl_(std::make_unique<Impl>()) {}
MaskMemo::~MaskMemo() = default;
MaskMemo::MaskMemo(MaskMemo&&) noexcept = default;
MaskMemo& MaskMemo::operator=(MaskMemo&&) noexcept = default;
void MaskMemo::clear() {
  impl_->nodes.clear();
  impl_->buffers.clear();
  impl_->names.clear();
}
size_t MaskMemo::size() const { return impl_->nodes.size() + impl_->buffers.size(); }
uint64_t MaskMemo::hits() const { return impl_->hits; }
uint64_t MaskMemo::misses() const { return impl_->misses; }
void MaskMemo::pin() {
  for (auto& [node, v] : impl_->nodes) v.pinned = v.seen == impl_->epoch;
}

std::vector<uint8_t> FlatActionSpace::mask(const ir::Program& p, MaskMemo* memo) const {
  // Room for one more entry: Env appends the stop action without reallocating.
  std::vector<uint8_t> m;
  m.reserve(size_ + 1);
  m.resize(size_, 0);
  MaskMemo::Impl* mem = memo ? memo->impl_.get() : nullptr;
  std::optional<ProgramIndex> own;
  if (mem && mem->index)
    mem->index->rebuild(p);
  else if (mem)
    mem->index = std::make_unique<ProgramIndex>(p);
  else
    own.emplace(p);
  ProgramIndex& ix = mem ? *mem->index : *own;
  const int nb = std::min<int>(config_.max_buffers, static_cast<int>(p.buffers.size()));
  const int ns = std::min<int>(config_.max_scopes, static_cast<int>(ix.scopes().size()));
  const int nn = std::min<int>(config_.max_nodes, ix.size());
  std::optional<Prefilter> own_pre;
  if (mem && mem->prefilter)
    mem->prefilter->reset(ix, ns);
  else if (mem)
    mem->prefilter = std::make_unique<Prefilter>(ix, ns);
  else
    own_pre.emplace(ix, ns);
  Prefilter& pre = mem ? *mem->prefilter : *own_pre;
  if (mem) {
    // Verdict bits follow this space's parameter lists: a memo used by another space starts over.
    if (mem->space != this) {
      memo->clear();
      mem->space = this;
    }
    ++mem->epoch;
    // create_temporary's bits follow the buffers' positions: when declarations were removed or
    // reordered, move each remembered bit to its name's new position (appended ones are new).
    const size_t n = std::min<size_t>(p.buffers.size(), 64);
    bool same = mem->names.size() <= n;
    for (size_t b = 0; same && b < mem->names.size(); ++b)
      same = same_name(mem->names[b], p.buffers[b].name);
    if (!same) {
      std::vector<int> from(n, -1);  // new position -> old position
      for (size_t b = 0; b < n; ++b)
        for (size_t o = 0; o < mem->names.size(); ++o)
          if (same_name(mem->names[o], p.buffers[b].name)) from[b] = static_cast<int>(o);
      for (auto& [node, v] : mem->nodes) {
        uint64_t known = 0, ok = 0;
        for (size_t b = 0; b < n; ++b) {
          if (from[b] < 0 || !((v.temp_known >> from[b]) & 1)) continue;
          known |= uint64_t{1} << b;
          ok |= ((v.temp_ok >> from[b]) & 1) << b;
        }
        v.temp_known = known;
        v.temp_ok = ok;
      }
    }
    if (!same || mem->names.size() != n) {
      mem->names.resize(n);
      for (size_t b = 0; b < n; ++b) mem->names[b] = p.buffers[b].name;
    }
  }

  // Sets out[i] for every set bit i (the mask starts zeroed: only legal entries are written).
  auto set_legal = [](uint8_t* out, unsigned bits) {
    for (; bits; bits &= bits - 1) out[__builtin_ctz(bits)] = 1;
  };
  // One Action is reused (its path and names keep their storage).
  Action a;
  auto check_at = [&](Kind kind, int64_t param) {
    a.kind = kind;
    a.param = param;
    return check(p, a, target_, ix).ok();
  };
  auto locate = [&](int n) {
    const std::span<const int> path = ix.path(n);
    a.path.assign(path.begin(), path.end());
    a.buffer.clear();
    a.buffer2.clear();
    ix.set_hint(n);
  };
  // The shared pointer holding node n (its parent's child, or a top-level node).
  auto held = [&](int n) -> const ir::NodePtr& {
    const int i = ix.path(n).back();
    const int parent = ix.node(n).parent;
    return parent < 0 ? p.body[i] : ix.node(parent).node->body[i];
  };
  // The verdicts of node n: remembered when its context matches, else fresh.
  NodeVerdicts scratch;
  std::vector<int64_t> context;
  auto verdicts = [&](int n) -> NodeVerdicts& {
    context.clear();
    for (int e = ix.node(n).parent; e >= 0; e = ix.node(e).parent) {
      context.push_back(ix.node(e).node->extent);
      context.push_back(static_cast<int64_t>(ix.node(e).node->annot));
    }
    NodeVerdicts* v = &scratch;
    if (mem) {
      v = &mem->nodes[ix.node(n).node];
      v->seen = mem->epoch;
      if (v->node && v->context == context) {
        ++mem->hits;
        return *v;
      }
      ++mem->misses;
    }
    *v = NodeVerdicts{};
    if (mem) {  // without a memo the verdicts live for this node only: nothing to hold
      v->seen = mem->epoch;
      v->node = held(n);
      v->context.assign(context.begin(), context.end());
    }
    return *v;
  };
  auto sync_next = [&](NodeVerdicts& v, int n) {
    if (!mem) return;  // fresh verdicts: nothing decided yet
    const int next = ix.node(n).next;
    const ir::Node* now = next >= 0 ? ix.node(next).node : nullptr;
    if (v.next.get() == now) return;
    v.next = next >= 0 ? held(next) : nullptr;
    v.join_done = v.move_done = false;
  };

  // Scopes: every scope kind, and create_temporary for each buffer.
  static constexpr Kind kScopeKinds[] = {Kind::kTileScope,  Kind::kJoinNested, Kind::kSwapScopes,
                                         Kind::kSplitScope, Kind::kVectorize,  Kind::kUnroll,
                                         Kind::kParallelize};
  const int ct = static_cast<int>(Kind::kCreateTemporary);
  for (int s = 0; s < ns; ++s) {
    const int n = ix.scopes()[s];
    NodeVerdicts& v = verdicts(n);
    bool located = false;
    auto at = [&] {
      if (!located) locate(n);
      located = true;
    };
    if (!v.scope_done) {
      for (const Kind kind : kScopeKinds) {
        const int k = static_cast<int>(kind);
        const std::vector<int64_t>& params = params_[k];
        uint16_t bits = 0;
        for (int pi = 0; pi < static_cast<int>(params.size()); ++pi) {
          if (!pre.maybe_legal_at_scope(kind, s, params[pi])) continue;
          if (Prefilter::decides(kind)) {
            bits |= uint16_t{1} << pi;
            continue;
          }
          at();
          if (check_at(kind, params[pi])) bits |= uint16_t{1} << pi;
        }
        v.bits[k] = bits;
      }
      v.scope_done = true;
    }
    sync_next(v, n);
    if (!v.join_done) {
      v.join = pre.maybe_legal_at_scope(Kind::kJoinScopes, s, 0) &&
               (at(), check_at(Kind::kJoinScopes, 0));
      v.join_done = true;
    }
    for (const Kind kind : kScopeKinds) {
      const int k = static_cast<int>(kind);
      const int np = static_cast<int>(params_[k].size());
      set_legal(m.data() + offsets_[k] + s * np, v.bits[k]);
    }
    m[offsets_[static_cast<int>(Kind::kJoinScopes)] + s] = v.join;
    // create_temporary, by buffer position in the memo's name list: decide the buffers not
    // yet known (the first 64 from the scope summary), then set the legal ones.
    uint8_t* out = m.data() + offsets_[ct] + s * config_.max_buffers;
    const int known_limit = std::min(nb, pre.summarised_buffers());
    const uint64_t all = known_limit >= 64 ? ~uint64_t{0} : (uint64_t{1} << known_limit) - 1;
    for (uint64_t need = all & ~v.temp_known; need; need &= need - 1) {
      const int b = __builtin_ctzll(need);
      if (pre.temporary_ok(s, b)) v.temp_ok |= uint64_t{1} << b;
    }
    v.temp_known |= all;
    for (uint64_t ok = v.temp_ok & all; ok; ok &= ok - 1) out[__builtin_ctzll(ok)] = 1;
    for (int b = known_limit; b < nb; ++b) {
      at();
      a.buffer = p.buffers[b].name;
      out[b] = check_at(Kind::kCreateTemporary, 0);
      a.buffer.clear();
    }
  }

  // Nodes: move_statement (next sibling) and hoist (parent).
  for (int n = 0; n < nn; ++n) {
    NodeVerdicts& v = verdicts(n);
    bool located = false;
    auto at = [&] {
      if (!located) locate(n);
      located = true;
    };
    sync_next(v, n);
    if (!v.move_done) {
      v.move = pre.maybe_legal(Kind::kMoveStatement, n, -1, -1, 0) &&
               (at(), check_at(Kind::kMoveStatement, 0));
      v.move_done = true;
    }
    const int parent = ix.node(n).parent;
    const ir::Node* parent_now = parent >= 0 ? ix.node(parent).node : nullptr;
    const int index = ix.path(n).back();
    if (mem && (v.parent.get() != parent_now || v.index != index)) {
      v.parent = parent >= 0 ? held(parent) : nullptr;
      v.index = index;
      v.hoist_done = false;
    }
    if (!v.hoist_done) {
      v.hoist = pre.maybe_legal(Kind::kHoist, n, -1, -1, 0) && (at(), check_at(Kind::kHoist, 0));
      v.hoist_done = true;
    }
    m[offsets_[static_cast<int>(Kind::kMoveStatement)] + n] = v.move;
    m[offsets_[static_cast<int>(Kind::kHoist)] + n] = v.hoist;
  }

  // Buffers: shrink_buffer, inline_temporary and swap_buffer_dims read the buffer's declaration
  // and the top-level nodes from its first use to its last (where they lie does not matter);
  // reuse_buffers compares two buffers' live ranges and is checked every time.
  static constexpr Kind kBufferKinds[] = {Kind::kShrinkBuffer, Kind::kInlineTemporary,
                                          Kind::kSwapBufferDims};
  for (int b = 0; b < nb; ++b) {
    const ir::BufferDecl& decl = p.buffers[b];
    const auto [first, last] = pre.live_range(b);
    BufferVerdicts scratch_buffer;
    BufferVerdicts* v = &scratch_buffer;
    bool known = false;
    if (mem && first > -2) {
      auto it =
          std::find_if(mem->buffers.begin(), mem->buffers.end(),
                       [&](const BufferVerdicts& x) { return same_name(x.decl.name, decl.name); });
      if (it == mem->buffers.end()) it = mem->buffers.emplace(mem->buffers.end());
      v = &*it;
      v->seen = mem->epoch;
      known = v->decl.name == decl.name && same_decl(v->decl, decl) &&
              static_cast<int>(v->tops.size()) == (first < 0 ? 0 : last - first + 1);
      for (int t = 0; known && t < static_cast<int>(v->tops.size()); ++t)
        known = v->tops[t] == p.body[first + t];
      ++(known ? mem->hits : mem->misses);
    }
    if (!known) {
      if (mem) {
        v->decl.assign(decl);
        v->tops.clear();
        if (first >= 0) v->tops.assign(p.body.begin() + first, p.body.begin() + last + 1);
      }
      a.path.clear();
      a.buffer = decl.name;
      a.buffer2.clear();
      for (const Kind kind : kBufferKinds) {
        const int k = static_cast<int>(kind);
        const std::vector<int64_t>& params = params_[k];
        uint16_t bits = 0;
        for (int pi = 0; pi < static_cast<int>(params.size()); ++pi) {
          if (!pre.maybe_legal(kind, -1, b, -1, params[pi])) continue;
          bool legal = false;
          if (!(kind == Kind::kSwapBufferDims && pre.swap_dims_verdict(b, params[pi], legal)))
            legal = check_at(kind, params[pi]);
          if (legal) bits |= uint16_t{1} << pi;
        }
        v->bits[k] = bits;
      }
    }
    for (const Kind kind : kBufferKinds) {
      const int k = static_cast<int>(kind);
      const int np = static_cast<int>(params_[k].size());
      set_legal(m.data() + offsets_[k] + b * np, v->bits[k]);
    }
  }
  const int reuse = static_cast<int>(Kind::kReuseBuffers);
  a.path.clear();
  for (int i = 0; i < nb; ++i) {
    // maybe_legal's first condition, once per row: only a temporary can take another's storage.
    if (i < pre.summarised_buffers() && p.buffers[i].role != ir::Role::kTemp) continue;
    for (int j = i + 1; j < nb; ++j) {
      if (!pre.maybe_legal(Kind::kReuseBuffers, -1, i, j, 0)) continue;
      a.buffer = p.buffers[i].name;
      a.buffer2 = p.buffers[j].name;
      if (check_at(Kind::kReuseBuffers, 0))
        m[offsets_[reuse] + slot_of_pair(i, j, config_.max_buffers)] = 1;
    }
  }
  // Keep what this program has, and the pinned one's nodes: the next program shares most of it
  // (nothing else is held).
  if (mem) {
    std::erase_if(mem->nodes,
                  [&](const auto& e) { return e.second.seen != mem->epoch && !e.second.pinned; });
    std::erase_if(mem->buffers, [&](const BufferVerdicts& b) { return b.seen != mem->epoch; });
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
