// Observation spaces over the IR. Each space declares whether it is deterministic and whether it
// depends on the platform (the features do: their last block describes the target; the others
// read the IR alone). Layouts: docs/env.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace perfdojo::env {

/// Static description of one observation space.
struct ObservationSpaceInfo {
  std::string name;        ///< "ir_text", "features", "tokens", "graph"
  std::string dtype;       ///< "str", "float32", "int32", "graph"
  std::vector<int> shape;  ///< fixed shape, empty for variable-size spaces
  bool deterministic = true;
  bool platform_dependent = false;
};

/// The loop tree as a graph: nodes are scopes, statements and buffers.
struct Graph {
  std::vector<float> node_features;  ///< num_nodes x kGraphNodeFeatures, row-major
  std::vector<int32_t> edge_src, edge_dst, edge_type;  ///< edge_type: kEdge* below
  int num_nodes = 0;
};

/// Graph edge kinds.
inline constexpr int kEdgeChild = 0;  ///< scope -> child (scope or statement)
inline constexpr int kEdgeNext = 1;   ///< node -> next sibling
inline constexpr int kEdgeRead = 2;   ///< statement -> buffer it reads
inline constexpr int kEdgeWrite = 3;  ///< statement -> buffer it writes
/// Features per graph node.
inline constexpr int kGraphNodeFeatures = 12;

/// Sizes of the fixed-size feature vector.
inline constexpr int kFeatureScopes = 96;
inline constexpr int kFeatureBuffers = 16;
inline constexpr int kGlobalFeatures = 10;
inline constexpr int kScopeFeatures = 12;
inline constexpr int kBufferFeatures = 6;
/// The target block, last: what the moves are for (TargetTraits).
inline constexpr int kTargetFeatures = 4;
/// Length of the feature vector.
inline constexpr int kFeatureSize = kGlobalFeatures + kFeatureScopes * kScopeFeatures +
                                    kFeatureBuffers * kBufferFeatures + kTargetFeatures;
/// Where the target block starts.
inline constexpr int kTargetFeaturesAt = kFeatureSize - kTargetFeatures;
/// Counts among the features (statements, scopes, depth, children, ...) are capped here.
inline constexpr int kFeatureCountCap = 1 << 20;
/// Each feature entry's bounds, always respected: log2(1+v) entries in [0, 1024], counts in [0,
/// kFeatureCountCap], flags and fractions in [0, 1], the cursor entry in [-1, cap / 24].
struct FeatureBounds {
  std::vector<float> low, high;
};
FeatureBounds feature_bounds();
/// Token sequence length (padded with 0, truncated beyond).
inline constexpr int kMaxTokens = 1024;
/// Vocabulary size of the token space.
int token_vocabulary_size();

/// Everything a step can observe; only the requested spaces are filled.
struct Observation {
  std::string ir_text;
  std::vector<float> features;
  std::vector<int32_t> tokens;
  Graph graph;
};

/// Which observation spaces to fill, parsed once from their names (Env::make).
struct ObservationSet {
  bool ir_text = false, features = false, tokens = false, graph = false;
  /// Adds the space `name`; false when there is no such space.
  bool add(const std::string& name);
};

/// Descriptions of every observation space.
const std::vector<ObservationSpaceInfo>& observation_spaces();
/// The description of `name`, or nullptr.
const ObservationSpaceInfo* find_observation_space(const std::string& name);

/// What the feature vector's last block says of the target the env's moves are for: the same
/// program asks for different tiles on a 16-lane, 32-register core than on an 8-lane,
/// 16-register one, and a policy that plays on both must see which it is on.
struct TargetTraits {
  int lanes = 0;      ///< f32 lanes of its widest vector (0: no vectors)
  int registers = 0;  ///< architectural vector registers
  bool fma = false;   ///< fused multiply-add
};

/// What features() made of each top-level node of the last program it saw with this memo: the
/// node's rows and totals, which depend on its subtree alone. A transformation shares the nodes
/// it did not change, so the next program's unchanged nests are copied. Features are
/// bit-identical with or without one. One per caller (each Env holds its own); not
/// thread-safe; a copy starts empty.
class FeatureMemo {
 public:
  FeatureMemo();
  ~FeatureMemo();
  FeatureMemo(const FeatureMemo&);
  FeatureMemo& operator=(const FeatureMemo&);
  /// Forgets everything.
  void clear();
  /// Nests remembered (those of the last program).
  size_t size() const;
  /// Nests copied, and nests made, since construction.
  uint64_t hits() const;
  uint64_t misses() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  friend std::vector<float> features(const ir::Program&, int, FeatureMemo*, const TargetTraits*);
};

/// The fixed-size feature vector; `cursor` is the cursor space's scope index or -1. The target
/// block is zeros (no target).
std::vector<float> features(const ir::Program& p, int cursor);
/// The same, reusing what `memo` (may be null) remembers of `p`'s unchanged nests; `target`
/// fills the target block (null: zeros).
std::vector<float> features(const ir::Program& p, int cursor, FeatureMemo* memo,
                            const TargetTraits* target = nullptr);
/// Token ids of the canonical IR text (fixed vocabulary; buffer and size names by slot).
std::vector<int32_t> tokens(const ir::Program& p);
/// The loop-tree graph.
Graph graph(const ir::Program& p);
/// Fills `spaces` of an observation, the features with `memo` (may be null).
Observation observe(const ir::Program& p, const ObservationSet& spaces, int cursor,
                    FeatureMemo* memo = nullptr, const TargetTraits* target = nullptr);

}  // namespace perfdojo::env
