#include "transforms/dot_sketch.h"

#include <algorithm>

#include "transforms/analysis.h"
#include "transforms/dot_product.h"
#include "transforms/registry.h"

namespace perfdojo::transforms {
namespace dot_sketch_detail {

// The roles of the scopes while the nest is rearranged.
enum Role { kJo, kIo, kP, kIi, kJi, kQ };

Path at_position(const Path& top, int pos) {
  Path out = top;
  for (int k = 0; k < pos; ++k) out.push_back(0);
  return out;
}

// The statement under exactly `depth` perfectly nested plain scopes (no annotation, no bounds)
// from `path`, the scopes in `scopes`; nullptr when the nest is not that.
const ir::Node* plain_chain(const ir::Program& p, const Path& path, size_t depth,
                            std::vector<const ir::Node*>& scopes) {
  const ir::Node* n = node_at(p, path);
  while (n && n->is_scope && scopes.size() < depth) {
    if (n->annot != ir::Annot::kNone || n->bounds.any() || n->body.size() != 1) return nullptr;
    scopes.push_back(n);
    n = n->body[0].get();
  }
  return scopes.size() == depth && n && !n->is_scope ? n : nullptr;
}

// Whether `s` is `C += U * S`, C i32 and U, S one u8 and one i8 load (either order).
bool int8_product(const ir::Program& p, const ir::Stmt& s) {
  const ir::Expr& e = *s.rhs;
  if (s.op != ir::Reduce::kAdd || e.kind != ir::ExprKind::kBinary || e.bin != ir::BinOp::kMul ||
      e.args[0]->kind != ir::ExprKind::kLoad || e.args[1]->kind != ir::ExprKind::kLoad)
    return false;
  auto type = [&](const std::string& b) {
    const ir::BufferDecl* d = p.find_buffer(b);
    return d ? d->dtype : ir::DType::kF32;
  };
  const ir::DType tx = type(e.args[0]->access.buffer), ty = type(e.args[1]->access.buffer);
  return type(s.lhs.buffer) == ir::DType::kI32 && ((tx == ir::DType::kU8 && ty == ir::DType::kI8) ||
                                                   (tx == ir::DType::kI8 && ty == ir::DType::kU8));
}

}  // namespace dot_sketch_detail

std::optional<DotNest> dot_nest_at(const ir::Program& p, const Path& path) {
  std::vector<const ir::Node*> scopes;
  const ir::Node* n = dot_sketch_detail::plain_chain(p, path, 4, scopes);
  if (!n) return std::nullopt;
  // The statement must be `C(i32) += U(u8) * S(i8)` (either order); the access pattern is
  // checked below by role.
  const ir::Stmt& s = n->stmt;
  if (!dot_sketch_detail::int8_product(p, s)) return std::nullopt;
  const ir::Access& x = s.rhs->args[0]->access;
  const ir::Access& y = s.rhs->args[1]->access;
  DotNest out;
  out.path = path;
  const int base = static_cast<int>(path.size()) - 1;
  // j first: stride 1 in C, read by exactly one operand (the packed one); the other is the
  // broadcast one. Then q (stride 0 in C, extent 4, 1 in the broadcast operand: its 4 bytes are
  // adjacent), p (stride 0 in C, read by both) and i (read by C and the broadcast operand).
  int found[4] = {-1, -1, -1, -1};  // i, j, p, q
  const ir::Access* packed = nullptr;
  for (int k = 0; k < 4; ++k) {
    const int d = base + k;
    const int64_t a = element_stride(p, x, d), b = element_stride(p, y, d);
    if (element_stride(p, s.lhs, d) == 1 && (a == 0) != (b == 0)) {
      if (found[1] >= 0) return std::nullopt;
      found[1] = k;
      packed = a != 0 ? &x : &y;
    }
  }
  if (!packed) return std::nullopt;
  const ir::Access& bcast = packed == &x ? y : x;
  for (int k = 0; k < 4; ++k) {
    if (k == found[1]) continue;
    const int d = base + k;
    const int64_t c = element_stride(p, s.lhs, d), a = element_stride(p, *packed, d),
                  b = element_stride(p, bcast, d);
    int role = -1;
    if (c == 0 && b == 1 && a != 0 && scopes[k]->extent == 4 && found[3] < 0)
      role = 3;
    else if (c == 0 && a != 0 && b != 0)
      role = 2;
    else if (c != 0 && a == 0 && b != 0)
      role = 0;
    if (role < 0 || found[role] >= 0) return std::nullopt;
    found[role] = k;
  }
  out.i = found[0];
  out.j = found[1];
  out.p = found[2];
  out.q = found[3];
  // Weights not yet four k per column at stride 4 are packed so by the sketch's panel copy.
  out.needs_pack = element_stride(p, *packed, base + out.j) != 4 ||
                   element_stride(p, *packed, base + out.q) != 1;
  out.packed = packed->buffer;
  out.m = scopes[out.i]->extent;
  out.n = scopes[out.j]->extent;
  return out;
}

std::optional<Action> dot_blocking(const ir::Program& p, const Path& path) {
  std::vector<const ir::Node*> scopes;
  const ir::Node* n = dot_sketch_detail::plain_chain(p, path, 3, scopes);
  if (!n) return std::nullopt;
  // The reduction: stride 0 in the target, read by both operands, a multiple of 4.
  const ir::Stmt& s = n->stmt;
  if (!dot_sketch_detail::int8_product(p, s)) return std::nullopt;  // before any move is tried
  const auto& args = s.rhs->args;
  const int base = static_cast<int>(path.size()) - 1;
  for (int k = 0; k < 3; ++k) {
    const int d = base + k;
    if (element_stride(p, s.lhs, d) != 0 || element_stride(p, args[0]->access, d) == 0 ||
        element_stride(p, args[1]->access, d) == 0 || scopes[k]->extent % 4 != 0 ||
        scopes[k]->extent == 4)
      continue;
    Path at = path;
    for (int j = 0; j < k; ++j) at.push_back(0);
    const Action tile{Kind::kTileScope, at, "", "", 4};
    auto tiled = apply(p, tile, Target{});
    if (tiled.ok() && dot_nest_at(tiled.value(), path)) return tile;
  }
  return std::nullopt;
}

std::vector<DotNest> dot_nests(const ir::Program& p) {
  std::vector<DotNest> out;
  for (size_t k = 0; k < p.body.size(); ++k)
    if (auto nest = dot_nest_at(p, {static_cast<int>(k)})) out.push_back(*nest);
  return out;
}

std::vector<DotTile> dot_candidates(const DotNest& nest, const Target& target) {
  const int64_t lanes = target.widest_lanes();
  // x86's vpdpbusd takes 8 or 16 lanes; AArch64's usdot 4 (the C printer's forms).
  const bool arm = target.name.rfind("aarch64", 0) == 0;
  if (lanes < 8 && !(arm && lanes == 4)) return {};
  std::vector<DotTile> out;
  const int64_t registers = target.registers() - 4;  // the operands' registers besides
  for (auto [mr, regs] : std::vector<std::pair<int64_t, int64_t>>{
           {8, 2}, {4, 4}, {6, 4}, {8, 1}, {4, 2}, {2, 4}, {4, 1}, {2, 2}}) {
    const DotTile t{mr, regs * lanes, lanes};
    if (nest.m % t.mr != 0 || nest.n % t.nr != 0 || t.mr * regs > std::min<int64_t>(24, registers))
      continue;
    out.push_back(t);
  }
  return out;
}

ir::Result<SketchExpansion> expand_dot_sketch(const ir::Program& p, const Path& path,
                                              const DotTile& tile, const Target& target) {
  using namespace dot_sketch_detail;
  auto nest = dot_nest_at(p, path);
  if (!nest) return std::vector<ir::Diagnostic>{{{}, "not a dot nest at " + print_path(path)}};
  if (tile.lanes <= 0 || tile.nr % tile.lanes != 0 || nest->m % tile.mr != 0 ||
      nest->n % tile.nr != 0)
    return std::vector<ir::Diagnostic>{{{}, "the tile does not divide the nest"}};
  SketchExpansion out{{}, p};
  auto step = [&](const Action& a) -> bool {
    auto r = apply(out.program, a, target);
    if (!r.ok()) return false;
    out.program = std::move(r).value();
    out.trace.push_back(a);
    return true;
  };
  auto refused = [&](const char* what) {
    return std::vector<ir::Diagnostic>{{{}, std::string("dot sketch: ") + what + " was refused"}};
  };
  // Roles by position, outermost first.
  std::vector<Role> order(4);
  order[nest->i] = kIi;
  order[nest->j] = kJi;
  order[nest->p] = kP;
  order[nest->q] = kQ;
  // Tile the rows and the columns (the outer part first in the order).
  auto tile_role = [&](Role inner, Role outer, int64_t factor, int64_t extent) -> bool {
    if (factor == extent) return true;
    const int pos = static_cast<int>(std::find(order.begin(), order.end(), inner) - order.begin());
    if (!step({Kind::kTileScope, at_position(path, pos), "", "", factor})) return false;
    order.insert(order.begin() + pos, outer);
    return true;
  };
  if (!tile_role(kIi, kIo, tile.mr, nest->m)) return refused("tiling the rows");
  if (!tile_role(kJi, kJo, tile.nr, nest->n)) return refused("tiling the columns");
  // Bubble the scopes into  Jo Io p Ii Ji q  (each swap exchanges a scope with its child).
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t k = 0; k + 1 < order.size(); ++k) {
      if (order[k] <= order[k + 1]) continue;
      if (!step({Kind::kSwapScopes, at_position(path, static_cast<int>(k)), "", "", 0}))
        return refused("ordering the scopes");
      std::swap(order[k], order[k + 1]);
      moved = true;
    }
  }
  // Pack the packed operand's column panel at Jo: the rest of the nest becomes its second child.
  Path inner = path;  // the scope at position 1 of the order, wherever it now is
  int first = 0;      // its position
  if (order[0] == kJo || nest->needs_pack) {
    if (!step({Kind::kCreateTemporary, path, nest->packed, "", 0})) return refused("packing");
    inner.push_back(1);
    first = 1;
  }
  auto path_of = [&](Role r) {
    const int pos = static_cast<int>(std::find(order.begin(), order.end(), r) - order.begin());
    return first == 1 ? at_position(inner, pos - 1) : at_position(path, pos);
  };
  if (!step({Kind::kDotProduct, path_of(kJi), "", "", tile.lanes})) return refused("dot_product");
  if (tile.mr > 1 && !step({Kind::kUnroll, path_of(kIi), "", "", tile.mr}))
    return refused("unrolling the rows");
  if (tile.nr > tile.lanes && !step({Kind::kUnroll, path_of(kJi), "", "", tile.nr / tile.lanes}))
    return refused("unrolling the registers");
  return out;
}

}  // namespace perfdojo::transforms
