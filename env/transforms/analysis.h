// Shared machinery of the transformations: navigating and rebuilding the immutable tree, and
// the dependence test every legality check relies on.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "transforms/action.h"

namespace perfdojo::transforms {

/// The node at `path`, or nullptr when the path leads nowhere.
const ir::Node* node_at(const ir::Program& p, const Path& path);
/// Extents of the scopes enclosing the node at `path` (outermost first), excluding the node.
std::vector<int64_t> enclosing_extents(const ir::Program& p, const Path& path);
/// The scopes on the way to `path`, outermost first, excluding the node itself.
std::vector<const ir::Node*> enclosing_scopes(const ir::Program& p, const Path& path);

/// A copy of `p` whose list holding the node at `path` (the parent's body, or the top level)
/// is replaced by what `edit` makes of it. Shares every untouched subtree.
ir::Program replace_in_parent(const ir::Program& p, const Path& path,
                              const std::function<std::vector<ir::NodePtr>(
                                  const std::vector<ir::NodePtr>&, int index)>& edit);
/// A copy of `p` with the node at `path` replaced by `nodes` (zero or more).
ir::Program replace_node(const ir::Program& p, const Path& path, std::vector<ir::NodePtr> nodes);

/// Rewrites every access (targets and reads) in a subtree. `f` maps an access to a new one.
ir::NodePtr map_accesses(const ir::NodePtr& n, const std::function<ir::Access(const ir::Access&)>& f);
/// Rewrites every access in an expression.
ir::ExprPtr map_accesses(const ir::ExprPtr& e, const std::function<ir::Access(const ir::Access&)>& f);
/// Rewrites each affine index of every access in a subtree.
ir::NodePtr map_indices(const ir::NodePtr& n, const std::function<ir::Affine(const ir::Affine&)>& f);

/// One access instance site: the access, whether it writes, and its enclosing scope extents.
struct AccessSite {
  const ir::Access* access;
  bool write;
  bool reduction;             ///< the target of a reduction statement (+=, *=, max, min)
  const ir::Stmt* stmt;
  const int64_t* extents;     ///< extents of all scopes enclosing the statement, by depth
  int depth;                  ///< number of those scopes
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
AccessSites collect_accesses(const std::vector<ir::NodePtr>& nodes, const std::vector<int64_t>& outer);
/// collect_accesses for one subtree.
AccessSites collect_accesses(const ir::NodePtr& node, const std::vector<int64_t>& outer);

/// Relation required between the iterators of two access instances at one paired level.
enum class Dir { kAny, kLt, kEq, kGt };

/// Whether instances of `a` and `b` might touch the same element with the iterators at paired
/// levels 0..dirs.size()-1 related as `dirs` (a's iterator `dir` b's iterator); unpaired levels
/// range freely. Sound: false only when proven impossible (Banerjee bounds and GCD test per
/// dimension). Does not look at whether either access writes.
bool may_overlap(const AccessSite& a, const AccessSite& b, const std::vector<Dir>& dirs);

/// Whether two sites conflict (same buffer, at least one writes) under `dirs`.
bool may_depend(const AccessSite& a, const AccessSite& b, const std::vector<Dir>& dirs);

/// The first buffer with a dependence between `from` and `to` under `dirs` (checked both ways
/// round for pairs within one list when `to` is null), or nullopt.
std::optional<std::string> find_dependence(const std::vector<AccessSite>& from,
                                           const std::vector<AccessSite>& to,
                                           const std::vector<Dir>& dirs);

/// Statements in a subtree.
int count_statements(const ir::NodePtr& n);
/// Whether any access in the subtree names `buffer`.
bool uses_buffer(const ir::NodePtr& n, const std::string& buffer);
/// Pre-order list of every scope's path (the canonical scope order of the action space).
std::vector<Path> scope_paths(const ir::Program& p);
/// Pre-order list of every node's path.
std::vector<Path> node_paths(const ir::Program& p);
/// A buffer name not yet used in `p`, starting from `base`.
std::string fresh_buffer_name(const ir::Program& p, const std::string& base);

}  // namespace perfdojo::transforms
