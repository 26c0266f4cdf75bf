#include "transforms/swap_buffer_dims.h"

#include <functional>
#include <utility>

#include "transforms/analysis.h"
#include "transforms/mask_summary.h"

namespace perfdojo::transforms {
namespace {

// Whether `index` is what vectorize accepts in lanes {v}: unit stride in the last dimension or
// invariant, and invariant in every other dimension.
bool contiguous_in(const std::vector<ir::Affine>& index, int v) {
  for (size_t m = 0; m + 1 < index.size(); ++m)
    if (index[m].coeff(v) != 0) return false;
  int64_t c = index.back().coeff(v);
  return c == 0 || c == 1;
}

std::vector<ir::Affine> swapped(std::vector<ir::Affine> index, size_t i) {
  std::swap(index[i], index[i + 1]);
  return index;
}

// Visits every access of `buf` with the depths of the vectorised scopes around it; stops at the
// first access for which `f` returns false and returns false.
bool all_accesses(const std::vector<ir::NodePtr>& body, const std::string& buf,
                  std::vector<int>& vec, int depth,
                  const std::function<bool(const ir::Access&, const std::vector<int>&)>& f) {
  for (const auto& n : body) {
    if (n->is_scope) {
      if (n->annot == ir::Annot::kVector) vec.push_back(depth);
      bool ok = all_accesses(n->body, buf, vec, depth + 1, f);
      if (n->annot == ir::Annot::kVector) vec.pop_back();
      if (!ok) return false;
      continue;
    }
    if (n->stmt.lhs.buffer == buf && !f(n->stmt.lhs, vec)) return false;
    bool ok = true;
    std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
      if (e.kind == ir::ExprKind::kLoad && e.access.buffer == buf && ok) ok = f(e.access, vec);
      for (const auto& x : e.args) walk(*x);
    };
    walk(*n->stmt.rhs);
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Legality check_swap_buffer_dims(const ir::Program& p, const Action& a, const Target&,
                                const ProgramIndex* index) {
  const ir::BufferDecl* decl = find_decl(p, a.buffer);
  if (!decl) return {Reason::kNoSuchLocation, a.buffer, {}};
  // A staged output's copy-out writes every element of the output from the copy, so every
  // element of the copy must hold a value: the declared initial value where nothing wrote it.
  // Without one, the copy-out could read an element nothing has written.
  if (decl->role == ir::Role::kOutput && !decl->init) return {Reason::kDependence, a.buffer, {}};
  const int rank = static_cast<int>(decl->shape.size());
  if (a.param < 0 || a.param + 1 >= rank) return {Reason::kBadParameter, a.buffer, {}};
  bool used = false;
  if (index) {
    used = index->buffer_id(a.buffer) >= 0;
  } else {
    for (const auto& n : p.body) used |= uses_buffer(n, a.buffer);
  }
  if (!used) return {Reason::kNothingToDo, a.buffer, {}};
  std::vector<int> vec;
  const auto i = static_cast<size_t>(a.param);
  auto keeps = [&](const ir::Access& x, const std::vector<int>& v) {
    for (int d : v)
      if (contiguous_in(x.index, d) && !contiguous_in(swapped(x.index, i), d)) return false;
    return true;
  };
  bool ok = true;
  if (index) {
    // Every access, with the depths of the vectorised scopes around it (innermost first: the
    // order does not change the verdict).
    for (int s : index->buffer_sites(a.buffer)) {
      vec.clear();
      for (int n = index->node(index->site_node(s)).parent; n >= 0; n = index->node(n).parent)
        if (index->node(n).node->annot == ir::Annot::kVector)
          vec.push_back(static_cast<int>(index->path(n).size()) - 1);
      if (!(ok = keeps(*index->sites()[s].access, vec))) break;
    }
  } else {
    ok = all_accesses(p.body, a.buffer, vec, 0, keeps);
  }
  if (!ok) return {Reason::kAnnotated, a.buffer, {}};
  return {};
}

Precheck precheck_swap_buffer_dims(MaskSummary& sum, const MaskSite& at,
                                   std::span<const int64_t> params) {
  const ir::BufferDecl& d = sum.program().buffers[at.buffer];
  if (d.role == ir::Role::kOutput && !d.init) return {};
  // Without a vector scope in the program no access has a vectorised scope around it whose
  // contiguity the swap could break: the check only asks that some access names the buffer.
  const bool decides = !sum.has_vector() && sum.summarised(at.buffer);
  Precheck out;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i] < 0 || params[i] + 1 >= static_cast<int64_t>(d.shape.size())) continue;
    if (!decides)
      out.check |= uint64_t{1} << i;
    else if (sum.accessed(at.buffer))
      out.legal |= uint64_t{1} << i;
  }
  return out;
}

ir::Program apply_swap_buffer_dims(const ir::Program& p, const Action& a, const Target& t) {
  PERFDOJO_EXPECT_LEGAL(check_swap_buffer_dims, p, a, t);
  const ir::BufferDecl& decl = *find_decl(p, a.buffer);
  const auto i = static_cast<size_t>(a.param);
  ir::BufferDecl relaid = decl;
  relaid.shape_names.resize(relaid.shape.size());
  std::swap(relaid.shape[i], relaid.shape[i + 1]);
  std::swap(relaid.shape_names[i], relaid.shape_names[i + 1]);
  const bool temp = decl.role == ir::Role::kTemp;
  const std::string target = temp ? a.buffer : fresh_buffer_name(p, a.buffer + "_p");

  ir::Program q = p;
  for (auto& n : q.body) {
    if (!uses_buffer(n, a.buffer)) continue;
    n = map_accesses(n, [&](const ir::Access& x) -> std::optional<ir::Access> {
      if (x.buffer != a.buffer) return std::nullopt;
      ir::Access y = x;
      y.buffer = target;
      y.index = swapped(x.index, i);
      return y;
    });
  }
  if (temp) {
    for (auto& b : q.buffers)
      if (b.name == a.buffer) b = relaid;
    return q;
  }

  // The copy's nest, over its own layout: BUF_p[.., a, b, ..] and BUF[.., b, a, ..]. An input
  // is packed once, before anything reads it; an output is staged: the body computes into the
  // copy, which starts at the output's initial value, and one nest at the end writes it back.
  const bool input = decl.role == ir::Role::kInput;
  const int rank = static_cast<int>(relaid.shape.size());
  std::vector<ir::Affine> copy_index;
  for (int m = 0; m < rank; ++m) copy_index.push_back(ir::Affine::iter(m));
  const std::vector<ir::Affine> buf_index = swapped(copy_index, i);
  ir::Stmt st;
  if (input) {
    st.lhs = {target, copy_index, {}};
    st.rhs = ir::Expr::load({a.buffer, buf_index, {}});
  } else {
    st.lhs = {a.buffer, buf_index, {}};
    st.rhs = ir::Expr::load({target, copy_index, {}});
  }
  ir::NodePtr nest = ir::Node::statement(std::move(st));
  for (int m = rank - 1; m >= 0; --m)
    nest = ir::Node::scope(relaid.shape[m], relaid.shape_names[m], ir::Annot::kNone, {nest});
  if (input)
    q.body.insert(q.body.begin(), nest);
  else
    q.body.push_back(nest);
  relaid.name = target;
  relaid.role = ir::Role::kTemp;
  relaid.range.reset();
  if (input) relaid.init.reset();  // an output's copy keeps its initial value
  relaid.stream = false;
  relaid.loc = {};
  q.buffers.push_back(std::move(relaid));
  return q;
}

}  // namespace perfdojo::transforms
