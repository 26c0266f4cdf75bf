// Shared machinery of the transformations: navigating and rebuilding the immutable tree, and
// the dependence test every legality check relies on.
#pragma once

#include <algorithm>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/ir.h"
#include "transforms/action.h"

namespace perfdojo::transforms {

/// Whether the iterations of a scope annotated `a` may run at once, sharing one storage
/// (parallel and GPU-mapped scopes).
bool shares_storage(ir::Annot a);
/// The node at `path`, or nullptr when the path leads nowhere.
const ir::Node* node_at(const ir::Program& p, const Path& path);
/// Whether a scope enclosing the node at `path` (the node excluded) carries an annotation for
/// which `pred` holds. Allocates nothing.
bool any_enclosing_annot(const ir::Program& p, const Path& path, bool (*pred)(ir::Annot));
/// Extents of the scopes enclosing the node at `path` (outermost first), excluding the node.
std::vector<int64_t> enclosing_extents(const ir::Program& p, const Path& path);
/// The scopes on the way to `path`, outermost first, excluding the node itself.
std::vector<const ir::Node*> enclosing_scopes(const ir::Program& p, const Path& path);

/// A copy of `p` whose list holding the node at `path` (the parent's body, or the top level)
/// is replaced by what `edit` makes of it. Shares every untouched subtree.
ir::Program replace_in_parent(
    const ir::Program& p, const Path& path,
    const std::function<std::vector<ir::NodePtr>(const std::vector<ir::NodePtr>&, int index)>&
        edit);
/// A copy of `p` with the node at `path` replaced by `nodes` (zero or more).
ir::Program replace_node(const ir::Program& p, const Path& path, std::vector<ir::NodePtr> nodes);

/// How map_accesses rewrites one access: the new access, or nullopt to keep it as it is (no
/// copy made).
using AccessMap = std::function<std::optional<ir::Access>(const ir::Access&)>;
/// Rewrites every access (targets and reads) in a subtree. A subtree in which `f` changes no
/// access is shared, not copied.
ir::NodePtr map_accesses(const ir::NodePtr& n, const AccessMap& f);
/// Rewrites every access in an expression.
ir::ExprPtr map_accesses(const ir::ExprPtr& e, const AccessMap& f);
/// Rewrites each affine index of every access in a subtree.
ir::NodePtr map_indices(const ir::NodePtr& n,
                        const std::function<ir::Affine(const ir::Affine&)>& f);

/// One access instance site: the access, whether it writes, and its enclosing scope extents.
struct AccessSite {
  const ir::Access* access;
  bool write;
  bool reduction;  ///< the target of a reduction statement (+=, *=, max, min)
  const ir::Stmt* stmt;
  const int64_t* extents;  ///< extents of all scopes enclosing the statement, by depth
  int depth;               ///< number of those scopes
  int buffer = -1;         ///< in a ProgramIndex's sites: its id of the buffer named, else -1
};

/// The sites of a subtree. Sites point into the collection's own storage, so it is movable but
/// not copyable; copies of single sites stay valid while the collection lives.
struct AccessSites : std::vector<AccessSite> {
  AccessSites() = default;
  AccessSites(AccessSites&&) = default;
  AccessSites& operator=(AccessSites&&) = default;
  AccessSites(const AccessSites&) = delete;
  AccessSites& operator=(const AccessSites&) = delete;
  std::vector<int64_t> storage;  ///< every site's extents, back to back
};

/// Every access in the subtrees `nodes`, whose enclosing scopes (outside `nodes`) have `outer`
/// extents. Reduction targets count as writes.
AccessSites collect_accesses(const std::vector<ir::NodePtr>& nodes,
                             const std::vector<int64_t>& outer);
/// collect_accesses for one subtree.
AccessSites collect_accesses(const ir::NodePtr& node, const std::vector<int64_t>& outer);

/// Relation required between the iterators of two access instances at one paired level.
enum class Dir { kAny, kLt, kEq, kGt };

/// A dependence test's direction vector, held inline up to 64 levels (the checks build one per
/// test, dozens per mask) and on the heap beyond. Views as std::span<const Dir>.
class DirList {
 public:
  DirList(int n, Dir fill) : n_(n) {
    if (n > kInline) heap_.assign(n, fill);
    std::fill(data(), data() + n, fill);
  }
  Dir* data() { return n_ > kInline ? heap_.data() : inline_; }
  const Dir* data() const { return n_ > kInline ? heap_.data() : inline_; }
  size_t size() const { return static_cast<size_t>(n_); }
  Dir& back() { return data()[n_ - 1]; }
  Dir& operator[](size_t i) { return data()[i]; }
  operator std::span<const Dir>() const { return {data(), size()}; }

 private:
  static constexpr int kInline = 64;
  int n_;
  Dir inline_[kInline];
  std::vector<Dir> heap_;
};

/// `d` kEq directions followed by `tail`.
inline DirList eq_dirs(int d, std::initializer_list<Dir> tail = {}) {
  DirList v(d + static_cast<int>(tail.size()), Dir::kEq);
  std::copy(tail.begin(), tail.end(), v.data() + d);
  return v;
}

/// `path` extended by child index `i`, built with one allocation.
inline Path child_path(const Path& path, int i) {
  Path out;
  out.reserve(path.size() + 1);
  out.assign(path.begin(), path.end());
  out.push_back(i);
  return out;
}

/// Whether instances of `a` and `b` might touch the same element with the iterators at paired
/// levels 0..dirs.size()-1 related as `dirs` (a's iterator `dir` b's iterator); unpaired levels
/// range freely. Sound: false only when proven impossible (Banerjee bounds and GCD test per
/// dimension). Does not look at whether either access writes.
bool may_overlap(const AccessSite& a, const AccessSite& b, std::span<const Dir> dirs);
/// The same with the directions written out: may_overlap(a, b, {Dir::kEq, Dir::kLt}).
inline bool may_overlap(const AccessSite& a, const AccessSite& b, std::initializer_list<Dir> dirs) {
  return may_overlap(a, b, std::span<const Dir>(dirs.begin(), dirs.size()));
}

/// Whether two sites conflict (same buffer, at least one writes) under `dirs`.
bool may_depend(const AccessSite& a, const AccessSite& b, std::span<const Dir> dirs);
inline bool may_depend(const AccessSite& a, const AccessSite& b, std::initializer_list<Dir> dirs) {
  return may_depend(a, b, std::span<const Dir>(dirs.begin(), dirs.size()));
}

/// The first buffer with a dependence between `from` and `to` under `dirs` (pairs taken in
/// order: every site of `from`, then every site of `to`), or nullopt.
std::optional<std::string> find_dependence(std::span<const AccessSite> from,
                                           std::span<const AccessSite> to,
                                           std::span<const Dir> dirs);
std::optional<std::string> find_dependence(const std::vector<AccessSite>& from,
                                           const std::vector<AccessSite>& to,
                                           const std::vector<Dir>& dirs);

/// Statements in a subtree.
int count_statements(const ir::NodePtr& n);
/// Whether any access in the subtree names `buffer`.
bool uses_buffer(const ir::NodePtr& n, const std::string& buffer);
/// The `:par` scopes in `body` that no other `:par` scope encloses (0: the code runs on one
/// thread).
int parallel_scopes(const std::vector<ir::NodePtr>& body);
/// Pre-order list of every scope's path (the canonical scope order of the action space).
std::vector<Path> scope_paths(const ir::Program& p);
/// Pre-order list of every node's path.
std::vector<Path> node_paths(const ir::Program& p);
/// The position of `path` in `paths` (scope_paths / node_paths order), or -1.
inline int position_of(const std::vector<Path>& paths, const Path& path) {
  auto it = std::find(paths.begin(), paths.end(), path);
  return it == paths.end() ? -1 : static_cast<int>(it - paths.begin());
}
/// A buffer name not yet used in `p`, starting from `base`.
std::string fresh_buffer_name(const ir::Program& p, const std::string& base);

/// a == b, comparing length and first character before the bytes: buffer names mostly differ
/// in one of those, and the mask's checks compare names thousands of times.
inline bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         (a.empty() || (a[0] == b[0] && std::memcmp(a.data(), b.data(), a.size()) == 0));
}

/// p.find_buffer(name) with same_name's comparison: the first declaration named `name`, or null.
inline const ir::BufferDecl* find_decl(const ir::Program& p, std::string_view name) {
  for (const ir::BufferDecl& b : p.buffers)
    if (same_name(b.name, name)) return &b;
  return nullptr;
}

/// Buffer names as pointers into a program, repeats allowed. A check meets a handful of
/// buffers, so a linear search beats building a set of strings.
using BufferNames = std::vector<const std::string*>;
/// Appends the buffers `e` loads.
void loaded_buffers(const ir::Expr& e, BufferNames& out);
/// Whether `names` holds `b`.
bool holds_name(const BufferNames& names, std::string_view b);
/// Of the names in both `xs` and `ys`, the first in name order (a stable message), or null.
const std::string* first_common_name(const BufferNames& xs, const BufferNames& ys);

/// What many legality checks of one program share, computed once (for a whole mask): every node
/// in pre-order with its path, parent and the range of its subtree's access sites, and every
/// access site with the buffer it names. The sites are collect_accesses(p.body, {}): a subtree's
/// sites are a contiguous range holding exactly what collect_accesses of that subtree (with its
/// enclosing extents) returns, so a check given an index answers exactly as without one.
/// Holds pointers into `p`, which must outlive it unchanged.
class ProgramIndex {
 public:
  explicit ProgramIndex(const ir::Program& p);
  ProgramIndex(const ProgramIndex&) = delete;
  ProgramIndex& operator=(const ProgramIndex&) = delete;
  /// Indexes `p` instead, keeping the storage (a MaskMemo rebuilds one index per mask).
  void rebuild(const ir::Program& p);

  struct NodeInfo {
    const ir::Node* node = nullptr;
    int parent = -1;       ///< node index of the enclosing scope, -1 at the top level
    int next = -1;         ///< node index of the next sibling, -1 for the last child
    int first_child = -1;  ///< node index of the first child, -1 for none
    int top = 0;           ///< index of the top-level node holding it
    int site_begin = 0;    ///< the subtree's sites are sites()[site_begin, site_end)
    int site_end = 0;
  };

  const ir::Program& program() const { return *p_; }
  /// Whether some scope of the program is bounded (non-rectangular).
  bool bounded() const { return bounded_; }
  /// Whether some access has an indirect index (ir::any_indirect).
  bool indirect() const { return indirect_; }
  /// Number of nodes; node indices are pre-order positions.
  int size() const { return static_cast<int>(nodes_.size()); }
  const NodeInfo& node(int i) const { return nodes_[i]; }
  /// The path of node i (a view into one pool shared by every node's path).
  std::span<const int> path(int i) const {
    return {path_pool_.data() + path_begin_[i], path_pool_.data() + path_begin_[i + 1]};
  }
  /// The node index at `path`, or -1 when the path leads nowhere.
  int find(const Path& path) const;
  /// Names node n as the likely subject of the next finds (a mask names the node it checks):
  /// find() of its path or of a child's then starts there instead of at the top.
  void set_hint(int n) { hint_ = n; }
  /// Node indices of the scopes, in pre-order (scope_paths order).
  const std::vector<int>& scopes() const { return scopes_; }
  /// Every access site of the program, in collect_accesses order.
  const AccessSites& sites() const { return sites_; }
  std::span<const AccessSite> sites(int begin, int end) const {
    return {sites_.data() + begin, static_cast<size_t>(end - begin)};
  }
  /// Node index of the statement holding site s.
  int site_node(int s) const { return site_node_[s]; }
  /// The id of the buffer site s names.
  int site_buffer(int s) const { return site_buffer_[s]; }
  /// Id of a buffer name that some site names, or -1.
  int buffer_id(std::string_view name) const;
  /// Sites naming buffer `id`, increasing.
  const std::vector<int>& buffer_sites(int id) const { return buffer_sites_[id]; }
  /// Sites naming buffer `name`, increasing; empty when none does.
  std::span<const int> buffer_sites(std::string_view name) const {
    const int id = buffer_id(name);
    return id < 0 ? std::span<const int>() : std::span<const int>(buffer_sites_[id]);
  }
  /// Sites of the children [from, to) of the scope at node index `scope` (-1: the top level).
  std::span<const AccessSite> child_sites(int scope, int from, int to) const;

 private:
  void walk(const std::vector<ir::NodePtr>& body, int parent, Path& cur, std::vector<int64_t>& ext);
  const ir::Program* p_ = nullptr;
  std::vector<NodeInfo> nodes_;
  std::vector<int> path_pool_;   ///< every node's path, in pre-order, back to back
  std::vector<int> path_begin_;  ///< node i's path is path_pool_[path_begin_[i], path_begin_[i+1])
  std::vector<int> top_nodes_;
  std::vector<int> scopes_;
  AccessSites sites_;
  std::vector<int> site_node_;
  std::vector<int> site_buffer_;
  std::vector<std::string_view> names_;         ///< buffer names by id
  std::vector<std::vector<int>> buffer_sites_;  ///< the first names_.size() are in use
  int hint_ = -1;                               ///< set_hint's node
  bool bounded_ = false;                        ///< some scope is bounded
  bool indirect_ = false;                       ///< some access has an indirect index
  Path cur_;                                    ///< walk's scratch
  std::vector<int64_t> ext_;
};

/// The sites of the children [from, to) of the scope at `scope` (the top level when empty), with
/// the extents of the scopes enclosing them: a view into `index` when there is one, else
/// collected here. `scope` must name a scope (or be empty) and from <= to <= its body's size.
class ChildSites {
 public:
  ChildSites(const ProgramIndex* index, const ir::Program& p, const Path& scope, int from, int to);
  std::span<const AccessSite> sites() const { return view_; }

 private:
  AccessSites owned_;
  std::span<const AccessSite> view_;
};

}  // namespace perfdojo::transforms
