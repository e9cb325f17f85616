#include "sched/node_index.h"

#include <bit>

namespace gpupool::sched {

void ScoreIndex::Reset(int32_t nodes) {
  size_ = nodes;
  leaves_ = std::bit_ceil(static_cast<size_t>(std::max(nodes, 1)));
  version_.assign(static_cast<size_t>(nodes), 0);
  value_.assign(leaves_, kAbsent);
  win_.assign(2 * leaves_, -1);
  pending_.assign((static_cast<size_t>(nodes) + 63) / 64, 0);
  Build();
  journal_id_ = 0;
  synced_ = 0;
}

void ScoreIndex::Build() {
  for (size_t p = 0; p < leaves_; ++p) win_[leaves_ + p] = static_cast<int32_t>(p);
  for (size_t k = leaves_ - 1; k >= 1; --k) win_[k] = Better(win_[2 * k], win_[2 * k + 1]);
}

void ScoreIndex::Update(int32_t pos, int64_t value) {
  value_[static_cast<size_t>(pos)] = value;
  for (size_t k = (leaves_ + static_cast<size_t>(pos)) / 2; k >= 1; k /= 2) {
    const int32_t w = Better(win_[2 * k], win_[2 * k + 1]);
    if (w == win_[k] && w != pos) break;  // nothing above can change
    win_[k] = w;
  }
}

void ScoreIndex::Set(int32_t node, int32_t pos, uint64_t version, int64_t value) {
  version_[static_cast<size_t>(node)] = version;
  if (value_[static_cast<size_t>(pos)] != value) Update(pos, value);
}

int64_t ScoreIndex::Exclude(int32_t pos) {
  const int64_t old = value_[static_cast<size_t>(pos)];
  Update(pos, kAbsent);
  return old;
}

ScoreIndex& ScoreIndexSet::Get(const TaskShape& key) {
  if (auto it = map_.find(key); it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.index;
  }
  Evict();
  lru_.push_front(key);
  Slot& slot = map_[key];
  slot.lru = lru_.begin();
  return slot.index;
}

void ScoreIndexSet::Evict() {
  size_t used = 0;
  for (const auto& [key, slot] : map_) used += slot.index.bytes();
  while (used > budget_ && !lru_.empty()) {
    auto it = map_.find(lru_.back());
    used -= it->second.index.bytes();
    map_.erase(it);
    lru_.pop_back();
  }
}

}  // namespace gpupool::sched
