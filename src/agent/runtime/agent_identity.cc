#include "agent/runtime/agent_identity.h"

#include <spdlog/spdlog.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::agent {
namespace {

constexpr size_t kIdDigits = 32;

bool IsId(std::string_view s) {
  return s.size() == kIdDigits && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

// FNV-1a, 64 bits: stable across builds and machines, which std::hash need not be. Not a
// secret: it only tells machines apart.
std::string Digest(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(h >> (56 - 8 * i));
  return Hex(b, sizeof b);
}

}  // namespace

Result<FileLock> LockAgentStateDir(const std::string& state_dir, const std::string& agent_dir) {
  const std::string path = agent_dir + "/agent.lock";
  Result<FileLock> lock = FileLock::TryLock(path);
  if (lock.ok() || lock.status().code() != StatusCode::kFailedPrecondition) return lock;
  return Status::AlreadyExists(
      "another gpupool agent (" + lock.status().message() + ") uses the state directory '" +
      state_dir + "' (it holds " + path +
      "): stop it first, or give this one another --state-dir (and, for another node, "
      "another --node-name)");
}

Result<std::string> DrawAgentId() {
  unsigned char b[kIdDigits / 2];
  size_t got = 0;
  while (got < sizeof b) {
    const ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Status::Unavailable(std::string("cannot draw the agent's id: getrandom: ") +
                                 std::strerror(errno));
    }
    got += static_cast<size_t>(n);
  }
  return Hex(b, sizeof b);
}

Result<std::string> AgentIdentity(const std::string& agent_dir, const std::string& machine_id_path,
                                  const std::function<Result<std::string>()>& draw) {
  const std::string path = agent_dir + "/agent-id";
  std::string id;
  if (Result<std::string> kept = ReadFileToString(path, 4096); kept.ok()) id = Trim(*kept);
  if (!IsId(id)) {
    GP_ASSIGN_OR_RETURN(id, draw());
    if (Status s = WriteFileAtomically(path, id + "\n"); !s.ok()) {
      return s.WithContext("the agent's id");
    }
  }
  Result<std::string> machine = ReadFileToString(machine_id_path, 4096);
  return id + ":" + (machine.ok() ? Digest(Trim(*machine)) : std::string("-"));
}

Status CheckNodeName(const std::string& agent_dir, const std::string& node_name,
                     const std::vector<int64_t>& running) {
  Result<std::string> kept = ReadFileToString(agent_dir + "/node-name", 4096);
  if (!kept.ok()) return Status::Ok();  // none recorded yet (a new or older state directory)
  const std::string was(Trim(*kept));
  if (was.empty() || was == node_name || running.empty()) return Status::Ok();
  std::vector<int64_t> jobs(running);  // once each (a job's tasks share its id)
  std::sort(jobs.begin(), jobs.end());
  jobs.erase(std::unique(jobs.begin(), jobs.end()), jobs.end());
  std::string names;
  for (size_t i = 0; i < jobs.size() && i < 5; ++i) {
    names += (i > 0 ? ", job " : "job ") + std::to_string(jobs[i]);
  }
  if (jobs.size() > 5) names += " and " + std::to_string(jobs.size() - 5) + " more";
  return Status::AlreadyExists(
      "this agent's state directory belongs to node '" + was + "', and " +
      std::to_string(jobs.size()) + " job(s) it started there still run (" + names +
      "); started as node '" + node_name +
      "' it would report them for that node, where the controller would stop them: start it "
      "with --node-name " +
      was +
      " again, or let those jobs end (or cancel them) before "
      "renaming the node");
}

void RecordNodeName(const std::string& agent_dir, const std::string& node_name) {
  if (Status s = WriteFileAtomically(agent_dir + "/node-name", node_name + "\n"); !s.ok()) {
    spdlog::warn("agent: cannot record the node's name in its state directory: {}", s.message());
  }
}

}  // namespace gpupool::agent
