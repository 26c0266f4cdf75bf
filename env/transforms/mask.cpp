// The flat mask: every registry row's precheck over a summary of the program, its full check
// where the precheck leaves the verdict open, and a memo of verdicts keyed by the immutable
// nodes and buffers they read. Nothing here knows a particular kind: what a kind may assume
// and how long its verdicts last come from its row (precheck, location, Reads).
#include <algorithm>
#include <array>
#include <optional>

#include "transforms/analysis.h"
#include "transforms/flat_space.h"
#include "transforms/mask_summary.h"
#include "util/node_memo.h"

namespace perfdojo::transforms {
namespace {

constexpr LocKind kLocOf[] = {
#define PERFDOJO_X(e, n, l, p, r) LocKind::l,
    PERFDOJO_TRANSFORM_KINDS(PERFDOJO_X)
#undef PERFDOJO_X
};
constexpr Reads kReadsOf[] = {
#define PERFDOJO_X(e, n, l, p, r) Reads::r,
    PERFDOJO_TRANSFORM_KINDS(PERFDOJO_X)
#undef PERFDOJO_X
};
constexpr ParamKind kParamOf[] = {
#define PERFDOJO_X(e, n, l, p, r) ParamKind::p,
    PERFDOJO_TRANSFORM_KINDS(PERFDOJO_X)
#undef PERFDOJO_X
};

// The kinds at one location kind, in registry order.
struct KindList {
  int n = 0;
  std::array<Kind, kNumKinds> kinds{};
  constexpr const Kind* begin() const { return kinds.data(); }
  constexpr const Kind* end() const { return kinds.data() + n; }
};
constexpr KindList kinds_at(LocKind l) {
  KindList out;
  for (int k = 0; k < kNumKinds; ++k)
    if (kLocOf[k] == l) out.kinds[out.n++] = static_cast<Kind>(k);
  return out;
}
// Bit k set for every kind whose check reads `r`.
constexpr uint32_t kinds_reading(Reads r) {
  uint32_t bits = 0;
  for (int k = 0; k < kNumKinds; ++k)
    if (kReadsOf[k] == r) bits |= uint32_t{1} << k;
  return bits;
}

constexpr KindList kScopeKinds = kinds_at(LocKind::kScope);
constexpr KindList kNodeKinds = kinds_at(LocKind::kNode);
constexpr KindList kBufferKinds = kinds_at(LocKind::kBuffer);
constexpr KindList kPairKinds = kinds_at(LocKind::kBufferPair);
constexpr KindList kScopeBufferKinds = kinds_at(LocKind::kScopeBuffer);
constexpr uint32_t kNextKinds = kinds_reading(Reads::kNextSibling);
constexpr uint32_t kParentKinds = kinds_reading(Reads::kParent);
constexpr uint32_t bits_of(const KindList& kinds) {
  uint32_t bits = 0;
  for (Kind k : kinds) bits |= uint32_t{1} << static_cast<int>(k);
  return bits;
}
// The kinds decided at a scope slot, and at a node slot.
constexpr uint32_t kAtScope =
    bits_of(kinds_at(LocKind::kScope)) | bits_of(kinds_at(LocKind::kScopeBuffer));
constexpr uint32_t kAtNode = bits_of(kinds_at(LocKind::kNode));
static_assert(kNumKinds <= 32, "NodeVerdicts::done holds one bit per kind");
static_assert(
    [] {
      for (const KindList* list : {&kScopeBufferKinds, &kPairKinds})
        for (Kind k : *list)
          if (kParamOf[static_cast<int>(k)] != ParamKind::kNone) return false;
      return true;
    }(),
    "scope + buffer and pair kinds are asked a row at a time, a bit per buffer: no parameter");

// What MaskMemo remembers of one node (a NodeMemo entry, which holds the node): the verdicts
// of the kinds located at it.
struct NodeVerdicts {
  std::vector<int64_t> context;   ///< (extent, annot) of each enclosing scope, innermost first
  uint32_t done = 0;              ///< bit k: bits[k] is decided
  uint32_t bits[kNumKinds] = {};  ///< bit i = the kind's i-th parameter is legal
  ir::NodePtr next;               ///< the next sibling the kNextSibling kinds saw
  ir::NodePtr parent;             ///< the parent the kParent kinds saw, and the node's index
  int index = -1;
  /// Scope-buffer kinds, by position in kScopeBufferKinds: bit b = decided / legal for the
  /// memo's b-th buffer name (b < 64).
  std::array<uint64_t, kScopeBufferKinds.n> pair_known{}, pair_ok{};
};

// What MaskMemo remembers of one buffer: the verdicts of the kLiveRange kinds located at it.
struct BufferVerdicts {
  uint32_t seen = 0;  ///< the last mask that met it
  /// What the checks read of the declaration they saw.
  struct Decl {
    std::string name;
    ir::Role role = ir::Role::kTemp;
    ir::DType dtype = ir::DType::kF32;
    std::vector<int64_t> shape;
    std::optional<double> init;
    bool stream = false;
    void assign(const ir::BufferDecl& d) {
      name = d.name;
      role = d.role;
      dtype = d.dtype;
      shape = d.shape;
      init = d.init;
      stream = d.stream;
    }
  } decl;
  std::vector<ir::NodePtr> tops;  ///< the top-level nodes from its first use to its last
  uint32_t bits[kNumKinds] = {};  ///< bit i = the kind's i-th parameter is legal
};

bool same_decl(const BufferVerdicts::Decl& x, const ir::BufferDecl& y) {
  return x.role == y.role && x.dtype == y.dtype && x.shape == y.shape && x.init == y.init &&
         x.stream == y.stream;
}

// Sets out[i] for every set bit i (the mask starts zeroed: only legal entries are written).
inline void set_legal(uint8_t* out, unsigned bits) {
  for (; bits; bits &= bits - 1) out[__builtin_ctz(bits)] = 1;
}

}  // namespace

struct MaskMemo::Impl {
  NodeMemo<NodeVerdicts, uint32_t> nodes;  ///< its epoch counts the masks made
  std::vector<BufferVerdicts> buffers;
  std::vector<std::string> names;  ///< the buffer names (first 64) pair_known/pair_ok refer to
  const FlatActionSpace* space = nullptr;  ///< the space whose verdicts it holds
  std::unique_ptr<ProgramIndex> index;     ///< rebuilt for each mask, keeping its storage
  std::unique_ptr<MaskSummary> summary;    ///< the same

  // Moves each remembered scope-buffer bit to its buffer name's new position when
  // declarations were removed or reordered (appended ones are new).
  void follow_names(const ir::Program& p) {
    const size_t n = std::min<size_t>(p.buffers.size(), 64);
    bool same = names.size() <= n;
    for (size_t b = 0; same && b < names.size(); ++b) same = same_name(names[b], p.buffers[b].name);
    if (!same) {
      std::vector<int> from(n, -1);  // new position -> old position
      for (size_t b = 0; b < n; ++b)
        for (size_t o = 0; o < names.size(); ++o)
          if (same_name(names[o], p.buffers[b].name)) from[b] = static_cast<int>(o);
      for (auto& [node, e] : nodes.entries()) {
        NodeVerdicts& v = e.value;
        for (int j = 0; j < kScopeBufferKinds.n; ++j) {
          uint64_t known = 0, ok = 0;
          for (size_t b = 0; b < n; ++b) {
            if (from[b] < 0 || !((v.pair_known[j] >> from[b]) & 1)) continue;
            known |= uint64_t{1} << b;
            ok |= ((v.pair_ok[j] >> from[b]) & 1) << b;
          }
          v.pair_known[j] = known;
          v.pair_ok[j] = ok;
        }
      }
    }
    if (!same || names.size() != n) {
      names.resize(n);
      for (size_t b = 0; b < n; ++b) names[b] = p.buffers[b].name;
    }
  }
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
uint64_t MaskMemo::hits() const { return impl_->nodes.hits(); }
uint64_t MaskMemo::misses() const { return impl_->nodes.misses(); }
void MaskMemo::pin() { impl_->nodes.pin(); }

namespace {

// One mask of one program: the checks it runs, with or without a memo.
class MaskPass {
 public:
  MaskPass(const FlatActionSpace& space, const ir::Program& p, MaskMemo::Impl* mem,
           std::vector<uint8_t>& out, bool bounded = false)
      : space_(space), p_(p), mem_(mem), m_(out), bounded_(bounded) {
    if (mem_) {
      if (mem_->index)
        mem_->index->rebuild(p);
      else
        mem_->index = std::make_unique<ProgramIndex>(p);
    } else {
      own_index_.emplace(p);
    }
    ix_ = mem_ ? mem_->index.get() : &*own_index_;
    const FlatSpaceConfig& c = space.config();
    nb_ = std::min<int>(c.max_buffers, static_cast<int>(p.buffers.size()));
    ns_ = std::min<int>(c.max_scopes, static_cast<int>(ix_->scopes().size()));
    nn_ = std::min<int>(c.max_nodes, ix_->size());
    if (mem_ && mem_->summary)
      mem_->summary->reset(*ix_, ns_);
    else if (mem_)
      mem_->summary = std::make_unique<MaskSummary>(*ix_, ns_);
    else
      own_summary_.emplace(*ix_, ns_);
    sum_ = mem_ ? mem_->summary.get() : &*own_summary_;
    if (mem_) {
      // Verdict bits follow this space's parameter lists: a memo used by another space starts
      // over.
      if (mem_->space != &space) {
        mem_->nodes.clear();
        mem_->buffers.clear();
        mem_->names.clear();
        mem_->space = &space;
      }
      mem_->nodes.begin();
      mem_->follow_names(p);
    }
  }

  void run() {
    for (int s = 0; s < ns_; ++s) scope_slot(s);
    for (int n = 0; n < nn_; ++n) node_slot(n);
    for (int b = 0; b < nb_; ++b) buffer_slot(b);
    for (Kind k : kPairKinds) pairs(k);
    // Keep what this program has, and the pinned one's nodes: the next program shares most of
    // it (nothing else is held).
    if (mem_) {
      mem_->nodes.sweep();
      const uint32_t epoch = mem_->nodes.epoch();
      std::erase_if(mem_->buffers, [&](const BufferVerdicts& b) { return b.seen != epoch; });
    }
  }

 private:
  // The legal bits of `pc`: those it decided, and those of its open ones whose full check
  // passes. `at(i)` locates the action for bit i and returns its parameter value.
  template <class At>
  uint64_t resolve(Kind k, const Precheck& pc, At&& at) {
    uint64_t bits = pc.legal;
    for (uint64_t open = pc.check & ~pc.legal; open; open &= open - 1) {
      const int i = __builtin_ctzll(open);
      a_.param = at(i);
      a_.kind = k;
      if (check(p_, a_, space_.target(), *ix_).ok()) bits |= uint64_t{1} << i;
    }
    return bits;
  }

  // The precheck's verdicts. On a program with bounded scopes its "legal" is only the kind's
  // own check's verdict, and the registry may still refuse (non_rectangular): those are left to
  // the full check; its "illegal" stands (the kind's check refuses, so the registry does).
  Precheck pre(Kind k, const MaskSite& site, std::span<const int64_t> params) {
    Precheck pc = rows_[static_cast<int>(k)].precheck(*sum_, site, params);
    if (bounded_) {
      pc.check |= pc.legal;
      pc.legal = 0;
    }
    return pc;
  }

  // The legal parameters of kind k at `site`. `locate` fills the action's location.
  template <class Locate>
  uint32_t decide(Kind k, const MaskSite& site, Locate&& locate) {
    // A factor kind's values are derived from the scope's extent, which is part of the node: a
    // remembered verdict stays true of the same node.
    ParamList derived;
    std::span<const int64_t> params = space_.params(k);
    if (param_kind(k) == ParamKind::kFactor) {
      derived = factor_values(k, ix_->node(site.node).node->extent);
      params = derived.span();
    }
    const Precheck pc = pre(k, site, params);
    return static_cast<uint32_t>(resolve(k, pc, [&](int i) {
      locate();
      return params[i];
    }));
  }

  // The action located at node n (its path), a scope or statement location; once per node.
  void locate_node(int n) {
    if (located_ == n) return;
    located_ = n;
    const std::span<const int> path = ix_->path(n);
    a_.path.assign(path.begin(), path.end());
    a_.buffer.clear();
    a_.buffer2.clear();
    ix_->set_hint(n);
  }

  // The shared pointer holding node n (its parent's child, or a top-level node).
  const ir::NodePtr& held(int n) const {
    const int i = ix_->path(n).back();
    const int parent = ix_->node(n).parent;
    return parent < 0 ? p_.body[i] : ix_->node(parent).node->body[i];
  }

  NodeVerdicts& verdicts(int n);
  void sync_neighbours(NodeVerdicts& v, int n, uint32_t kinds);
  void sync_next(NodeVerdicts& v, int n);
  void sync_parent(NodeVerdicts& v, int n);
  void scope_slot(int s);
  void node_kinds(const KindList& kinds, NodeVerdicts& v, const MaskSite& site, int slot);
  void scope_buffer_kind(int j, Kind k, int s, NodeVerdicts& v);
  void node_slot(int n);
  void buffer_slot(int b);
  void pairs(Kind k);

  const FlatActionSpace& space_;
  const TransformInfo* rows_ = registry().data();
  const ir::Program& p_;
  MaskMemo::Impl* mem_;
  std::vector<uint8_t>& m_;
  bool bounded_ = false;  ///< the program has bounded scopes: no precheck decides "legal"
  std::optional<ProgramIndex> own_index_;
  std::optional<MaskSummary> own_summary_;
  ProgramIndex* ix_ = nullptr;
  MaskSummary* sum_ = nullptr;
  int nb_ = 0, ns_ = 0, nn_ = 0;
  Action a_;              ///< reused: its path and names keep their storage
  int located_ = -1;      ///< the node a_ is located at, -1 for none
  NodeVerdicts scratch_;  ///< the verdicts of a node when there is no memo
  std::vector<int64_t> context_;
};

// The verdicts of node n: remembered when its context matches, else fresh.
NodeVerdicts& MaskPass::verdicts(int n) {
  context_.clear();
  for (int e = ix_->node(n).parent; e >= 0; e = ix_->node(e).parent) {
    context_.push_back(ix_->node(e).node->extent);
    context_.push_back(static_cast<int64_t>(ix_->node(e).node->annot));
  }
  if (!mem_) {  // without a memo the verdicts live for this node only: nothing to hold
    scratch_ = NodeVerdicts{};
    return scratch_;
  }
  auto& entry = mem_->nodes.entry(ix_->node(n).node);
  if (entry.node && entry.value.context == context_) {
    mem_->nodes.count_hit();
    return entry.value;
  }
  mem_->nodes.count_miss();
  entry.value = NodeVerdicts{};
  entry.node = held(n);
  entry.pinned = false;
  entry.value.context.assign(context_.begin(), context_.end());
  return entry.value;
}

// Forgets the verdicts of `kinds` whose check reads a neighbour that changed.
void MaskPass::sync_neighbours(NodeVerdicts& v, int n, uint32_t kinds) {
  if (!mem_) return;  // fresh verdicts: nothing decided yet
  if (kinds & kNextKinds) sync_next(v, n);
  if (kinds & kParentKinds) sync_parent(v, n);
}

void MaskPass::sync_next(NodeVerdicts& v, int n) {
  const int next = ix_->node(n).next;
  const ir::Node* next_now = next >= 0 ? ix_->node(next).node : nullptr;
  if (v.next.get() != next_now) {
    v.next = next >= 0 ? held(next) : nullptr;
    v.done &= ~kNextKinds;
  }
}

void MaskPass::sync_parent(NodeVerdicts& v, int n) {
  const int parent = ix_->node(n).parent;
  const ir::Node* parent_now = parent >= 0 ? ix_->node(parent).node : nullptr;
  const int index = ix_->path(n).back();
  if (v.parent.get() != parent_now || v.index != index) {
    v.parent = parent >= 0 ? held(parent) : nullptr;
    v.index = index;
    v.done &= ~kParentKinds;
  }
}

// Decides the `kinds` at node n that `v` does not hold yet, and marks the legal ones at `slot`.
void MaskPass::node_kinds(const KindList& kinds, NodeVerdicts& v, const MaskSite& site, int slot) {
  auto locate = [&] { locate_node(site.node); };
  for (Kind kind : kinds) {
    const int k = static_cast<int>(kind);
    if (space_.param_count(kind) == 0) continue;  // a kind the flat space leaves out
    if (!((v.done >> k) & 1)) {
      v.bits[k] = decide(kind, site, locate);
      v.done |= uint32_t{1} << k;
    }
    const int np = space_.param_count(kind);
    set_legal(m_.data() + space_.offset(kind) + slot * np, v.bits[k]);
  }
}

void MaskPass::scope_slot(int s) {
  const int n = ix_->scopes()[s];
  NodeVerdicts& v = verdicts(n);
  sync_neighbours(v, n, kAtScope);
  node_kinds(kScopeKinds, v, MaskSite{s, n, -1, -1}, s);
  for (int j = 0; j < kScopeBufferKinds.n; ++j)
    scope_buffer_kind(j, kScopeBufferKinds.kinds[j], s, v);
}

// A kind at (scope slot s, each buffer): the summarised buffers are asked as one row and
// their verdicts remembered by buffer position in the memo's name list; later buffers are
// decided one by one every time.
void MaskPass::scope_buffer_kind(int j, Kind kind, int s, NodeVerdicts& v) {
  const int n = ix_->scopes()[s];
  const std::vector<int64_t>& params = space_.params(kind);
  auto at_buffer = [&](int b) {
    locate_node(n);
    a_.buffer = p_.buffers[b].name;
    return params[0];
  };
  const int known_limit = std::min(nb_, sum_->summarised_buffers());
  const uint64_t all = low_bits(known_limit);
  if (all & ~v.pair_known[j]) {
    Precheck row = pre(kind, MaskSite{s, n, -1, -1}, params);
    row.legal &= all;
    row.check &= all;
    v.pair_ok[j] = resolve(kind, row, at_buffer);
    v.pair_known[j] = all;
  }
  uint8_t* out = m_.data() + space_.offset(kind) + s * space_.config().max_buffers;
  for (uint64_t ok = v.pair_ok[j] & all; ok; ok &= ok - 1) out[__builtin_ctzll(ok)] = 1;
  for (int b = known_limit; b < nb_; ++b)
    out[b] = decide(kind, MaskSite{s, n, b, -1}, [&] { at_buffer(b); }) != 0;
  a_.buffer.clear();
}

void MaskPass::node_slot(int n) {
  NodeVerdicts& v = verdicts(n);
  sync_neighbours(v, n, kAtNode);
  node_kinds(kNodeKinds, v, MaskSite{-1, n, -1, -1}, n);
}

// The buffer kinds at declaration b. kLiveRange kinds read the declaration and the top-level
// nodes from its first use to its last (where they lie does not matter): their verdicts are
// remembered while those are the same.
void MaskPass::buffer_slot(int b) {
  const ir::BufferDecl& decl = p_.buffers[b];
  const auto [first, last] = sum_->live_range(b);
  BufferVerdicts scratch;
  BufferVerdicts* v = &scratch;
  bool known = false;
  if (mem_ && first > -2) {
    auto it =
        std::find_if(mem_->buffers.begin(), mem_->buffers.end(),
                     [&](const BufferVerdicts& x) { return same_name(x.decl.name, decl.name); });
    if (it == mem_->buffers.end()) it = mem_->buffers.emplace(mem_->buffers.end());
    v = &*it;
    v->seen = mem_->nodes.epoch();
    known = v->decl.name == decl.name && same_decl(v->decl, decl) &&
            static_cast<int>(v->tops.size()) == (first < 0 ? 0 : last - first + 1);
    for (int t = 0; known && t < static_cast<int>(v->tops.size()); ++t)
      known = v->tops[t] == p_.body[first + t];
    if (known)
      mem_->nodes.count_hit();
    else
      mem_->nodes.count_miss();
  }
  if (!known && mem_ && v != &scratch) {
    v->decl.assign(decl);
    v->tops.clear();
    if (first >= 0) v->tops.assign(p_.body.begin() + first, p_.body.begin() + last + 1);
  }
  auto locate = [&] {
    located_ = -1;
    a_.path.clear();
    a_.buffer = decl.name;
    a_.buffer2.clear();
  };
  const MaskSite site{-1, -1, b, -1};
  for (Kind kind : kBufferKinds) {
    const int k = static_cast<int>(kind);
    const bool remembered = kReadsOf[k] == Reads::kLiveRange;
    if (!known || !remembered) v->bits[k] = decide(kind, site, locate);
    const int np = space_.param_count(kind);
    set_legal(m_.data() + space_.offset(kind) + b * np, v->bits[k]);
  }
}

// A pair kind at every pair (i, j), i < j, a row at a time; never remembered (it compares
// two live ranges).
void MaskPass::pairs(Kind kind) {
  const std::vector<int64_t>& params = space_.params(kind);
  const int limit = std::min(nb_, sum_->summarised_buffers());
  const int offset = space_.offset(kind);
  for (int i = 0; i < nb_; ++i) {
    auto at_pair = [&](int j) {
      located_ = -1;
      a_.path.clear();
      a_.buffer = p_.buffers[i].name;
      a_.buffer2 = p_.buffers[j].name;
      return params[0];
    };
    if (i < limit) {
      Precheck row = pre(kind, MaskSite{-1, -1, i, -1}, params);
      const uint64_t partners = low_bits(limit) & ~low_bits(i + 1);
      row.legal &= partners;
      row.check &= partners;
      for (uint64_t ok = resolve(kind, row, at_pair); ok; ok &= ok - 1)
        m_[offset + space_.pair_slot(i, __builtin_ctzll(ok))] = 1;
    }
    for (int j = std::max(i + 1, limit); j < nb_; ++j)
      m_[offset + space_.pair_slot(i, j)] =
          decide(kind, MaskSite{-1, -1, i, j}, [&] { at_pair(j); }) != 0;
  }
}

}  // namespace

std::vector<uint8_t> FlatActionSpace::mask(const ir::Program& p, MaskMemo* memo) const {
  // Room for one more entry: Env appends the stop action without reallocating.
  std::vector<uint8_t> m;
  m.reserve(size_ + 1);
  m.resize(size_, 0);
  // Bounded (non-rectangular) scopes: no verdict remembered (the memo's reads assume the kinds'
  // own checks) and every "legal" from the full check.
  // An indirect index gates moves as a bounded scope does (registry.cpp): the prechecks'
  // "legal" is left to the full check.
  const bool bounded = ir::any_bounded(p.body) || ir::any_indirect(p.body);
  MaskPass(*this, p, memo && !bounded ? memo->impl_.get() : nullptr, m, bounded).run();
  return m;
}

}  // namespace perfdojo::transforms
