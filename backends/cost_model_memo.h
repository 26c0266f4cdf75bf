// The cost model's memo: what estimate_cost worked out for each top-level node of the last
// program (its slices of the Flat, footprints included), copied into the next program's Flat
// for the nodes it shares. Internal to the cost model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cost_model_flat.h"
#include "util/node_memo.h"

namespace perfdojo::backends::cost_detail {

// What one top-level node contributes to a Flat: its slices of the pools, with every index
// relative to the slice starts (a scope index s is s - first scope, and so on), its footprints
// already computed. Valid while the node, the machine's cache geometry and the buffers its
// accesses name (position and everything the model reads of them) are the same.
struct NestSlice {
  std::vector<ScopeInfo> scopes;
  std::vector<StmtInfo> stmts;
  std::vector<AccInfo> accs;
  std::vector<int> chains, kids;
  std::vector<int64_t> coefs;
  int top = 0;
  struct Buf {
    int index;
    std::string name;
    ir::DType dtype;
    ir::Role role;
    std::vector<int64_t> shape;
    bool stream;  // the footprints' traffic counts a streamed buffer's lines once
  };
  std::vector<Buf> bufs;  // the buffers its accesses name
};

}  // namespace perfdojo::backends::cost_detail

namespace perfdojo::backends {

struct CostMemo::Impl {
  NodeMemo<cost_detail::NestSlice> nests;  // held by node, swept after each estimate
  double geometry[4] = {};                 // the cache geometry the slices were made for
};

}  // namespace perfdojo::backends

namespace perfdojo::backends::cost_detail {

// Starts an estimate: forgets every nest when the cache geometry `geo` differs from the one
// the memo's nests were made with.
void memo_begin(CostMemo::Impl& memo, const CacheGeometry geo[4]);
// Appends the remembered slices of `node` as top-level node `nest` of `f` when the memo holds
// them and the buffers they name are unchanged in `p`; false (a miss) otherwise.
bool memo_append(CostMemo::Impl& memo, const ir::NodePtr& node, const ir::Program& p, Flat& f,
                 int nest);
// Remembers the slices of `f` from `b` on (the last nest flattened, top-level node `node`).
void memo_remember(CostMemo::Impl& memo, const ir::NodePtr& node, const ir::Program& p,
                   const Flat& f, const Bases& b);
// Ends an estimate: keeps what this program has (the next one shares most of it).
inline void memo_end(CostMemo::Impl& memo) { memo.nests.sweep(); }

}  // namespace perfdojo::backends::cost_detail
