#include "gym/observation.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <span>

#include "ir/print.h"
#include "util/node_memo.h"

namespace perfdojo::env {
namespace {

float log2p(double v) { return static_cast<float>(std::log2(1.0 + std::max(0.0, v))); }
// A count as a feature, capped so that every entry stays within feature_bounds().
float count(double v) {
  return static_cast<float>(std::clamp(v, 0.0, static_cast<double>(kFeatureCountCap)));
}

struct ScopeInfo {
  const ir::Node* node;
  int depth;
};

void scopes_preorder(const std::vector<ir::NodePtr>& body, int depth, std::vector<ScopeInfo>& out) {
  for (const auto& c : body) {
    if (!c->is_scope) continue;
    out.push_back({c.get(), depth});
    scopes_preorder(c->body, depth + 1, out);
  }
}

void expr_loads(const ir::Expr& e, std::vector<const ir::Access*>& out) {
  if (e.kind == ir::ExprKind::kLoad) out.push_back(&e.access);
  for (const auto& a : e.args) expr_loads(*a, out);
}

// How the accesses inside a scope move with its iterator (its features' stride block).
struct AccessCounts {
  int zero = 0;     // invariant in the iterator
  int unit = 0;     // unit stride in the last dimension only
  int strided = 0;  // anything else
  int all = 0;
};

// count_accesses' scratch: per enclosing depth, how one access's index uses that iterator
// (zero on entry and on return), and the depths it uses.
struct StrideScratch {
  static constexpr uint8_t kLast = 1, kOther = 2;  // in the last dimension; in another one
  std::vector<uint8_t> use;
  std::vector<int> used;
};

// count_accesses' counts for one statement's accesses `acc`. An access is invariant in every
// iterator its index does not use, so each scope first counts all of them as invariant; then
// only the iterators an access uses are reclassified.
void count_statement(const std::vector<const ir::Access*>& acc, const std::vector<int>& stack,
                     std::vector<AccessCounts>& counts, StrideScratch& sc) {
  const int depth = static_cast<int>(stack.size());
  const int n = static_cast<int>(acc.size());
  for (int d = 0; d < depth; ++d) {
    if (stack[d] >= static_cast<int>(counts.size())) continue;
    counts[stack[d]].zero += n;
    counts[stack[d]].all += n;
  }
  if (sc.use.size() < static_cast<size_t>(depth)) sc.use.resize(depth, 0);
  for (const ir::Access* a : acc) {
    for (size_t m = 0; m < a->index.size(); ++m) {
      const auto& coeffs = a->index[m].coeffs;
      const uint8_t kind = m + 1 < a->index.size() ? StrideScratch::kOther : StrideScratch::kLast;
      const int top = std::min<int>(depth, static_cast<int>(coeffs.size()));
      for (int k = 0; k < top; ++k) {
        if (coeffs[k] == 0) continue;
        if (!sc.use[k]) sc.used.push_back(k);
        sc.use[k] |= kind;
      }
    }
    for (int d : sc.used) {
      const uint8_t use = sc.use[d];
      sc.use[d] = 0;
      if (stack[d] >= static_cast<int>(counts.size())) continue;
      AccessCounts& k = counts[stack[d]];
      --k.zero;
      if (use == StrideScratch::kLast && a->index.back().coeff(d) == 1)
        ++k.unit;
      else
        ++k.strided;
    }
    sc.used.clear();
  }
}

// One walk for every scope's counts: an access counts for each scope enclosing it, classified
// by that scope's iterator (its depth). `stack` holds the pre-order numbers of the enclosing
// scopes; only the first `counts.size()` scopes are counted.
void count_accesses(std::span<const ir::NodePtr> body, std::vector<int>& stack, int& next,
                    std::vector<const ir::Access*>& acc, std::vector<AccessCounts>& counts,
                    StrideScratch& sc) {
  for (const auto& c : body) {
    if (c->is_scope) {
      stack.push_back(next++);
      count_accesses(c->body, stack, next, acc, counts, sc);
      stack.pop_back();
      continue;
    }
    acc.clear();
    acc.push_back(&c->stmt.lhs);
    expr_loads(*c->stmt.rhs, acc);
    count_statement(acc, stack, counts, sc);
  }
}

int count_stmts(const ir::Node& n) {
  if (!n.is_scope) return 1;
  int c = 0;
  for (const auto& ch : n.body) c += count_stmts(*ch);
  return c;
}

double flops(const std::vector<ir::NodePtr>& body) {
  double f = 0;
  for (const auto& c : body) f += c->is_scope ? c->extent * flops(c->body) : 1.0;
  return f;
}

// Fixed vocabulary: punctuation and words first, then {k}, number buckets, name slots.
const std::vector<std::string>& words() {
  static const std::vector<std::string> kWords = {
      "<pad>", "<unk>", "\n",  "|",   "[",      "]",         "{",          "}",      "(",    ")",
      ",",     ":",     "=",   "+=",  "*=",     "+",         "-",          "*",      "/",    "?",
      "<",     "<=",    ">",   ">=",  "==",     "!=",        "input",      "output", "temp", "f32",
      "f64",   "i32",   "in",  "exp", "log",    "sqrt",      "rsqrt",      "tanh",   "abs",  "max",
      "min",   "inf",   "vec", "par", "unroll", "gpu_block", "gpu_thread", "<float>"};
  return kWords;
}
constexpr int kIterTokens = 64;  // {0}..{63}
constexpr int kIntBuckets = 24;  // integers by log2 bucket
constexpr int kNameSlots = 32;   // buffers and sizes by declaration order

}  // namespace

int token_vocabulary_size() {
  return static_cast<int>(words().size()) + kIterTokens + kIntBuckets + kNameSlots;
}

const std::vector<ObservationSpaceInfo>& observation_spaces() {
  static const std::vector<ObservationSpaceInfo> kSpaces = {
      {"ir_text", "str", {}, true, false},
      {"features", "float32", {kFeatureSize}, true, true},
      {"tokens", "int32", {kMaxTokens}, true, false},
      {"graph", "graph", {}, true, false},
  };
  return kSpaces;
}

const ObservationSpaceInfo* find_observation_space(const std::string& name) {
  for (const auto& s : observation_spaces())
    if (s.name == name) return &s;
  return nullptr;
}

namespace {

// What the feature vector takes from one top-level node: its share of the totals and the rows of
// its first kFeatureScopes scopes (pre-order within it; the cursor column left 0). Every figure
// depends on the node's subtree alone.
struct NestFeatures {
  double work = 0;  // its term of flops(p.body)
  int stmts = 0;
  int scopes = 0;
  int max_depth = 0;  // depth + 1 of its deepest scope, 0 without scopes
  std::vector<float> rows;
};

void nest_features(const ir::NodePtr& node, NestFeatures& out) {
  const ir::Node& n = *node;
  out.work = n.is_scope ? static_cast<double>(n.extent) * flops(n.body) : 1.0;
  out.stmts = count_stmts(n);
  std::vector<ScopeInfo> scopes;
  if (n.is_scope) {
    scopes.push_back({&n, 0});
    scopes_preorder(n.body, 1, scopes);
  }
  out.scopes = static_cast<int>(scopes.size());
  out.max_depth = 0;
  for (const auto& s : scopes) out.max_depth = std::max(out.max_depth, s.depth + 1);
  const int shown = std::min<int>(kFeatureScopes, out.scopes);
  std::vector<AccessCounts> counts(shown);
  {
    std::vector<int> stack;
    std::vector<const ir::Access*> acc;  // one statement's accesses, reused
    thread_local StrideScratch sc;       // storage kept between nests
    int next = 0;
    count_accesses(std::span<const ir::NodePtr>(&node, 1), stack, next, acc, counts, sc);
  }
  out.rows.assign(static_cast<size_t>(shown) * kScopeFeatures, 0.0f);
  for (int i = 0; i < shown; ++i) {
    const ir::Node& s = *scopes[i].node;
    float* row = &out.rows[static_cast<size_t>(i) * kScopeFeatures];
    bool innermost = true;
    for (const auto& c : s.body) innermost = innermost && !c->is_scope;
    const int d = scopes[i].depth;
    const int zero = counts[i].zero, unit = counts[i].unit, strided = counts[i].strided;
    float k = std::max<float>(1.0f, static_cast<float>(counts[i].all));
    row[0] = 1.0f;  // slot used
    row[1] = count(d);
    row[2] = log2p(static_cast<double>(s.extent));
    row[3] = s.annot == ir::Annot::kVector;
    row[4] = s.annot == ir::Annot::kParallel;
    row[5] = s.annot == ir::Annot::kUnroll;
    row[6] = innermost;
    row[7] = count(static_cast<double>(s.body.size()));
    row[8] = zero / k;      // accesses invariant in this scope's iterator
    row[9] = unit / k;      // unit-stride in the last dimension
    row[10] = strided / k;  // anything else (strided, non-last dimension)
  }
}

}  // namespace

struct FeatureMemo::Impl {
  NodeMemo<NestFeatures> nests;  // held by node, swept after each feature vector
};

FeatureMemo::FeatureMemo() : impl_(std::make_unique<Impl>()) {}
FeatureMemo::~FeatureMemo() = default;
FeatureMemo::FeatureMemo(const FeatureMemo&) : impl_(std::make_unique<Impl>()) {}
FeatureMemo& FeatureMemo::operator=(const FeatureMemo&) {
  clear();
  return *this;
}
void FeatureMemo::clear() { impl_ = std::make_unique<Impl>(); }
size_t FeatureMemo::size() const { return impl_->nests.size(); }
uint64_t FeatureMemo::hits() const { return impl_->nests.hits(); }
uint64_t FeatureMemo::misses() const { return impl_->nests.misses(); }

std::vector<float> features(const ir::Program& p, int cursor) {
  return features(p, cursor, nullptr);
}

FeatureBounds feature_bounds() {
  FeatureBounds b{std::vector<float>(kFeatureSize, 0.0f), std::vector<float>(kFeatureSize, 1.0f)};
  const float kLog = 1024.0f;  // log2(1 + v) of any finite double v
  const float kCount = static_cast<float>(kFeatureCountCap);
  for (int i : {0, 1, 2}) b.high[i] = kLog;
  for (int i : {3, 4, 5, 6, 7}) b.high[i] = kCount;
  b.low[9] = -1.0f;
  b.high[9] = kCount / kFeatureScopes;
  for (int s = 0; s < kFeatureScopes; ++s) {
    const int o = kGlobalFeatures + s * kScopeFeatures;
    b.high[o + 1] = kCount;  // depth
    b.high[o + 2] = kLog;    // log2(1 + extent)
    b.high[o + 7] = kCount;  // children
  }
  for (int i = 0; i < kFeatureBuffers; ++i) {
    const int o = kGlobalFeatures + kFeatureScopes * kScopeFeatures + i * kBufferFeatures;
    b.high[o + 3] = kLog;    // log2(1 + elements)
    b.high[o + 4] = kCount;  // rank
  }
  return b;
}

std::vector<float> features(const ir::Program& p, int cursor, FeatureMemo* memo,
                            const TargetTraits* target) {
  std::vector<float> f(kFeatureSize, 0.0f);
  NodeMemo<NestFeatures>* mem = memo ? &memo->impl_->nests : nullptr;
  if (mem) mem->begin();
  // Every top-level node's share, remembered or made.
  std::vector<const NestFeatures*> nests;
  nests.reserve(p.body.size());
  std::vector<NestFeatures> owned;  // without a memo
  if (!mem) owned.resize(p.body.size());
  for (size_t t = 0; t < p.body.size(); ++t) {
    const ir::NodePtr& node = p.body[t];
    auto make = [&](NestFeatures& nf) { nest_features(node, nf); };
    NestFeatures* nf = mem ? &mem->get(node, make) : &owned[t];
    if (!mem) make(*nf);
    nests.push_back(nf);
  }
  // Keep what this program has: the next one shares most of it (and nothing else is held).
  if (mem) mem->sweep();
  int max_depth = 0, stmts = 0, temps = 0, scopes = 0;
  double work = 0;
  for (const NestFeatures* n : nests) {
    work += n->work;
    stmts += n->stmts;
    scopes += n->scopes;
    max_depth = std::max(max_depth, n->max_depth);
  }
  double in_bytes = 0;
  for (const auto& b : p.buffers) {
    temps += b.role == ir::Role::kTemp;
    if (b.role != ir::Role::kTemp)
      in_bytes += static_cast<double>(b.elements()) * ir::dtype_bytes(b.dtype);
  }
  // Global block.
  f[0] = log2p(work);
  f[1] = log2p(in_bytes);
  f[2] = log2p(work / std::max(1.0, in_bytes));
  f[3] = count(stmts);
  f[4] = count(scopes);
  f[5] = count(max_depth);
  f[6] = count(static_cast<double>(p.buffers.size()));
  f[7] = count(temps);
  f[8] = static_cast<float>(scopes > kFeatureScopes);  // some scopes not shown
  f[9] = cursor >= 0 ? count(cursor) / kFeatureScopes : -1.0f;
  // Per-scope block: the nests' rows in order, as many as fit.
  int slot = 0;
  for (const NestFeatures* n : nests) {
    const int rows =
        std::min<int>(static_cast<int>(n->rows.size()) / kScopeFeatures, kFeatureScopes - slot);
    std::copy(n->rows.begin(), n->rows.begin() + static_cast<long>(rows) * kScopeFeatures,
              f.begin() + kGlobalFeatures + static_cast<long>(slot) * kScopeFeatures);
    slot += rows;
  }
  if (cursor >= 0 && cursor < slot) f[kGlobalFeatures + cursor * kScopeFeatures + 11] = 1.0f;
  // Per-buffer block.
  for (int i = 0; i < std::min<int>(kFeatureBuffers, static_cast<int>(p.buffers.size())); ++i) {
    const auto& b = p.buffers[i];
    float* row = &f[kGlobalFeatures + kFeatureScopes * kScopeFeatures + i * kBufferFeatures];
    row[0] = b.role == ir::Role::kInput;
    row[1] = b.role == ir::Role::kOutput;
    row[2] = b.role == ir::Role::kTemp;
    row[3] = log2p(static_cast<double>(b.elements()));
    row[4] = count(static_cast<double>(b.shape.size()));
    row[5] = b.init.has_value();
  }
  // Target block: lanes / 16, registers / 32, FMA, and 1 (a target is described).
  if (target) {
    float* row = &f[kTargetFeaturesAt];
    row[0] = std::clamp(target->lanes / 16.0f, 0.0f, 1.0f);
    row[1] = std::clamp(target->registers / 32.0f, 0.0f, 1.0f);
    row[2] = target->fma;
    row[3] = 1.0f;
  }
  return f;
}

std::vector<int32_t> tokens(const ir::Program& p) {
  const auto& w = words();
  static const std::map<std::string, int> kIndex = [] {
    std::map<std::string, int> m;
    for (size_t i = 0; i < words().size(); ++i) m[words()[i]] = static_cast<int>(i);
    return m;
  }();
  const int iter_base = static_cast<int>(w.size());
  const int int_base = iter_base + kIterTokens;
  const int name_base = int_base + kIntBuckets;
  std::map<std::string, int> names;
  for (const auto& s : p.sizes) names.emplace(s.name, static_cast<int>(names.size()));
  for (const auto& b : p.buffers) names.emplace(b.name, static_cast<int>(names.size()));
  std::string text = ir::print_program(ir::Program{{}, p.sizes, p.buffers, p.body});
  std::vector<int32_t> out;
  out.reserve(kMaxTokens);
  auto push = [&](int t) {
    if (static_cast<int>(out.size()) < kMaxTokens) out.push_back(t);
  };
  size_t i = 0;
  while (i < text.size() && static_cast<int>(out.size()) < kMaxTokens) {
    char c = text[i];
    if (c == ' ') {
      ++i;
      continue;
    }
    if (c == '{') {
      size_t j = text.find('}', i);
      int k = std::atoi(text.substr(i + 1, j - i - 1).c_str());
      push(k < kIterTokens ? iter_base + k : 1);
      i = j + 1;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < text.size() &&
             (std::isalnum(static_cast<unsigned char>(text[j])) ||
              (text[j] == '.' && text.compare(j, 2, "..") != 0) ||  // "1..": bounds, not a float
              ((text[j] == '-' || text[j] == '+') && (text[j - 1] == 'e')))) {
        is_float = is_float || !std::isdigit(static_cast<unsigned char>(text[j]));
        ++j;
      }
      if (is_float) {
        push(kIndex.at("<float>"));
      } else {
        double v = std::atof(text.substr(i, j - i).c_str());
        push(int_base + std::min(kIntBuckets - 1, static_cast<int>(std::log2(1.0 + v))));
      }
      i = j;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < text.size() &&
             (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_'))
        ++j;
      std::string word = text.substr(i, j - i);
      if (auto it = kIndex.find(word); it != kIndex.end())
        push(it->second);
      else if (auto n = names.find(word); n != names.end())
        push(n->second < kNameSlots ? name_base + n->second : 1);
      else
        push(1);
      i = j;
      continue;
    }
    std::string two = text.substr(i, 2);
    if (auto it = kIndex.find(two); two.size() == 2 && it != kIndex.end()) {
      push(it->second);
      i += 2;
      continue;
    }
    auto it = kIndex.find(std::string(1, c));
    push(it == kIndex.end() ? 1 : it->second);
    ++i;
  }
  out.resize(kMaxTokens, 0);
  return out;
}

Graph graph(const ir::Program& p) {
  Graph g;
  std::map<std::string, int> buffer_node;
  auto add_node = [&](std::initializer_list<float> feats) {
    std::vector<float> row(feats);
    row.resize(kGraphNodeFeatures, 0.0f);
    g.node_features.insert(g.node_features.end(), row.begin(), row.end());
    return g.num_nodes++;
  };
  auto edge = [&](int s, int d, int t) {
    g.edge_src.push_back(s);
    g.edge_dst.push_back(d);
    g.edge_type.push_back(t);
  };
  // Features: [is_scope, is_stmt, is_buffer, log2 extent/elements, depth, vec, par, unroll,
  //            reduction op (0 none, 1..4), input, output, temp]
  for (const auto& b : p.buffers) {
    buffer_node[b.name] = add_node({0, 0, 1, log2p(static_cast<double>(b.elements())), 0, 0, 0, 0,
                                    0, b.role == ir::Role::kInput ? 1.0f : 0.0f,
                                    b.role == ir::Role::kOutput ? 1.0f : 0.0f,
                                    b.role == ir::Role::kTemp ? 1.0f : 0.0f});
  }
  std::function<void(const std::vector<ir::NodePtr>&, int, int)> walk =
      [&](const std::vector<ir::NodePtr>& body, int parent, int depth) {
        int prev = -1;
        for (const auto& c : body) {
          int id;
          if (c->is_scope) {
            id = add_node({1, 0, 0, log2p(static_cast<double>(c->extent)),
                           static_cast<float>(depth), c->annot == ir::Annot::kVector ? 1.0f : 0.0f,
                           c->annot == ir::Annot::kParallel ? 1.0f : 0.0f,
                           c->annot == ir::Annot::kUnroll ? 1.0f : 0.0f});
            walk(c->body, id, depth + 1);
          } else {
            id = add_node(
                {0, 1, 0, 0, static_cast<float>(depth), 0, 0, 0, static_cast<float>(c->stmt.op)});
            edge(id, buffer_node[c->stmt.lhs.buffer], kEdgeWrite);
            std::vector<const ir::Access*> loads;
            expr_loads(*c->stmt.rhs, loads);
            for (const ir::Access* a : loads) edge(id, buffer_node[a->buffer], kEdgeRead);
          }
          if (parent >= 0) edge(parent, id, kEdgeChild);
          if (prev >= 0) edge(prev, id, kEdgeNext);
          prev = id;
        }
      };
  walk(p.body, -1, 0);
  return g;
}

bool ObservationSet::add(const std::string& name) {
  if (name == "ir_text")
    ir_text = true;
  else if (name == "features")
    features = true;
  else if (name == "tokens")
    tokens = true;
  else if (name == "graph")
    graph = true;
  else
    return false;
  return true;
}

Observation observe(const ir::Program& p, const ObservationSet& spaces, int cursor,
                    FeatureMemo* memo, const TargetTraits* target) {
  Observation o;
  if (spaces.ir_text) o.ir_text = ir::print_program(p);
  if (spaces.features) o.features = features(p, cursor, memo, target);
  if (spaces.tokens) o.tokens = tokens(p);
  if (spaces.graph) o.graph = graph(p);
  return o;
}

}  // namespace perfdojo::env
