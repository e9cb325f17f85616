#include "controller/job_index.h"

#include <algorithm>
#include <iterator>
#include <type_traits>

namespace gpupool::controller {

namespace {

const std::set<int64_t>& Empty() {
  static const std::set<int64_t> empty;
  return empty;
}

bool HoldsResources(const jobs::Job& job) {
  return job.state == jobs::JobState::kAssigned || job.state == jobs::JobState::kRunning;
}
bool Timed(const jobs::Job& job) { return job.time_limit_s > 0; }
bool IsRun(const jobs::Job& job) { return job.interactive == "run"; }
bool WaitsForLease(const jobs::Job& job) {
  return job.state == jobs::JobState::kPending && !job.fences.empty();
}

template <typename Key, typename Less>
void Erase(std::map<Key, std::set<int64_t>, Less>& index, const Key& key, int64_t id) {
  auto it = index.find(key);
  if (it == index.end()) return;
  it->second.erase(id);
  if (it->second.empty()) index.erase(it);  // no empty sets: Verify compares whole maps
}

// The first id in one of `a` and `b` and not the other, as text.
std::string FirstDifference(const std::set<int64_t>& a, const std::set<int64_t>& b) {
  std::vector<int64_t> diff;
  std::set_symmetric_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(diff));
  return diff.empty() ? "none" : "job " + std::to_string(diff.front());
}

template <typename Key, typename Less>
Status Compare(const char* what, const std::map<Key, std::set<int64_t>, Less>& kept,
               const std::map<Key, std::set<int64_t>, Less>& walked) {
  if (kept == walked) return Status::Ok();
  std::set<Key> keys;
  for (const auto& [k, ids] : kept) keys.insert(k);
  for (const auto& [k, ids] : walked) keys.insert(k);
  for (const Key& k : keys) {
    auto a = kept.find(k);
    auto b = walked.find(k);
    const std::set<int64_t>& x = a == kept.end() ? Empty() : a->second;
    const std::set<int64_t>& y = b == walked.end() ? Empty() : b->second;
    if (x == y) continue;
    std::string key;
    if constexpr (std::is_same_v<Key, std::string>) {
      key = k;
    } else {
      key = std::to_string(k);
    }
    return Status::Internal(
        std::string("job index ") + what + " " + key + ": " + std::to_string(x.size()) +
        " jobs kept, " + std::to_string(y.size()) +
        " by a walk of the active jobs (first difference: " + FirstDifference(x, y) + ")");
  }
  return Status::Internal(std::string("job index ") + what + ": differs");
}

}  // namespace

void JobIndex::Remove(int64_t id, const Entry& e) {
  Erase(of_user_, e.user, id);
  if (e.array_id != 0) Erase(arrays_, e.array_id, id);
  for (const std::string& node : e.nodes) Erase(on_node_, node, id);
  occupying_.erase(id);
  timed_.erase(id);
  runs_.erase(id);
  pending_deps_.erase(id);
  pending_fenced_.erase(id);
}

void JobIndex::Update(int64_t id, const jobs::Job* job) {
  auto it = entries_.find(id);
  if (it != entries_.end()) Remove(id, it->second);
  if (job == nullptr) {
    if (it != entries_.end()) entries_.erase(it);
    return;
  }
  if (it == entries_.end()) it = entries_.emplace(id, Entry{}).first;
  Entry& e = it->second;
  e.user = job->user;
  e.array_id = job->array_id;
  e.nodes.clear();
  e.pending_deps = job->state == jobs::JobState::kPending && !job->dependencies.empty();
  of_user_[e.user].insert(id);
  if (e.array_id != 0) arrays_[e.array_id].insert(id);
  if (e.pending_deps) pending_deps_.insert(id);
  e.pending_fenced = WaitsForLease(*job);
  if (e.pending_fenced) pending_fenced_.insert(id);
  if (HoldsResources(*job)) {
    occupying_.insert(id);
    if (Timed(*job)) timed_.insert(id);
    if (IsRun(*job)) runs_.insert(id);
    for (const jobs::TaskPlacement& p : job->placement) {
      if (std::find(e.nodes.begin(), e.nodes.end(), p.node) == e.nodes.end()) {
        e.nodes.push_back(p.node);
      }
    }
    for (const std::string& node : e.nodes) on_node_[node].insert(id);
  }
}

const std::set<int64_t>& JobIndex::OnNode(const std::string& node) const {
  auto it = on_node_.find(node);
  return it == on_node_.end() ? Empty() : it->second;
}

const std::set<int64_t>& JobIndex::OfUser(const std::string& user) const {
  auto it = of_user_.find(user);
  return it == of_user_.end() ? Empty() : it->second;
}

const std::set<int64_t>& JobIndex::ArrayElements(int64_t array_id) const {
  auto it = arrays_.find(array_id);
  return it == arrays_.end() ? Empty() : it->second;
}

Status JobIndex::Verify(const std::map<int64_t, jobs::Job>& active) const {
  // Each index as a walk of every active job makes it, with no help from entries_.
  std::set<int64_t> occupying;
  std::set<int64_t> timed;
  std::set<int64_t> runs;
  std::set<int64_t> pending_deps;
  std::set<int64_t> pending_fenced;
  std::map<std::string, std::set<int64_t>, std::less<>> on_node;
  std::map<std::string, std::set<int64_t>, std::less<>> of_user;
  std::map<int64_t, std::set<int64_t>> arrays;
  for (const auto& [id, job] : active) {
    of_user[job.user].insert(id);
    if (job.array_id != 0) arrays[job.array_id].insert(id);
    if (job.state == jobs::JobState::kPending && !job.dependencies.empty()) {
      pending_deps.insert(id);
    }
    if (WaitsForLease(job)) pending_fenced.insert(id);
    if (!HoldsResources(job)) continue;
    occupying.insert(id);
    if (Timed(job)) timed.insert(id);
    if (IsRun(job)) runs.insert(id);
    for (const jobs::TaskPlacement& p : job.placement) on_node[p.node].insert(id);
  }
  if (entries_.size() != active.size()) {
    return Status::Internal("job index: " + std::to_string(entries_.size()) + " jobs kept, " +
                            std::to_string(active.size()) + " active");
  }
  if (occupying != occupying_) {
    return Status::Internal("job index of jobs holding resources differs from a walk (" +
                            FirstDifference(occupying_, occupying) + ")");
  }
  if (timed != timed_) {
    return Status::Internal(
        "job index of jobs holding resources with a time limit differs from "
        "a walk (" +
        FirstDifference(timed_, timed) + ")");
  }
  if (runs != runs_) {
    return Status::Internal(
        "job index of `gpupool run` jobs holding resources differs from a "
        "walk (" +
        FirstDifference(runs_, runs) + ")");
  }
  if (pending_deps != pending_deps_) {
    return Status::Internal("job index of pending jobs with dependencies differs from a walk (" +
                            FirstDifference(pending_deps_, pending_deps) + ")");
  }
  if (pending_fenced != pending_fenced_) {
    return Status::Internal(
        "job index of pending jobs waiting for a node's lease differs from a "
        "walk (" +
        FirstDifference(pending_fenced_, pending_fenced) + ")");
  }
  GP_RETURN_IF_ERROR(Compare("of node", on_node_, on_node));
  GP_RETURN_IF_ERROR(Compare("of user", of_user_, of_user));
  return Compare("of array", arrays_, arrays);
}

}  // namespace gpupool::controller
