// ChangeJournal: the indices of the nodes a ClusterState changed, in order, so that an
// incremental index over nodes (sched/node_index.h) can bring itself up to date by
// looking at the changed nodes only, instead of every node of a large cluster.
//
// A journal has an id, unique in the process. Positions are sequence numbers within that
// id: entry s names the node of the s-th change. Only the newest changes are kept (the
// journal drops its older half when it grows past its bound); a reader whose position is
// older than first() must rebuild from scratch. A copy starts a new history (new id, no
// entries) because the copy and the original change independently from then on; a
// moved-from journal gets a new id too. Structural changes that no node index can follow
// (nodes added, scan order changed) call Restart(): new id, no entries.
// Thread-compatible, like ClusterState.
#pragma once

#include <cstdint>
#include <vector>

namespace gpupool::sched {

class ChangeJournal {
 public:
  ChangeJournal() : id_(NextId()) {}
  ChangeJournal(const ChangeJournal&) : id_(NextId()) {}
  ChangeJournal& operator=(const ChangeJournal& other) {
    if (this != &other) Restart();
    return *this;
  }
  ChangeJournal(ChangeJournal&& other) noexcept
      : id_(other.id_), first_(other.first_), nodes_(std::move(other.nodes_)) {
    other.Restart();
  }
  ChangeJournal& operator=(ChangeJournal&& other) noexcept {
    if (this != &other) {
      id_ = other.id_;
      first_ = other.first_;
      nodes_ = std::move(other.nodes_);
      other.Restart();
    }
    return *this;
  }

  uint64_t id() const { return id_; }
  // Sequence number of the oldest change kept, and one past the newest.
  uint64_t first() const { return first_; }
  uint64_t end() const { return first_ + nodes_.size(); }
  // The node changed at sequence number s, first() <= s < end().
  int32_t at(uint64_t s) const { return nodes_[static_cast<size_t>(s - first_)]; }

  // Records a change of node `node`; keeps at most about `bound` entries.
  void Record(int32_t node, size_t bound) {
    if (nodes_.size() >= bound && bound > 0) {
      const size_t drop = nodes_.size() / 2;
      nodes_.erase(nodes_.begin(), nodes_.begin() + static_cast<std::ptrdiff_t>(drop));
      first_ += drop;
    }
    nodes_.push_back(node);
  }

  void Restart() {
    id_ = NextId();
    first_ = 0;
    nodes_.clear();
  }

 private:
  static uint64_t NextId();

  uint64_t id_;
  uint64_t first_ = 0;
  std::vector<int32_t> nodes_;
};

}  // namespace gpupool::sched
