// LogRelay: reads of job log files that live on the node that ran the job.
//
// A job's stdout/stderr files are written by its supervisor on the node. The controller
// cannot read them when the agent runs on another machine, and it must not need to: it
// asks the node. Agents talk to the controller only by polling it (no port of their
// own to open), so a read travels with the agent's long poll: an API thread queues a
// request for the node and waits; the node's next poll (woken at once) takes it; the
// agent reads the file and posts the bytes back; the waiting thread returns them.
//
// Thread-safe. Fetch blocks (the API runs it on a thread of its own); Take and Answer
// are quick. A request no agent answered within its timeout is dropped, and a late
// answer to it is ignored.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "protocol/agent_protocol.h"

namespace gpupool::controller {

// What the agent is asked: bytes [offset, offset + max_bytes) of a log file of its own.
using protocol::LogRequest;

// What it answers: the bytes read and the file's size when it read them.
struct LogChunk {
  std::string data;
  int64_t size = 0;
};

class LogRelay {
 public:
  // `wake_node` is called (without the relay's lock held) when a node has a new request,
  // so that its waiting poll returns.
  // `clock` times the waits for answers (nullptr: the system's); it must outlive this.
  explicit LogRelay(std::function<void(const std::string& node)> wake_node,
                    const Clock* clock = nullptr);

  // Queues a read on `node` and waits up to `timeout` for the answer. kUnavailable when
  // no answer came in time (node busy, down, or an agent that does not relay logs).
  Result<LogChunk> Fetch(const std::string& node, const std::string& path, int64_t offset,
                         int64_t max_bytes, std::chrono::milliseconds timeout) EXCLUDES(mu_);

  // The node's requests not yet handed out; each is handed out once.
  std::vector<LogRequest> Take(const std::string& node) EXCLUDES(mu_);
  bool HasWork(const std::string& node) EXCLUDES(mu_);

  // Node `node`'s answer to request `id` (an error when it could not read the file).
  // Unknown or expired ids, and answers from another node than the one asked, are
  // ignored: the reader has given up, or the answer is not for it.
  void Answer(const std::string& node, int64_t id, Result<LogChunk> answer) EXCLUDES(mu_);

 private:
  struct Pending {
    std::string node;
    LogRequest request;
    bool taken = false;
    std::optional<Result<LogChunk>> answer;
  };

  std::function<void(const std::string&)> wake_node_;
  const Clock* clock_;
  Mutex mu_;
  std::condition_variable answered_;
  int64_t next_id_ GUARDED_BY(mu_) = 1;
  std::map<int64_t, Pending> pending_ GUARDED_BY(mu_);
};

}  // namespace gpupool::controller
