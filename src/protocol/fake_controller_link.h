// FakeControllerLink: an in-process controller for tests of the agent (a ControllerLink
// test double). It answers as a controller would, from what the test scripted, and
// records everything the agent sent:
//   - Register: recorded; the reply carries version() (SetVersion), "fake" as address and
//     the node lease set by SetNodeLease (0 until then), or the error RefuseRegistrations set;
//   - PollWork: the next queued Work (QueueWork), else an empty one after wait_ms of the
//     injected clock; while HoldPolls(true), a poll waits until released or Shutdown;
//   - PostEvents, PostTelemetry, AnswerLogRead, PostExecOutput: recorded and acknowledged
//     (event batches refused, as by a busy controller, and recorded while RefuseEvents(true));
//   - TakeExecInput: the items queued for the session (QueueExecInput) after `after`;
//   - SetAway(true): every call fails as with an unreachable controller (kUnavailable);
//     ForgetNode(): polls (the one in flight too) and telemetry posts are kNotFound until
//     the agent registers again.
// Tests wait for what they expect with WaitFor(predicate), which wakes on every change.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "protocol/controller_link.h"

namespace gpupool::protocol {

class FakeControllerLink final : public ControllerLink {
 public:
  // What the agent said, in order.
  struct Recorded {
    std::vector<Registration> registrations;
    int polls = 0;                                  // PollWork calls that reached the controller
    std::vector<EventBatch> event_batches;          // acknowledged
    std::vector<EventBatch> refused_event_batches;  // refused (RefuseEvents), in order
    std::vector<GpuTelemetry> telemetry;            // every sample of every batch
    int telemetry_posts = 0;                        // batches, accepted or refused
    std::vector<DiskReport> disk_reports;           // accepted, in order
    std::vector<LogAnswer> log_answers;
    std::vector<ExecOutput> exec_outputs;
    bool shut_down = false;
    // Every event of every batch, in order.
    std::vector<Event> Events() const;
  };

  // `clock` times the polls' waits (null: the system clock); it must outlive the link.
  explicit FakeControllerLink(const Clock* clock = nullptr);

  void SetVersion(Version v);
  void SetNodeLease(int64_t lease_ms);  // what later registrations are answered
  void SetKillWait(int64_t seconds);    // likewise (RegistrationReply::kill_wait_s)
  // Later registrations are recorded and answered `why` (Ok: accepted again).
  void RefuseRegistrations(Status why);
  void SetAway(bool away);
  void ForgetNode();
  void HoldPolls(bool hold);
  void RefuseEvents(bool refuse);
  void QueueWork(Work work);
  void QueueExecInput(int64_t exec_id, ExecInputItem item);

  // A copy of what was recorded so far.
  Recorded recorded() const;
  // Blocks (real time, up to `timeout_ms`) until `done(recorded)` holds; returns whether
  // it did.
  bool WaitFor(const std::function<bool(const Recorded&)>& done, int timeout_ms = 10'000) const;

  Result<RegistrationReply> Register(const Registration& registration) override;
  Result<Work> PollWork(const std::string& node, int wait_ms) override;
  Status PostEvents(const EventBatch& batch) override;
  Status PostTelemetry(const TelemetryBatch& batch) override;
  Status AnswerLogRead(const LogAnswer& answer) override;
  Result<ExecOutputAck> PostExecOutput(int64_t exec_id, const std::string& node,
                                       const ExecOutput& output, int wait_ms) override;
  Result<ExecInput> TakeExecInput(int64_t exec_id, const std::string& node, int64_t after,
                                  int wait_ms) override;
  void Shutdown() override;

 private:
  // Unavailable while away or shut down (callers hold mu_).
  Status ReachableLocked() const;
  void Changed() { cv_.notify_all(); }

  const Clock* clock_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // any change: work queued, a call recorded, stop
  Version version_ = kVersion;
  int64_t node_lease_ms_ = 0;
  int64_t kill_wait_s_ = 0;
  bool away_ = false;
  bool forgot_node_ = false;
  bool hold_polls_ = false;
  bool refuse_events_ = false;
  Status refuse_registration_;
  std::deque<Work> work_;
  std::map<int64_t, std::vector<ExecInputItem>> exec_input_;
  Recorded recorded_;
};

}  // namespace gpupool::protocol
