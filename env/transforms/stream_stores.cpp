#include "transforms/stream_stores.h"

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// Whether some site of `buffer` reads it, and whether some site writes it.
struct Uses {
  bool read = false;
  bool written = false;
};

Uses uses_of(const ir::Program& p, const std::string& buffer, const ProgramIndex* index) {
  Uses u;
  auto note = [&](const AccessSite& s) {
    if (!s.write || s.reduction) u.read = true;
    if (s.write) u.written = true;
  };
  if (index) {
    for (int s : index->buffer_sites(buffer)) note(index->sites()[s]);
    return u;
  }
  const AccessSites sites = collect_accesses(p.body, {});
  for (const auto& s : sites)
    if (s.access->buffer == buffer) note(s);
  return u;
}

}  // namespace

Legality check_stream_stores(const ir::Program& p, const Action& a, const Target& t,
                             const ProgramIndex* index) {
  const ir::BufferDecl* d = find_decl(p, a.buffer);
  if (!d) return {Reason::kNoSuchLocation, a.buffer, {}};
  if (!t.stream_stores) return {Reason::kUnsupportedByTarget, a.buffer, {}};
  if (d->stream) return {Reason::kNothingToDo, a.buffer, {}};
  if (d->role == ir::Role::kInput) return {Reason::kNotWritten, a.buffer, {}};
  const Uses u = uses_of(p, d->name, index);
  if (!u.written) return {Reason::kNotWritten, a.buffer, {}};
  if (u.read) return {Reason::kReadBack, a.buffer, {}};
  return {};
}

Precheck precheck_stream_stores(MaskSummary& sum, const MaskSite& at,
                                std::span<const int64_t> params) {
  // Written, no reduction, not an input, not already streaming; the reads (and the target) are
  // left to the full check.
  if (!sum.summarised(at.buffer)) return check_all(params);
  const ir::BufferDecl& d = sum.program().buffers[at.buffer];
  if (d.role == ir::Role::kInput || d.stream || sum.writers(at.buffer) == 0 ||
      sum.reduced(at.buffer))
    return {};
  return check_all(params);
}

ir::Program apply_stream_stores(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_stream_stores, p, a, t);
  ir::Program q = p;
  for (auto& b : q.buffers)
    if (b.name == a.buffer) b.stream = true;
  return q;
}

}  // namespace perfdojo::transforms
