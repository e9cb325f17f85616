// ExecRelay: the agent's end of one interactive exec session (`gpupool run`, `gpupool
// exec --pty` or `-i`). It owns the agent's side of the command's terminal (a
// pseudo-terminal master) or pipes, and relays them to the controller through the
// agent's ControllerLink (protocol::ExecInput and ExecOutput, docs/api.md "Interactive
// sessions"):
//   - output: what the command prints is read and posted (PostExecOutput), pausing while
//     the controller says the client is behind (ExecOutputAck::full);
//   - input: the controller is long-polled for what the client typed (TakeExecInput), which is
//     written to the terminal or the stdin pipe; a size item resizes the terminal (the
//     kernel sends SIGWINCH) and a signal item signals the command's process group.
// Each direction runs on a thread of its own, detached: Finish() (the command ended)
// and Stop() let them end on their own, and their state lives as long as they do.
// A call the controller answers kUnavailable is tried again after a back-off on the
// injected clock (50 ms doubling to 1 s): output for up to a minute of the clock's time,
// then its relay ends; input until the session ends. Stop() cuts a back-off short (and
// Finish() the input's), so under a ManualClock the retries happen only as a test
// advances time.
// When the agent dies its descriptors close, which hangs the terminal up: the command
// gets SIGHUP (or EOF and SIGPIPE on pipes), as with a dropped ssh connection.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "agent/launcher.h"
#include "common/clock.h"
#include "common/status.h"
#include "protocol/controller_link.h"

namespace gpupool::agent {

// The agent's and the command's ends of an interactive session's streams.
struct SessionStreams {
  bool tty = false;
  // tty: the master; else the write end of the command's stdin and the read ends of
  // its stdout and stderr. Owned (closed) by whoever holds the SessionStreams.
  int master = -1;
  int stdin_w = -1;
  int stdout_r = -1;
  int stderr_r = -1;
  agent::JobStdio child;  // the command's ends, for Launcher::Launch; close after it
  ~SessionStreams();
  SessionStreams() = default;
  SessionStreams(const SessionStreams&) = delete;
  SessionStreams& operator=(const SessionStreams&) = delete;
  void CloseChild();
};

// Makes the streams: a pseudo-terminal of rows x cols (default 24 x 80) whose slave
// belongs to `uid` (mode 0620, as sshd leaves it), or three pipes.
Result<std::unique_ptr<SessionStreams>> MakeSessionStreams(bool tty, int rows, int cols,
                                                           uint32_t uid);

class ExecRelay {
 public:
  // `process_group` returns the command's process group (its pid), or 0 while unknown;
  // signal items go there. `clock` times the back-offs and the wait after Finish (null:
  // the system clock); it must outlive the relay's threads.
  static std::shared_ptr<ExecRelay> Start(int64_t exec_id, const std::string& node,
                                          std::unique_ptr<SessionStreams> streams,
                                          std::shared_ptr<protocol::ControllerLink> link,
                                          std::function<int()> process_group,
                                          const Clock* clock = nullptr);

  // The command ended: what is left to read is relayed (for at most about a second of the
  // clock's time, as a background process may hold the terminal open), then eof, and
  // both threads end.
  void Finish();
  // The agent stops: both threads end without relaying more.
  void Stop();

  ~ExecRelay();
  struct State;

 private:
  explicit ExecRelay(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace gpupool::agent
