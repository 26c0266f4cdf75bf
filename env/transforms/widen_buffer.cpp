#include "transforms/widen_buffer.h"

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// Whether every statement writing `d` stores one load of a buffer of d's type unchanged; false
// too when none writes it.
bool written_by_copies(const ir::Program& p, const ir::BufferDecl& d, const ProgramIndex* index) {
  int writers = 0;
  auto copy = [&](const AccessSite& s) {
    if (!s.write) return true;
    ++writers;
    if (s.reduction || s.stmt->op != ir::Reduce::kNone) return false;
    const ir::Expr& v = *s.stmt->rhs;
    if (v.kind != ir::ExprKind::kLoad) return false;
    const ir::BufferDecl* src = find_decl(p, v.access.buffer);
    return src && src->dtype == d.dtype;
  };
  if (index) {
    for (int s : index->buffer_sites(d.name))
      if (!copy(index->sites()[s])) return false;
    return writers > 0;
  }
  const AccessSites sites = collect_accesses(p.body, {});
  for (const auto& s : sites)
    if (s.access->buffer == d.name && !copy(s)) return false;
  return writers > 0;
}

}  // namespace

Legality check_widen_buffer(const ir::Program& p, const Action& a, const Target&,
                            const ProgramIndex* index) {
  const ir::BufferDecl* d = find_decl(p, a.buffer);
  if (!d) return {Reason::kNoSuchLocation, a.buffer, {}};
  if (d->role != ir::Role::kTemp) return {Reason::kNotATemporary, a.buffer, {}};
  if (!ir::is_narrow(d->dtype)) return {Reason::kNothingToDo, a.buffer, {}};
  if (d->init) return {Reason::kHasInitialValue, a.buffer, {}};
  if (!written_by_copies(p, *d, index)) return {Reason::kIrregularAccess, a.buffer, {}};
  return {};
}

Precheck precheck_widen_buffer(MaskSummary& sum, const MaskSite& at,
                               std::span<const int64_t> params) {
  // A narrow temporary without an initial value, written and never reduced into; what the
  // writers store is left to the full check.
  if (!sum.summarised(at.buffer)) return check_all(params);
  const ir::BufferDecl& d = sum.program().buffers[at.buffer];
  if (d.role != ir::Role::kTemp || !ir::is_narrow(d.dtype) || d.init ||
      sum.writers(at.buffer) == 0 || sum.reduced(at.buffer))
    return {};
  return check_all(params);
}

ir::Program apply_widen_buffer(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_widen_buffer, p, a, t);
  ir::Program q = p;
  for (auto& b : q.buffers)
    if (b.name == a.buffer) b.dtype = ir::compute_type(b.dtype);
  return q;
}

}  // namespace perfdojo::transforms
