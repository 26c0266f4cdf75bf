#include "backends/cost_model_memo.h"

#include <algorithm>
#include <span>

namespace perfdojo::backends {
namespace cost_detail {
namespace {

// Moves the indices in a nest's slices by `d` (positive: into a Flat; negative: out of one).
void shift(std::span<ScopeInfo> scopes, std::span<StmtInfo> stmts, std::span<AccInfo> accs,
           std::span<int> chains, std::span<int> kids, int& top, const Bases& d, int nest) {
  auto kid = [&](int k) { return k >= 0 ? k + d.scopes : ~(~k + d.stmts); };
  for (auto& s : scopes) {
    if (s.parent >= 0) s.parent += d.scopes;
    if (s.par >= 0) s.par += d.scopes;
    s.nest = nest;
    s.acc_begin += d.accs;
    s.acc_end += d.accs;
    s.kids_begin += d.kids;
    s.kids_end += d.kids;
  }
  for (auto& s : stmts) {
    s.chain_off += d.chains;
    s.acc_begin += d.accs;
    s.acc_end += d.accs;
    s.nest = nest;
  }
  for (auto& a : accs) {
    a.stmt += d.stmts;
    a.coef_off += d.coefs;
  }
  for (int& c : chains) c += d.scopes;
  for (int& k : kids) k = kid(k);
  top = kid(top);
}

bool same_buffer(const NestSlice::Buf& b, const ir::BufferDecl& d) {
  return b.dtype == d.dtype && b.role == d.role && b.shape == d.shape && b.name == d.name &&
         b.stream == d.stream;
}

// Appends a remembered nest as top-level node `nest`.
void append(const NestSlice& n, Flat& f, int nest) {
  const Bases b = bases_of(f);
  f.scopes.insert(f.scopes.end(), n.scopes.begin(), n.scopes.end());
  f.stmts.insert(f.stmts.end(), n.stmts.begin(), n.stmts.end());
  f.accs.insert(f.accs.end(), n.accs.begin(), n.accs.end());
  f.chains.insert(f.chains.end(), n.chains.begin(), n.chains.end());
  f.kids.insert(f.kids.end(), n.kids.begin(), n.kids.end());
  f.coefs.insert(f.coefs.end(), n.coefs.begin(), n.coefs.end());
  int top = n.top;
  shift(tail(f.scopes, b.scopes), tail(f.stmts, b.stmts), tail(f.accs, b.accs),
        tail(f.chains, b.chains), tail(f.kids, b.kids), top, b, nest);
  f.top.push_back(top);
}

}  // namespace

void memo_begin(CostMemo::Impl& memo, const CacheGeometry geo[4]) {
  const double g[4] = {geo[0].sets, geo[0].ways, geo[1].sets, geo[1].ways};
  if (!std::equal(g, g + 4, memo.geometry)) {
    memo.nests.clear();
    std::copy(g, g + 4, memo.geometry);
  }
  memo.nests.begin();
}

bool memo_append(CostMemo::Impl& memo, const ir::NodePtr& node, const ir::Program& p, Flat& f,
                 int nest) {
  const NestSlice* slice = memo.nests.find(node.get(), [&](const NestSlice& s) {
    bool valid = true;
    for (const auto& b : s.bufs)
      valid = valid && b.index < static_cast<int>(p.buffers.size()) &&
              same_buffer(b, p.buffers[b.index]);
    return valid;
  });
  if (!slice) return false;
  append(*slice, f, nest);
  return true;
}

void memo_remember(CostMemo::Impl& memo, const ir::NodePtr& node, const ir::Program& p,
                   const Flat& f, const Bases& b) {
  NestSlice* slice = &memo.nests.remember(node);
  slice->scopes.assign(f.scopes.begin() + b.scopes, f.scopes.end());
  slice->stmts.assign(f.stmts.begin() + b.stmts, f.stmts.end());
  slice->accs.assign(f.accs.begin() + b.accs, f.accs.end());
  slice->chains.assign(f.chains.begin() + b.chains, f.chains.end());
  slice->kids.assign(f.kids.begin() + b.kids, f.kids.end());
  slice->coefs.assign(f.coefs.begin() + b.coefs, f.coefs.end());
  slice->top = f.top.back();
  const Bases back{-b.scopes, -b.stmts, -b.accs, -b.chains, -b.kids, -b.coefs};
  shift(slice->scopes, slice->stmts, slice->accs, slice->chains, slice->kids, slice->top, back, 0);
  slice->bufs.clear();
  for (const auto& a : slice->accs) {
    if (std::any_of(slice->bufs.begin(), slice->bufs.end(),
                    [&](const auto& x) { return x.index == a.buf; }))
      continue;
    const ir::BufferDecl& d = p.buffers[a.buf];
    slice->bufs.push_back({a.buf, d.name, d.dtype, d.role, d.shape, d.stream});
  }
}

}  // namespace cost_detail

CostMemo::CostMemo() : impl_(std::make_unique<Impl>()) {}
CostMemo::~CostMemo() = default;
CostMemo::CostMemo(const CostMemo&) : impl_(std::make_unique<Impl>()) {}
CostMemo& CostMemo::operator=(const CostMemo&) {
  clear();
  return *this;
}
void CostMemo::clear() { impl_ = std::make_unique<Impl>(); }
size_t CostMemo::size() const { return impl_->nests.size(); }
uint64_t CostMemo::hits() const { return impl_->nests.hits(); }
uint64_t CostMemo::misses() const { return impl_->nests.misses(); }

}  // namespace perfdojo::backends
