#include "sim/timed/group_service.h"

namespace gpupool::sim {

void GroupService::Join(const std::string& group, int64_t submit_s, int64_t now_s) {
  Acc& a = groups_[group];
  ++a.in;
  a.in_submit += submit_s;
  ++a.waiting;
  a.waiting_since += now_s;
}

void GroupService::Start(const std::string& group, int64_t queued_at_s, int64_t now_s) {
  Acc& a = groups_[group];
  --a.waiting;
  a.waiting_since -= queued_at_s;
  a.in_waited += now_s - queued_at_s;
}

void GroupService::Stop(const std::string& group, int64_t lost_s, bool requeue, int64_t now_s) {
  Acc& a = groups_[group];
  a.in_lost += lost_s;
  if (requeue) {
    ++a.waiting;
    a.waiting_since += now_s;
  }
}

void GroupService::End(const std::string& group, int64_t submit_s, int64_t waited_s, int64_t lost_s,
                       int64_t now_s) {
  Acc& a = groups_[group];
  --a.in;
  a.in_submit -= submit_s;
  a.in_waited -= waited_s;
  a.in_lost -= lost_s;
  a.ended_system += now_s - submit_s;
  a.ended_run += now_s - submit_s - waited_s - lost_s;
}

double GroupService::ServiceRatio(std::string_view group, int64_t now_s) const {
  auto it = groups_.find(group);
  if (it == groups_.end()) return 1;
  const Acc& a = it->second;
  const int64_t in_system = a.in * now_s - a.in_submit;
  const int64_t waits = a.in_waited + a.waiting * now_s - a.waiting_since;
  const int64_t system = a.ended_system + in_system;
  if (system <= 0) return 1;
  const int64_t run = a.ended_run + in_system - waits - a.in_lost;
  return static_cast<double>(run) / static_cast<double>(system);
}

}  // namespace gpupool::sim
