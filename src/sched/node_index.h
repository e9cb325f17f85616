// ScoreIndex: every node's score for one task key, kept in a tournament tree over the
// scan order so that the best node (highest score, first in scan order among equals) is
// read at the root instead of found by scoring every node in every placement cycle.
//
// FrameworkPolicy (framework.h) keeps one index per key of an indexable score plugin
// (ScorePlugin::IndexKey) and brings it up to date before each cycle from the cluster's
// change journal (change_journal.h): only the nodes changed since the index last looked
// are scored again, O(changes x log nodes). A node's value is its score, or kAbsent when
// it cannot host the key's shape; the tree orders positions by (value descending,
// position ascending), exactly the order in which FrameworkPolicy's full scan would pick
// a winner, so both give the same decision.
//
// A lazy index (ScorePlugin::CachedScoreKey) does not score a changed node when it syncs:
// it marks the node pending, and FrameworkPolicy scores the pending nodes that pass a
// task's filters with that task, in scan order, before it reads the root.
//
// ScoreIndexSet holds the indexes of one policy, evicting the least recently used ones
// beyond a memory budget. Single-threaded, like policies.
#pragma once

#include <cstdint>
#include <limits>
#include <list>
#include <unordered_map>
#include <vector>

#include "sched/cluster_state.h"
#include "sched/task.h"

namespace gpupool::sched {

class ScoreIndex {
 public:
  static constexpr int64_t kAbsent = std::numeric_limits<int64_t>::min();

  // Where the index stands against a cluster's journal.
  uint64_t journal_id() const { return journal_id_; }
  uint64_t synced() const { return synced_; }
  void MarkSynced(uint64_t journal_id, uint64_t position) {
    journal_id_ = journal_id;
    synced_ = position;
  }

  // Resizes for `nodes` nodes (as many scan positions), every value kAbsent, no version known.
  void Reset(int32_t nodes);
  int32_t size() const { return size_; }

  // The node version the value at `node` was computed for (0: never).
  uint64_t version(int32_t node) const { return version_[static_cast<size_t>(node)]; }
  // Sets the value at scan position `pos` (of node `node`, at `version`).
  void Set(int32_t node, int32_t pos, uint64_t version, int64_t value);
  // Sets leaves without repairing the tree (for a rebuild); call Build() after.
  void SetLeaf(int32_t node, int32_t pos, uint64_t version, int64_t value) {
    version_[static_cast<size_t>(node)] = version;
    value_[static_cast<size_t>(pos)] = value;
  }
  void Build();

  // The best scan position, or -1 when every value is kAbsent.
  int32_t Best() const {
    const int32_t p = win_.size() > 1 ? win_[1] : -1;
    return p >= 0 && value_[static_cast<size_t>(p)] != kAbsent ? p : -1;
  }
  int64_t value(int32_t pos) const { return value_[static_cast<size_t>(pos)]; }
  // Takes position `pos` out of the running until Restore(); returns its value.
  int64_t Exclude(int32_t pos);
  void Restore(int32_t pos, int64_t value) { Update(pos, value); }

  // Lazy indexes (ScorePlugin::CachedScoreKey): scan positions whose value is not known
  // yet (kAbsent meanwhile), a bit per position; Reset() clears them.
  void SetPending(int32_t pos, bool pending) {
    const uint64_t bit = uint64_t{1} << (static_cast<size_t>(pos) % 64);
    uint64_t& word = pending_[static_cast<size_t>(pos) / 64];
    word = pending ? word | bit : word & ~bit;
  }
  const std::vector<uint64_t>& pending() const { return pending_; }

  size_t bytes() const {
    return version_.capacity() * sizeof(uint64_t) + value_.capacity() * sizeof(int64_t) +
           win_.capacity() * sizeof(int32_t) + pending_.capacity() * sizeof(uint64_t);
  }

 private:
  int32_t Better(int32_t a, int32_t b) const {
    // a's range lies left of b's, so on equal values a wins.
    return value_[static_cast<size_t>(b)] > value_[static_cast<size_t>(a)] ? b : a;
  }
  void Update(int32_t pos, int64_t value);

  uint64_t journal_id_ = 0;  // 0: never synced (journal ids start at 1)
  uint64_t synced_ = 0;
  int32_t size_ = 0;
  size_t leaves_ = 0;              // a power of two >= size_
  std::vector<uint64_t> version_;  // per node index
  std::vector<int64_t> value_;     // per scan position, padded to leaves_ with kAbsent
  std::vector<int32_t> win_;       // win_[k]: best position under tree node k (root 1)
  std::vector<uint64_t> pending_;  // by scan position (lazy indexes only)
};

class ScoreIndexSet {
 public:
  explicit ScoreIndexSet(size_t memory_budget_bytes) : budget_(memory_budget_bytes) {}

  // The index for `key`, created empty (journal_id() == 0) when new; may evict others.
  ScoreIndex& Get(const TaskShape& key);
  size_t count() const { return map_.size(); }
  void Clear() {
    map_.clear();
    lru_.clear();
  }

 private:
  struct Hash {
    size_t operator()(const TaskShape& s) const { return HashShape(s); }
  };
  struct Slot {
    ScoreIndex index;
    std::list<TaskShape>::iterator lru;
  };
  void Evict();

  size_t budget_;
  std::unordered_map<TaskShape, Slot, Hash> map_;
  std::list<TaskShape> lru_;  // most recently used first
};

}  // namespace gpupool::sched
