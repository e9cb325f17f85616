// The client's end of an interactive exec session (`gpupool run`, `gpupool exec --pty`
// or `-i`; docs/cli.md "Interactive jobs", docs/api.md "Interactive sessions").
//
// AttachSession relays this process's standard streams to the session until it ends:
//   - what the command prints is long-polled (GET /v1/exec/ID/stream) and written to
//     stdout and stderr as it comes;
//   - stdin is read on a thread of its own and sent (POST /v1/exec/ID/input), then its
//     end; with a terminal, the local one is put in raw mode (restored on every way
//     out), so keys, ^C and ^D reach the remote terminal as bytes;
//   - signals are taken by a thread of their own: SIGWINCH sends the new window size;
//     without a terminal SIGINT is sent to the command (a second within a second stops
//     it); SIGTERM and SIGHUP (this terminal closed) stop the session.
// Returns the command's exit status as the process's: its code, 128 + N for signal N,
// 255 when it did not run (the reason is printed).
#pragma once

#include <csignal>
#include <cstdint>

#include "cli/client/client_common.h"

namespace gpupool::cli {

struct AttachOptions {
  bool tty = false;           // the session has a terminal
  bool forward_stdin = true;  // send this process's stdin
};

Result<int> AttachSession(const ClientRuntime& rt, const ApiClient& api, int64_t session,
                          const AttachOptions& options);

// The local terminal's size (rows, cols) when stdin, stdout or stderr is one; 0 x 0 else.
void LocalWindowSize(int* rows, int* cols);

// Signals a waiting client command should react to (SIGINT, SIGTERM, SIGHUP), blocked
// in every thread while an instance lives and taken with Take(); the old mask returns
// when it goes.
class SignalCatcher {
 public:
  SignalCatcher();
  ~SignalCatcher();
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;
  // A pending signal (0 when none), waiting up to timeout_ms for one.
  int Take(int timeout_ms);

 private:
  sigset_t old_;
};

}  // namespace gpupool::cli
