#include "agent/runtime/exec_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "protocol/agent_protocol.h"

namespace gpupool::agent {
namespace {

void CloseFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

// The back-off between tries of a call the controller answered kUnavailable: 50 ms,
// doubling up to 1 s; output is tried for up to a minute.
constexpr int64_t kFirstPauseUs = 50'000;
constexpr int64_t kMaxPauseUs = 1'000'000;
constexpr int64_t kOutputGiveUpUs = 60'000'000;
// After Finish, how long nothing may come before the relay sends eof anyway.
constexpr int64_t kFinishQuietUs = 1'000'000;

// Writes all of `data`, waiting while the terminal's or pipe's buffer is full. False
// when the other end is gone.
bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      struct pollfd p = {fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
      continue;
    }
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

SessionStreams::~SessionStreams() {
  CloseChild();
  CloseFd(&master);
  CloseFd(&stdin_w);
  CloseFd(&stdout_r);
  CloseFd(&stderr_r);
}

void SessionStreams::CloseChild() {
  // A terminal's slave is the same descriptor three times.
  if (child.out == child.in) child.out = -1;
  if (child.err == child.in) child.err = -1;
  CloseFd(&child.in);
  CloseFd(&child.out);
  CloseFd(&child.err);
}

Result<std::unique_ptr<SessionStreams>> MakeSessionStreams(bool tty, int rows, int cols,
                                                           uint32_t uid) {
  auto s = std::make_unique<SessionStreams>();
  s->tty = tty;
  auto fail = [](const std::string& what) {
    return Status::Unavailable("cannot make the session's " + what + ": " + std::strerror(errno));
  };
  if (tty) {
    s->master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (s->master < 0 || ::grantpt(s->master) != 0 || ::unlockpt(s->master) != 0) {
      return fail("terminal");
    }
    char name[128];
    if (::ptsname_r(s->master, name, sizeof name) != 0) return fail("terminal");
    const int slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0) return fail("terminal " + std::string(name));
    s->child = {slave, slave, slave};
    // The user's terminal, as a login gives it: theirs, writable by group tty (write(1)).
    if (::geteuid() == 0) {
      (void)!::fchown(slave, uid, static_cast<gid_t>(-1));
      (void)!::fchmod(slave, 0620);
    }
    struct winsize ws {};
    ws.ws_row = static_cast<unsigned short>(rows > 0 ? rows : 24);  // NOLINT(google-runtime-int)
    ws.ws_col = static_cast<unsigned short>(cols > 0 ? cols : 80);  // NOLINT(google-runtime-int)
    ::ioctl(s->master, TIOCSWINSZ, &ws);
    return s;
  }
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return fail("pipes");
  s->child.in = in[0];
  s->stdin_w = in[1];
  if (::pipe2(out, O_CLOEXEC) != 0) return fail("pipes");
  s->stdout_r = out[0];
  s->child.out = out[1];
  if (::pipe2(err, O_CLOEXEC) != 0) return fail("pipes");
  s->stderr_r = err[0];
  s->child.err = err[1];
  return s;
}

struct ExecRelay::State {
  int64_t id = 0;
  std::string node;  // ours: the controller checks the session runs here
  std::unique_ptr<SessionStreams> streams;
  std::shared_ptr<protocol::ControllerLink> link;
  std::function<int()> process_group;
  const Clock* clock = nullptr;
  std::atomic<bool> finishing{false};
  std::atomic<bool> stopping{false};
  int wake = -1;        // eventfd: wakes the output thread's poll
  std::mutex pause_mu;  // guards nothing: Pause's wait
  std::condition_variable pause_cv;

  ~State() { CloseFd(&wake); }

  // Wakes the threads: a Pause looks at stopping and finishing again, the output
  // thread's poll returns.
  void Wake() {
    { std::lock_guard lock(pause_mu); }  // a Pause that has just looked waits by now
    pause_cv.notify_all();
    const uint64_t one = 1;
    if (wake >= 0) (void)!::write(wake, &one, sizeof one);
  }

  // Waits `micros` of the clock's time, or until Stop (or Finish, with `until_finish`).
  void Pause(int64_t micros, bool until_finish) {
    std::unique_lock lock(pause_mu);
    clock->WaitFor(pause_cv, lock, micros, [&] { return stopping || (until_finish && finishing); });
  }

  // Sends one output message, retrying while the controller is unreachable or busy for
  // up to a minute of the clock's time. Returns the controller's ack, or an error when
  // the session is gone for it (or the relay stops).
  Result<protocol::ExecOutputAck> Post(const protocol::ExecOutput& out) {
    const int64_t give_up = clock->MonotonicMicros() + kOutputGiveUpUs;
    int64_t pause_us = kFirstPauseUs;
    while (true) {
      // While the client is behind, the answer waits for it (up to 5 s).
      Result<protocol::ExecOutputAck> ack = link->PostExecOutput(id, node, out, 5000);
      if (ack.ok() || ack.status().code() != StatusCode::kUnavailable) return ack;
      if (stopping || clock->MonotonicMicros() > give_up) return ack.status();
      Pause(pause_us, /*until_finish=*/false);
      if (stopping) return ack.status();
      pause_us = std::min(pause_us * 2, kMaxPauseUs);
    }
  }

  void OutputLoop();
  void InputLoop();
  void Apply(const protocol::ExecInputItem& item);
};

void ExecRelay::State::OutputLoop() {
  SessionStreams& s = *streams;
  int fds[2] = {s.tty ? s.master : s.stdout_r, s.tty ? -1 : s.stderr_r};
  bool done[2] = {false, fds[1] < 0};
  protocol::ExecOutput out;
  int64_t quiet_since_us = 0;  // while finishing: since when nothing came (clock time)
  bool pause = false;
  std::vector<char> buf(128 << 10);
  while (!stopping) {
    struct pollfd p[3];
    int n = 0;
    int which[3];
    for (int i = 0; i < 2; ++i) {
      if (done[i] || pause) continue;
      p[n] = {fds[i], POLLIN, 0};
      which[n++] = i;
    }
    p[n] = {wake, POLLIN, 0};
    which[n++] = -1;
    // Paused: ask again at once (the answer itself waits for the client).
    const int timeout = pause ? 0 : (finishing ? 200 : 5000);
    const int ready = ::poll(p, static_cast<nfds_t>(n), timeout);
    if (ready < 0 && errno != EINTR) break;
    if (stopping) break;
    out.stdout_data.clear();
    out.stderr_data.clear();
    for (int k = 0; k < n && ready > 0; ++k) {
      if (which[k] < 0) {
        uint64_t v;
        if (p[k].revents & POLLIN) (void)!::read(wake, &v, sizeof v);
        continue;
      }
      if (p[k].revents == 0) continue;
      const ssize_t got = ::read(fds[which[k]], buf.data(), buf.size());
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {  // EOF, or EIO: every holder of the terminal's slave is gone
        done[which[k]] = true;
        continue;
      }
      (which[k] == 0 ? out.stdout_data : out.stderr_data)
          .append(buf.data(), static_cast<size_t>(got));
    }
    const bool all_done = done[0] && done[1];
    const bool got_any = !out.stdout_data.empty() || !out.stderr_data.empty();
    if (finishing && !got_any) {
      if (quiet_since_us == 0) quiet_since_us = clock->MonotonicMicros();
    } else {
      quiet_since_us = 0;
    }
    // Finished and quiet for a second: what still holds the terminal is not the command.
    const bool give_up = finishing && quiet_since_us != 0 &&
                         clock->MonotonicMicros() - quiet_since_us > kFinishQuietUs;
    if (!got_any && !all_done && !give_up && !pause) continue;
    out.eof = all_done || give_up;
    Result<protocol::ExecOutputAck> ack = Post(out);
    if (!ack.ok()) {
      spdlog::info("agent: exec {}: output relay ends: {}", id, ack.status().message());
      return;
    }
    out.stdout_offset += static_cast<int64_t>(out.stdout_data.size());
    out.stderr_offset += static_cast<int64_t>(out.stderr_data.size());
    if (out.eof) return;
    pause = ack->full;
  }
}

void ExecRelay::State::Apply(const protocol::ExecInputItem& item) {
  SessionStreams& s = *streams;
  const int in = s.tty ? s.master : s.stdin_w;
  if (!item.data.empty() && in >= 0 && !WriteAll(in, item.data) && !s.tty) {
    CloseFd(&s.stdin_w);  // the command closed its stdin
  }
  if (item.rows > 0 && item.cols > 0 && s.tty) {
    struct winsize ws {};
    ws.ws_row = static_cast<unsigned short>(item.rows);  // NOLINT(google-runtime-int)
    ws.ws_col = static_cast<unsigned short>(item.cols);  // NOLINT(google-runtime-int)
    ::ioctl(s.master, TIOCSWINSZ, &ws);
  }
  if (item.signal > 0) {
    const int pg = process_group ? process_group() : 0;
    if (pg > 1) ::kill(-pg, item.signal);
  }
  if (item.eof) {
    if (s.tty) {
      // End of input on a terminal is its EOF character at the start of a line.
      struct termios t {};
      const char eof = ::tcgetattr(s.master, &t) == 0 ? static_cast<char>(t.c_cc[VEOF]) : '\x04';
      WriteAll(s.master, std::string(1, eof));
    } else {
      CloseFd(&s.stdin_w);
    }
  }
}

void ExecRelay::State::InputLoop() {
  int64_t after = 0;
  int64_t pause_us = kFirstPauseUs;
  while (!stopping) {
    Result<protocol::ExecInput> in = link->TakeExecInput(id, node, after, 5000);
    if (!in.ok() && in.status().code() == StatusCode::kUnavailable) {
      if (finishing) return;
      Pause(pause_us, /*until_finish=*/true);
      pause_us = std::min(pause_us * 2, kMaxPauseUs);
      continue;
    }
    pause_us = kFirstPauseUs;
    if (!in.ok()) {
      spdlog::info("agent: exec {}: input relay ends: {}", id, in.status().message());
      return;
    }
    for (const protocol::ExecInputItem& item : in->items) {
      if (item.seq <= after) continue;
      Apply(item);
      after = item.seq;
    }
    if (in->hangup || (finishing && in->items.empty())) return;
  }
}

std::shared_ptr<ExecRelay> ExecRelay::Start(int64_t exec_id, const std::string& node,
                                            std::unique_ptr<SessionStreams> streams,
                                            std::shared_ptr<protocol::ControllerLink> link,
                                            std::function<int()> process_group,
                                            const Clock* clock) {
  auto state = std::make_shared<State>();
  state->clock = clock != nullptr ? clock : SystemClock::Get();
  state->link = std::move(link);
  state->id = exec_id;
  state->node = node;
  state->streams = std::move(streams);
  state->streams->CloseChild();
  state->process_group = std::move(process_group);
  state->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::thread([state] { state->OutputLoop(); }).detach();
  std::thread([state] { state->InputLoop(); }).detach();
  return std::shared_ptr<ExecRelay>(new ExecRelay(state));
}

void ExecRelay::Finish() {
  state_->finishing = true;
  state_->Wake();
}

void ExecRelay::Stop() {
  state_->stopping = true;
  Finish();
}

ExecRelay::~ExecRelay() = default;

}  // namespace gpupool::agent
