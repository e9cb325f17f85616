#include "protocol/fake_controller_link.h"

#include <chrono>

namespace gpupool::protocol {

std::vector<Event> FakeControllerLink::Recorded::Events() const {
  std::vector<Event> out;
  for (const EventBatch& b : event_batches) out.insert(out.end(), b.events.begin(), b.events.end());
  return out;
}

FakeControllerLink::FakeControllerLink(const Clock* clock)
    : clock_(clock != nullptr ? clock : SystemClock::Get()) {}

void FakeControllerLink::SetVersion(Version v) {
  std::lock_guard lock(mu_);
  version_ = v;
}

void FakeControllerLink::SetNodeLease(int64_t lease_ms) {
  std::lock_guard lock(mu_);
  node_lease_ms_ = lease_ms;
}

void FakeControllerLink::SetKillWait(int64_t seconds) {
  std::lock_guard lock(mu_);
  kill_wait_s_ = seconds;
}

void FakeControllerLink::RefuseRegistrations(Status why) {
  std::lock_guard lock(mu_);
  refuse_registration_ = std::move(why);
}

void FakeControllerLink::SetAway(bool away) {
  std::lock_guard lock(mu_);
  away_ = away;
  Changed();
}

void FakeControllerLink::ForgetNode() {
  std::lock_guard lock(mu_);
  forgot_node_ = true;
  Changed();
}

void FakeControllerLink::HoldPolls(bool hold) {
  std::lock_guard lock(mu_);
  hold_polls_ = hold;
  Changed();
}

void FakeControllerLink::RefuseEvents(bool refuse) {
  std::lock_guard lock(mu_);
  refuse_events_ = refuse;
  Changed();
}

void FakeControllerLink::QueueWork(Work work) {
  std::lock_guard lock(mu_);
  work_.push_back(std::move(work));
  Changed();
}

void FakeControllerLink::QueueExecInput(int64_t exec_id, ExecInputItem item) {
  std::lock_guard lock(mu_);
  exec_input_[exec_id].push_back(std::move(item));
  Changed();
}

FakeControllerLink::Recorded FakeControllerLink::recorded() const {
  std::lock_guard lock(mu_);
  return recorded_;
}

bool FakeControllerLink::WaitFor(const std::function<bool(const Recorded&)>& done,
                                 int timeout_ms) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done(recorded_); });
}

Status FakeControllerLink::ReachableLocked() const {
  if (recorded_.shut_down) return Status::Unavailable("cancelled: the agent stops");
  if (away_) return Status::Unavailable("the controller is away (fake)");
  return Status::Ok();
}

Result<RegistrationReply> FakeControllerLink::Register(const Registration& registration) {
  std::lock_guard lock(mu_);
  GP_RETURN_IF_ERROR(ReachableLocked());
  recorded_.registrations.push_back(registration);
  Changed();
  if (!refuse_registration_.ok()) return refuse_registration_;
  forgot_node_ = false;
  RegistrationReply reply{version_, "fake", node_lease_ms_};
  reply.kill_wait_s = kill_wait_s_;
  return reply;
}

Result<Work> FakeControllerLink::PollWork(const std::string& node, int wait_ms) {
  std::unique_lock lock(mu_);
  GP_RETURN_IF_ERROR(ReachableLocked());
  if (forgot_node_) return Status::NotFound("node " + node + " is not registered (fake)");
  ++recorded_.polls;
  Changed();
  const int64_t deadline = clock_->MonotonicMicros() + int64_t{wait_ms} * 1000;
  while (true) {
    if (recorded_.shut_down) return Status::Unavailable("cancelled: the agent stops");
    if (forgot_node_) return Status::NotFound("node " + node + " is not registered (fake)");
    if (!work_.empty() && !hold_polls_) {
      Work w = std::move(work_.front());
      work_.pop_front();
      Changed();
      return w;
    }
    if (!hold_polls_ && !clock_->WaitOnce(cv_, lock, deadline)) break;
    if (hold_polls_) cv_.wait(lock);
  }
  return Work{};
}

Status FakeControllerLink::PostEvents(const EventBatch& batch) {
  std::lock_guard lock(mu_);
  GP_RETURN_IF_ERROR(ReachableLocked());
  if (refuse_events_) {
    recorded_.refused_event_batches.push_back(batch);
    Changed();
    return Status::Unavailable("the controller is busy (fake)");
  }
  recorded_.event_batches.push_back(batch);
  Changed();
  return Status::Ok();
}

Status FakeControllerLink::PostTelemetry(const TelemetryBatch& batch) {
  std::lock_guard lock(mu_);
  ++recorded_.telemetry_posts;
  Changed();
  GP_RETURN_IF_ERROR(ReachableLocked());
  if (forgot_node_) return Status::NotFound("node " + batch.node + " is not registered (fake)");
  recorded_.telemetry.insert(recorded_.telemetry.end(), batch.samples.begin(), batch.samples.end());
  if (batch.disk) recorded_.disk_reports.push_back(*batch.disk);
  return Status::Ok();
}

Status FakeControllerLink::AnswerLogRead(const LogAnswer& answer) {
  std::lock_guard lock(mu_);
  GP_RETURN_IF_ERROR(ReachableLocked());
  recorded_.log_answers.push_back(answer);
  Changed();
  return Status::Ok();
}

Result<ExecOutputAck> FakeControllerLink::PostExecOutput(int64_t, const std::string&,
                                                         const ExecOutput& output, int) {
  std::lock_guard lock(mu_);
  GP_RETURN_IF_ERROR(ReachableLocked());
  recorded_.exec_outputs.push_back(output);
  Changed();
  return ExecOutputAck{};
}

Result<ExecInput> FakeControllerLink::TakeExecInput(int64_t exec_id, const std::string&,
                                                    int64_t after, int wait_ms) {
  std::unique_lock lock(mu_);
  const int64_t deadline = clock_->MonotonicMicros() + int64_t{wait_ms} * 1000;
  ExecInput in;
  clock_->WaitUntil(cv_, lock, deadline, [&] {
    if (!ReachableLocked().ok()) return true;
    for (const ExecInputItem& item : exec_input_[exec_id]) {
      if (item.seq > after) return true;
    }
    return false;
  });
  GP_RETURN_IF_ERROR(ReachableLocked());
  for (const ExecInputItem& item : exec_input_[exec_id]) {
    if (item.seq > after) in.items.push_back(item);
  }
  return in;
}

void FakeControllerLink::Shutdown() {
  std::lock_guard lock(mu_);
  recorded_.shut_down = true;
  Changed();
}

}  // namespace gpupool::protocol
