// NodeMemo: results worked out for IR nodes, kept from one program to the next.
//
// The IR is immutable and a transformation shares the nodes it did not change, so a result that
// depends on a node's subtree alone (the cost model's analysis of a nest, the features of a nest,
// the action mask's verdicts about a node) can be copied for the next program's unchanged nodes
// instead of worked out again. A NodeMemo keys such results by node address and holds each node
// (a shared pointer) while it remembers it, so an address is never reused for another node
// meanwhile. Each use (one program) is an epoch: begin() starts it, every entry the use meets is
// marked seen, and sweep() forgets the entries it did not meet, except the pinned ones (pin()
// keeps the nodes of the current use, e.g. an episode's starting program, to which every reset
// returns). It counts hits and misses. Not thread-safe: one per caller.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "ir/ir.h"

namespace perfdojo {

/// Remembered `Value`s keyed by the IR node they were worked out for. `Epoch`: the counter type
/// (a memo that keeps many small entries may use a narrower one).
template <class Value, class Epoch = uint64_t>
class NodeMemo {
 public:
  struct Entry {
    ir::NodePtr node;     ///< held: its address stays this node's while remembered
    Epoch seen = 0;       ///< the last use that met it
    bool pinned = false;  ///< kept while unseen (pin)
    Value value{};
  };

  /// Starts a use (one program): entries met from now on are marked with the new epoch.
  void begin() { ++epoch_; }
  Epoch epoch() const { return epoch_; }

  /// The value remembered for `node` when there is one and `holds(value)` says it is still
  /// valid: marked seen, counted as a hit. Otherwise counts a miss, forgets an invalid entry and
  /// returns null (the caller works the value out and remember()s it).
  template <class Holds>
  Value* find(const ir::Node* node, Holds holds) {
    auto it = entries_.find(node);
    if (it != entries_.end()) {
      if (holds(it->second.value)) {
        it->second.seen = epoch_;
        ++hits_;
        return &it->second.value;
      }
      entries_.erase(it);
    }
    ++misses_;
    return nullptr;
  }
  Value* find(const ir::Node* node) {
    return find(node, [](const Value&) { return true; });
  }

  /// The value remembered for `node` (a hit), or a new one `make(value)` fills (a miss); marked
  /// seen. One lookup either way: for values that stay valid as long as their node.
  template <class Make>
  Value& get(const ir::NodePtr& node, Make make) {
    Entry& e = entries_[node.get()];
    e.seen = epoch_;
    if (e.node) {
      ++hits_;
    } else {
      ++misses_;
      e.node = node;
      make(e.value);
    }
    return e.value;
  }

  /// A fresh value for `node`, seen in this use, to be filled by the caller (replaces any).
  Value& remember(const ir::NodePtr& node) {
    Entry& e = entries_[node.get()];
    e = Entry{};
    e.node = node;
    e.seen = epoch_;
    return e.value;
  }

  /// The entry for `node`, made empty (`node` null) when there is none, marked seen. For callers
  /// that look a value up and decide in place whether it still holds (count_hit / count_miss).
  Entry& entry(const ir::Node* node) {
    Entry& e = entries_[node];
    e.seen = epoch_;
    return e;
  }
  void count_hit() { ++hits_; }
  void count_miss() { ++misses_; }

  /// Forgets the entries this use did not meet, except pinned ones.
  void sweep() {
    std::erase_if(entries_,
                  [&](const auto& e) { return e.second.seen != epoch_ && !e.second.pinned; });
  }
  /// Pins the entries this use met, unpins the others (they go at the next sweep).
  void pin() {
    for (auto& [node, e] : entries_) e.pinned = e.seen == epoch_;
  }

  /// Forgets every entry (the counters and the epoch stay).
  void clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  /// Every entry, for callers that revise remembered values in bulk.
  std::unordered_map<const ir::Node*, Entry>& entries() { return entries_; }

 private:
  std::unordered_map<const ir::Node*, Entry> entries_;
  Epoch epoch_ = 0;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace perfdojo
