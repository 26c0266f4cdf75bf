#include "transforms/inline_temporary.h"

#include <algorithm>
#include <forward_list>
#include <span>

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

void loads(const ir::Expr& e, const std::string& buf, std::vector<const ir::Access*>& out) {
  if (e.kind == ir::ExprKind::kLoad && e.access.buffer == buf) out.push_back(&e.access);
  for (const auto& a : e.args) loads(*a, buf, out);
}

void written_buffers(const ir::Node& n, BufferNames& out) {
  if (!n.is_scope) {
    out.push_back(&n.stmt.lhs.buffer);
    return;
  }
  for (const auto& c : n.body) written_buffers(*c, out);
}

// Whether `e` has a type of its own, as the interpreter decides it: a load or a cast inside.
bool typed(const ir::Expr& e) {
  switch (e.kind) {
    case ir::ExprKind::kConst:
    case ir::ExprKind::kIndex:
      return false;
    case ir::ExprKind::kLoad:
      return true;
    case ir::ExprKind::kUnary:
      if (e.un == ir::UnOp::kCastF32 || e.un == ir::UnOp::kCastF64 || e.un == ir::UnOp::kCastI32)
        return true;
      return typed(*e.args[0]);
    case ir::ExprKind::kBinary:
      return typed(*e.args[0]) || typed(*e.args[1]);
    case ir::ExprKind::kSelect:
      return typed(*e.args[2]) || typed(*e.args[3]);
    case ir::ExprKind::kFma:
      return typed(*e.args[0]) || typed(*e.args[1]) || typed(*e.args[2]);
  }
  return false;
}

// A statement touching the buffer: its path, whether it writes the buffer, and its reads of
// it (uses.reads[reads_begin, reads_end)).
struct Use {
  std::span<const int> path;
  const ir::Stmt* stmt;
  bool writes;
  int reads_begin, reads_end;
};

struct Uses {
  std::vector<Use> list;
  std::vector<const ir::Access*> reads;
  std::forward_list<Path> paths;  ///< what `path` points to when there is no index
};

void gather(const std::vector<ir::NodePtr>& body, const std::string& buf, Path& path, Uses& out) {
  for (int i = 0; i < static_cast<int>(body.size()); ++i) {
    path.push_back(i);
    const ir::Node& n = *body[i];
    if (n.is_scope) {
      gather(n.body, buf, path, out);
    } else {
      const int begin = static_cast<int>(out.reads.size());
      loads(*n.stmt.rhs, buf, out.reads);
      const int end = static_cast<int>(out.reads.size());
      const bool writes = n.stmt.lhs.buffer == buf;
      if (writes || end > begin)
        out.list.push_back({out.paths.emplace_front(path), &n.stmt, writes, begin, end});
    }
    path.pop_back();
  }
}

// Every statement touching `buf`, in program order.
void gather(const ir::Program& p, const ProgramIndex* index, const std::string& buf, Uses& out) {
  if (!index) {
    Path cur;
    gather(p.body, buf, cur, out);
    return;
  }
  int last = -1;
  for (int s : index->buffer_sites(buf)) {
    const int n = index->site_node(s);
    if (n != last) {
      const ir::Stmt& st = index->node(n).node->stmt;
      const int r = static_cast<int>(out.reads.size());
      out.list.push_back({index->path(n), &st, st.lhs.buffer == buf, r, r});
      last = n;
    }
    const AccessSite& site = index->sites()[s];
    if (!site.write) {
      out.reads.push_back(site.access);
      out.list.back().reads_end = static_cast<int>(out.reads.size());
    }
  }
}

// The body holding the node at `path`.
const std::vector<ir::NodePtr>& parent_body(const ir::Program& p, std::span<const int> path) {
  const std::vector<ir::NodePtr>* body = &p.body;
  for (size_t k = 0; k + 1 < path.size(); ++k) body = &(*body)[path[k]]->body;
  return *body;
}

Path to_path(std::span<const int> s) { return Path(s.begin(), s.end()); }

struct Plan {
  Path writer;
  std::vector<int> readers;  ///< sibling indices of the readers, increasing
};

Legality make_plan(const ir::Program& p, const Action& a, const ProgramIndex* index, Plan& plan) {
  const ir::BufferDecl* decl = find_decl(p, a.buffer);
  if (!decl) return {Reason::kNoSuchLocation, a.buffer, {}};
  if (decl->role != ir::Role::kTemp) return {Reason::kNotATemporary, a.buffer, {}};
  if (decl->init) return {Reason::kHasInitialValue, a.buffer, {}};
  thread_local Uses uses;  // storage kept between checks
  uses.list.clear();
  uses.reads.clear();
  uses.paths.clear();
  gather(p, index, a.buffer, uses);
  if (uses.list.empty()) return {Reason::kNothingToDo, a.buffer, {}};

  const Use* w = nullptr;
  for (const Use& u : uses.list) {
    if (!u.writes) continue;
    if (w) return {Reason::kIrregularAccess, a.buffer, to_path(u.path)};  // a second writer
    w = &u;
  }
  if (!w) return {Reason::kIrregularAccess, a.buffer, to_path(uses.list[0].path)};
  plan.writer = to_path(w->path);
  const ir::Stmt& ws = *w->stmt;
  if (ws.op != ir::Reduce::kNone || w->reads_end > w->reads_begin || !typed(*ws.rhs))
    return {Reason::kIrregularAccess, a.buffer, plan.writer};

  const std::span<const int> parent = w->path.first(w->path.size() - 1);
  const int wi = w->path.back();
  for (const Use& u : uses.list) {
    if (&u == w) continue;
    const bool sibling = u.path.size() == w->path.size() &&
                         std::equal(parent.begin(), parent.end(), u.path.begin()) &&
                         u.path.back() > wi;
    if (!sibling) return {Reason::kIrregularAccess, a.buffer, to_path(u.path)};
    for (int r = u.reads_begin; r < u.reads_end; ++r)
      if (uses.reads[r]->index != ws.lhs.index)
        return {Reason::kIrregularAccess, a.buffer, to_path(u.path)};
    plan.readers.push_back(u.path.back());
  }
  if (plan.readers.empty()) return {Reason::kIrregularAccess, a.buffer, plan.writer};

  // Nothing between the write and the last read may change what `e` reads.
  thread_local BufferNames inputs, written;
  inputs.assign(1, &a.buffer);
  loaded_buffers(*ws.rhs, inputs);
  const auto& body = parent_body(p, w->path);
  written.clear();
  for (int i = wi + 1; i < plan.readers.back(); ++i) written_buffers(*body[i], written);
  if (const std::string* b = first_common_name(written, inputs))
    return {Reason::kDependence, *b, plan.writer};
  return {};
}

ir::ExprPtr substitute(const ir::ExprPtr& e, const std::string& buf, const ir::ExprPtr& with) {
  if (e->kind == ir::ExprKind::kLoad) return e->access.buffer == buf ? with : e;
  if (e->args.empty()) return e;
  auto c = std::make_shared<ir::Expr>(*e);
  for (auto& x : c->args) x = substitute(x, buf, with);
  return c;
}

}  // namespace

Legality check_inline_temporary(const ir::Program& p, const Action& a, const Target&,
                                const ProgramIndex* index) {
  Plan plan;
  return make_plan(p, a, index, plan);
}

Precheck precheck_inline_temporary(MaskSummary& sum, const MaskSite& at,
                                   std::span<const int64_t> params) {
  // A temporary without initial value written by exactly one plain store.
  if (!sum.summarised(at.buffer)) return check_all(params);
  const ir::BufferDecl& d = sum.program().buffers[at.buffer];
  if (d.role != ir::Role::kTemp || d.init || sum.writers(at.buffer) != 1 || sum.reduced(at.buffer))
    return {};
  return check_all(params);
}

ir::Program apply_inline_temporary(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_inline_temporary, p, a, t);
  Plan plan;
  make_plan(p, a, nullptr, plan);
  ir::Program q =
      replace_in_parent(p, plan.writer, [&](const std::vector<ir::NodePtr>& list, int wi) {
        const ir::ExprPtr e = list[wi]->stmt.rhs;
        std::vector<ir::NodePtr> out;
        for (int i = 0; i < static_cast<int>(list.size()); ++i) {
          if (i == wi) continue;
          if (std::find(plan.readers.begin(), plan.readers.end(), i) == plan.readers.end()) {
            out.push_back(list[i]);
            continue;
          }
          ir::Stmt s = list[i]->stmt;
          s.rhs = substitute(s.rhs, a.buffer, e);
          out.push_back(ir::Node::statement(std::move(s)));
        }
        return out;
      });
  q.buffers.erase(std::remove_if(q.buffers.begin(), q.buffers.end(),
                                 [&](const ir::BufferDecl& b) { return b.name == a.buffer; }),
                  q.buffers.end());
  return q;
}

}  // namespace perfdojo::transforms
