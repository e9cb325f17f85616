#include "controller/job_words.h"

#include <optional>

#include "protocol/kill_cause.h"

namespace gpupool::controller::lifecycle::words {

std::string TaskName(const jobs::Job& job, size_t t) {
  std::string s = "task " + std::to_string(t);
  if (t < job.placement.size()) s += " (node " + job.placement[t].node + ")";
  return s;
}

std::string OldAgentBeyondTheSignal(const std::string& reason) {
  std::string r = reason;
  if (size_t at = r.rfind(" (ended by "); at != std::string::npos && r.ends_with(')')) {
    r.erase(at);
  } else if (size_t semi = r.rfind("; ended by "); semi != std::string::npos) {
    r.erase(semi);
  }
  return r.starts_with("ended by ") ? std::string() : r;
}

std::string BeyondTheSignal(const jobs::TaskStatus& t) {
  const std::optional<protocol::KillCause> cause = protocol::ParseKillCause(t.kill_cause);
  if (cause && *cause != protocol::KillCause::kUnknown) return t.kill_detail;
  return OldAgentBeyondTheSignal(t.reason);
}

std::string TaskOutcome(const jobs::TaskStatus& t) {
  if (t.timed_out) return "reached its time limit";
  if (t.signal) {
    const std::string beyond = BeyondTheSignal(t);
    return "was killed by signal " + std::to_string(*t.signal) +
           (beyond.empty() ? "" : ": " + beyond);
  }
  if (t.exit_code) return "exited with code " + std::to_string(*t.exit_code);
  return t.reason.empty() ? std::string("could not be started")
                          : "could not be started: " + t.reason;
}

std::string SignalText(int sig) {
  switch (sig) {
    case 1:
      return "SIGHUP";
    case 2:
      return "SIGINT";
    case 9:
      return "SIGKILL";
    case 15:
      return "SIGTERM";
    default:
      return "signal " + std::to_string(sig);
  }
}

}  // namespace gpupool::controller::lifecycle::words
