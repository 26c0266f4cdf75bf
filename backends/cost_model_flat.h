// The cost model's view of a program: scopes, statements and accesses flattened in depth-first
// order, one top-level node (nest) at a time, with the cache lines each access touches and the
// footprint of every scope (the per-nest analysis). Internal to the cost model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/cost_model.h"
#include "backends/cost_model_params.h"

namespace perfdojo::backends::cost_detail {

using ir::Annot;

// ---- The flattened program: scopes, statements and accesses in depth-first order. ----

struct BufInfo {
  const ir::BufferDecl* decl;
  double esz;           // bytes per element
  double lines;         // cache lines of the whole buffer
  bool small_temp;      // a temporary of at most kRegisterElements elements: no cache traffic
  bool stream = false;  // declared `stream`: stores go to memory once, without a read for ownership
  bool fill = false;    // the generated code fills its initial value on every call (not when
                        // ir::initial_value_dead: every element overwritten, none read)
  int stride_off = 0;   // into Flat::strides: elements between consecutive indices, per dim
};

struct ScopeInfo {
  int64_t extent;  // trip count: a bounded scope's mean one (at least 1)
  int64_t box;     // the extent as declared (every iterator value lies below it)
  Annot annot;
  int depth;
  int parent;                // -1 at the top level
  int nest;                  // index of the top-level node it belongs to
  int par;                   // the parallel scope it is in (itself included), -1 if none
  bool has_par;              // a parallel scope lies inside it
  int acc_begin, acc_end;    // its accesses (depth-first order makes them contiguous)
  int kids_begin, kids_end;  // into the children pool: scope index, or ~statement index
  double f1_bytes[3] = {};   // footprint of one iteration, as each cache level sees it
  double fall_bytes = 0;     // footprint of one whole execution
  double fall_traffic = 0;   // the same with written lines counted twice (write-back)
  double fall_cost = 0;      // the same with scattered lines weighted by their extra cost
};

struct AccInfo {
  int buf;
  int stmt;
  bool write;
  int depth;     // enclosing scopes of its statement
  int coef_off;  // coefficient of each depth's iterator in the linear element offset
  int64_t constant;
  int canon;      // identical accesses share it
  int lines_off;  // lines touched with iterators of depth >= d free, for d = 0..depth
};

struct StmtInfo {
  const ir::Stmt* stmt;
  int depth;
  int chain_off;  // scope index per depth
  int acc_begin, acc_end;
  int nest;
};

// Cache lines one access touches for one choice of free iterators (see access_lines).
struct Lines {
  double lines = 0;
  double blocks = 1;
  double align = 1;
  bool scattered = false;  // one line or less per block: a line fetched for a few elements
};

struct Flat {
  std::vector<BufInfo> bufs;
  std::vector<ScopeInfo> scopes;
  std::vector<StmtInfo> stmts;
  std::vector<AccInfo> accs;
  std::vector<int> chains;       // pool
  std::vector<int64_t> coefs;    // pool
  std::vector<Lines> lines;      // pool
  std::vector<int> kids;         // pool
  std::vector<int64_t> strides;  // pool
  std::vector<int> stack;        // scratch of walk: children of the scopes being walked
  std::vector<int> top;          // top-level children: scope index or ~statement index
  int dropped = 0;               // accesses naming no declared buffer (left out)
  // Scratch of flatten and footprints.
  std::vector<int> chain, reps;
  std::vector<double> canon_lines, buf_lines;
  std::vector<char> buf_written, scattered;
};

// A set-associative cache level, for conflicts: `sets` sets of `ways` lines.
struct CacheGeometry {
  double sets = 0;  // 0: ignore conflicts
  double ways = 8;
};

// Pool offsets: where a nest's slices start in a Flat.
struct Bases {
  int scopes, stmts, accs, chains, kids, coefs;
};

inline Bases bases_of(const Flat& f) {
  return {static_cast<int>(f.scopes.size()), static_cast<int>(f.stmts.size()),
          static_cast<int>(f.accs.size()),   static_cast<int>(f.chains.size()),
          static_cast<int>(f.kids.size()),   static_cast<int>(f.coefs.size())};
}

template <class T>
std::span<T> tail(std::vector<T>& v, int from) {
  return {v.data() + from, v.size() - static_cast<size_t>(from)};
}

// Fills `f` (whose pools keep their storage from the previous program: cleared, not freed).
// Each top-level node is flattened on its own (every index inside it stays inside it); with a
// memo, a node the previous estimate saw is copied from it instead.
void flatten(const ir::Program& p, const MachineProfile& m, Flat& f, CostMemo::Impl* memo);

}  // namespace perfdojo::backends::cost_detail
