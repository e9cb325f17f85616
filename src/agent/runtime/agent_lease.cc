// AgentLoop's side of the node lease (agent_loop.h, agent/node_lease.h): after each
// exchange that proves the controller knows this node, STATE/node_lease gets the lease's
// new deadline, which the shims of fenced tasks (jobs::FencedOnLoss) hold their jobs to.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "agent/node_lease.h"
#include "agent/runtime/agent_loop.h"

namespace gpupool::agent {

int64_t AgentLoop::BootNow() const {
  return options_.boot_clock ? options_.boot_clock() : agent::BootMicros();
}

void AgentLoop::RenewLease(int64_t sent_us, int64_t lease_ms) {
  lease_ms_ = std::max<int64_t>(lease_ms, 0);
  const std::string path = options_.state_dir + "/" + agent::kNodeLeaseFile;
  if (lease_ms <= 0) {
    // No lease (a controller without one): no file, so that no shim holds its job to a
    // lease an earlier controller gave.
    lease_written_deadline_.reset();
    if (lease_file_removed_) return;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      spdlog::warn("agent: cannot remove the node lease {}: {}", path, std::strerror(errno));
      return;
    }
    lease_file_removed_ = true;
    return;
  }
  lease_file_removed_ = false;
  // A quarter early: the controller counts from when it received the request, after it
  // was sent.
  const int64_t deadline = sent_us + lease_ms * 1000 * 3 / 4;
  if (lease_written_deadline_ && deadline >= *lease_written_deadline_ &&
      deadline - *lease_written_deadline_ < 1'000'000) {
    return;  // moved by less than a second: polls come far more often than the lease ends
  }
  if (Status st = agent::WriteNodeLease(path, {deadline, BootNow()}); !st.ok()) {
    // Tried again after the next exchange; meanwhile the shims keep the deadline they have.
    spdlog::warn("agent: {}", st.message());
    return;
  }
  lease_written_deadline_ = deadline;
}

std::string AgentLoop::LeaseFileFor(const jobs::Job& job) const {
  if (lease_ms_ <= 0 || !jobs::FencedOnLoss(job)) return "";
  return options_.state_dir + "/" + agent::kNodeLeaseFile;
}

int64_t AgentLoop::LeaseGraceFor(const jobs::Job& job) const {
  if (lease_ms_ <= 0 || !jobs::FencedOnLoss(job)) return 0;
  // At most an eighth of the lease: told at 5/8 of it at the earliest, after the
  // controller's node timeout (at most half of it) has passed.
  const int64_t most = lease_ms_ / 8000;
  int64_t grace = kill_wait_s_;  // as a cancel
  if (job.preemptible) grace = job.preempt_grace_s > 0 ? job.preempt_grace_s : most;
  return std::clamp<int64_t>(grace, 0, most);
}

}  // namespace gpupool::agent
