#include "transforms/mask_summary.h"

#include <algorithm>

namespace perfdojo::transforms {

void MaskSummary::reset(const ProgramIndex& ix, int max_scopes) {
  ix_ = &ix;
  p_ = &ix.program();
  const ir::Program& p = *p_;
  const size_t nb = std::min<size_t>(p.buffers.size(), 64);
  for (auto& b : buffers_) b = BufferSummary{std::move(b.dim_ok)};
  buffers_.resize(nb);
  scopes_.clear();
  decl_of_.clear();
  uses_slot_ = -1;
  const int ns = std::min<int>(max_scopes, static_cast<int>(ix.scopes().size()));
  // A :par scope in the subtree: children come after their parent in pre-order.
  parallel_inside_.assign(ix.size(), 0);
  for (int n = ix.size() - 1; n >= 0; --n) {
    const ProgramIndex::NodeInfo& info = ix.node(n);
    if (info.node->annot == ir::Annot::kParallel && info.node->is_scope) parallel_inside_[n] = 1;
    if (parallel_inside_[n] && info.parent >= 0) parallel_inside_[info.parent] = 1;
  }
  // Of the scopes enclosing each node: a :par one, one sharing storage between iterations.
  // A parent's flags are known before its children's.
  parallel_above_.assign(ix.size(), 0);
  shared_above_.assign(ix.size(), 0);
  for (int n = 0; n < ix.size(); ++n) {
    const int e = ix.node(n).parent;
    if (e < 0) continue;
    const ir::Annot annot = ix.node(e).node->annot;
    parallel_above_[n] = parallel_above_[e] || annot == ir::Annot::kParallel;
    shared_above_[n] = shared_above_[e] || shares_storage(annot);
  }
  for (int i = 0; i < ns; ++i) {
    const int n = ix.scopes()[i];
    ScopeSummary sum;
    sum.node = ix.node(n).node;
    sum.innermost = true;
    for (const auto& c : sum.node->body) sum.innermost = sum.innermost && !c->is_scope;
    sum.near_parallel = parallel_inside_[n] || parallel_above_[n];
    sum.shared_above = shared_above_[n];
    sum.depth = static_cast<int>(ix.path(n).size()) - 1;
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

void MaskSummary::site(int si, int b) {
  const AccessSite& x = ix_->sites()[si];
  BufferSummary& bs = buffers_[b];
  if (x.write) {
    ++bs.writers;
    bs.reduced = bs.reduced || x.reduction;
  }
  const int top = ix_->node(ix_->site_node(si)).top;
  if (bs.first < 0) bs.first = top;
  bs.last = top;
}

const std::vector<bool>& MaskSummary::single_iterator_dims(int b) {
  BufferSummary& bs = buffers_[b];
  if (bs.dims_done) return bs.dim_ok;
  bs.dims_done = true;
  const size_t rank = p_->buffers[b].shape.size();
  bs.dim_ok.assign(rank, true);
  std::vector<int> depth(rank, -1);  // the k of dimension d's {k}, -1 before the first access
  if (id_of_[b] < 0) return bs.dim_ok;
  for (int si : ix_->buffer_sites(id_of_[b])) {
    const ir::Access& a = *ix_->sites()[si].access;
    for (size_t d = 0; d < rank && d < a.index.size(); ++d) {
      const ir::Affine& f = a.index[d];
      const int k = f.max_depth();
      bool single = k >= 0 && f.constant == 0 && f.coeff(k) == 1;
      for (int j = 0; single && j < k; ++j) single = f.coeff(j) == 0;
      if (!single || (depth[d] >= 0 && depth[d] != k))
        bs.dim_ok[d] = false;
      else
        depth[d] = k;
    }
  }
  return bs.dim_ok;
}

const MaskSummary::Uses& MaskSummary::make_uses(int s) {
  uses_slot_ = s;
  const ProgramIndex::NodeInfo& info = ix_->node(ix_->scopes()[s]);
  first_.assign(buffers_.size(), nullptr);
  uses_ = {};
  for (int si = info.site_begin; si < info.site_end; ++si) {
    const int b = decl_of_[ix_->site_buffer(si)];
    if (b < 0) continue;
    const std::vector<ir::Affine>& index = ix_->sites()[si].access->index;
    uses_.used |= uint64_t{1} << b;
    if (ix_->sites()[si].write) uses_.written |= uint64_t{1} << b;
    if (!first_[b])
      first_[b] = &index;
    else if (*first_[b] != index)
      uses_.irregular |= uint64_t{1} << b;
  }
  return uses_;
}

}  // namespace perfdojo::transforms
