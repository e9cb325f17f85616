#include "cli/client/interactive.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/client/json_view.h"
#include "common/strings.h"
#include "protocol/agent_protocol.h"

namespace gpupool::cli {
namespace {

sigset_t CaughtSignals(bool with_winch) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  if (with_winch) sigaddset(&set, SIGWINCH);
  return set;
}

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The local terminal in raw mode while it lives (a terminal session's keys go to the
// remote terminal as they are typed); restored when it goes.
class RawTerminal {
 public:
  RawTerminal() {
    if (::isatty(0) == 0 || ::tcgetattr(0, &saved_) != 0) return;
    struct termios raw = saved_;
    ::cfmakeraw(&raw);
    if (::tcsetattr(0, TCSADRAIN, &raw) == 0) active_ = true;
  }
  ~RawTerminal() {
    if (active_) ::tcsetattr(0, TCSADRAIN, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  struct termios saved_ {};
  bool active_ = false;
};

// Sends input items in order (the stdin thread and the signal thread share it).
class InputSender {
 public:
  InputSender(const ApiClient& api, int64_t session) : api_(api), session_(session) {}

  // Retries while the command has not read what was sent (429) or the server is briefly
  // away; false when the session will take nothing more.
  bool Send(protocol::ExecInputItem item) {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    item.seq = ++seq_;
    const std::string path = "/v1/exec/" + std::to_string(session_) + "/input";
    const std::string body = DumpJson(protocol::EncodeExecInputItem(item));
    int pause_ms = 20;
    for (int tries = 0; tries < 200; ++tries) {
      Result<ApiAnswer> r = api_.Post(path, body);
      if (r.ok()) return true;
      const StatusCode c = r.status().code();
      if (c != StatusCode::kResourceExhausted && c != StatusCode::kUnavailable) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      pause_ms = std::min(pause_ms * 2, 500);
    }
    closed_ = true;
    return false;
  }

 private:
  const ApiClient& api_;
  int64_t session_;
  std::mutex mu_;
  int64_t seq_ = 0;
  bool closed_ = false;
};

}  // namespace

void LocalWindowSize(int* rows, int* cols) {
  *rows = 0;
  *cols = 0;
  for (int fd : {0, 1, 2}) {
    struct winsize ws {};
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
      *rows = ws.ws_row;
      *cols = ws.ws_col;
      return;
    }
  }
}

SignalCatcher::SignalCatcher() {
  sigset_t set = CaughtSignals(/*with_winch=*/true);
  ::pthread_sigmask(SIG_BLOCK, &set, &old_);
}

SignalCatcher::~SignalCatcher() {
  // Signals that came and were not taken are dropped, not delivered as we unblock them.
  sigset_t set = CaughtSignals(true);
  struct timespec zero = {0, 0};
  while (::sigtimedwait(&set, nullptr, &zero) > 0) {
  }
  ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

int SignalCatcher::Take(int timeout_ms) {
  sigset_t set = CaughtSignals(true);
  struct timespec ts = {timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1'000'000};
  const int sig = ::sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

Result<int> AttachSession(const ClientRuntime& rt, const ApiClient& api, int64_t session,
                          const AttachOptions& options) {
  SignalCatcher signals;
  std::optional<RawTerminal> raw;
  if (options.tty) raw.emplace();
  InputSender input(api, session);
  std::atomic<bool> done{false};
  std::atomic<bool> hang_up{false};
  const std::string base = "/v1/exec/" + std::to_string(session);

  std::thread stdin_thread;
  if (options.forward_stdin) {
    stdin_thread = std::thread([&] {
      // Large reads: a pipe of data goes in few requests; a key is sent as it is typed.
      std::vector<char> buf(128 << 10);
      while (!done) {
        struct pollfd p = {0, POLLIN, 0};
        const int ready = ::poll(&p, 1, 200);
        if (ready < 0 && errno != EINTR) break;
        if (ready <= 0) continue;
        const ssize_t n = ::read(0, buf.data(), buf.size());
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {  // the end of our input is the end of the command's
          protocol::ExecInputItem eof;
          eof.eof = true;
          input.Send(eof);
          break;
        }
        protocol::ExecInputItem item;
        item.data.assign(buf.data(), static_cast<size_t>(n));
        if (!input.Send(std::move(item))) break;
      }
    });
  }
  std::thread signal_thread([&] {
    int64_t last_int_ms = -10'000;
    while (!done) {
      const int sig = signals.Take(200);
      if (sig == 0) continue;
      if (sig == SIGWINCH) {
        protocol::ExecInputItem item;
        LocalWindowSize(&item.rows, &item.cols);
        if (item.rows > 0 && options.tty) input.Send(item);
      } else if (sig == SIGINT && !options.tty) {
        const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count();
        if (now_ms - last_int_ms < 1000) {
          hang_up = true;  // a second ^C within a second: stop it
        } else {
          protocol::ExecInputItem item;
          item.signal = SIGINT;
          input.Send(item);
        }
        last_int_ms = now_ms;
      } else {
        hang_up = true;  // SIGTERM, SIGHUP (our terminal went away), ^C of a raw-less tty
      }
      if (hang_up) (void)api.Delete(base);
    }
  });

  int64_t out_offset = 0;
  int64_t err_offset = 0;
  bool started = false;
  Json state;
  Status failure = Status::Ok();
  int unreachable = 0;
  while (true) {
    const std::string query = base + "/stream?stdout_offset=" + std::to_string(out_offset) +
                              "&stderr_offset=" + std::to_string(err_offset) +
                              "&started=" + (started ? "1" : "0") + "&wait_ms=5000";
    Result<ApiAnswer> a = api.Get(query);
    if (!a.ok()) {
      // The server may come back (a restart): keep asking for a while.
      const StatusCode code = a.status().code();
      if ((code == StatusCode::kUnavailable || code == StatusCode::kResourceExhausted) &&
          ++unreachable < 30) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      failure = a.status();
      break;
    }
    unreachable = 0;
    state = a->json;
    started = GetBool(state, "started");
    std::optional<std::string> out = Base64Decode(GetString(state, "stdout"));
    std::optional<std::string> err = Base64Decode(GetString(state, "stderr"));
    if (!out || !err) {
      failure = Status::Internal("the server's answer has output that is not base64");
      break;
    }
    if (!out->empty()) WriteAll(1, *out);
    if (!err->empty()) WriteAll(2, *err);
    out_offset = GetInt(state, "stdout_next");
    err_offset = GetInt(state, "stderr_next");
    if (GetBool(state, "ended") && GetBool(state, "eof")) break;
  }
  done = true;
  signal_thread.join();
  if (stdin_thread.joinable()) stdin_thread.join();
  raw.reset();  // before anything is printed
  if (!failure.ok()) return failure;
  if (state.contains("exit_code") && state["exit_code"].is_number_integer()) {
    return state["exit_code"].get<int>();
  }
  if (state.contains("signal") && state["signal"].is_number_integer()) {
    return 128 + state["signal"].get<int>();
  }
  const std::string error = GetString(state, "error");
  *rt.env.err << "gpupool: " << (error.empty() ? "the command did not run" : error) << "\n";
  return 255;
}

}  // namespace gpupool::cli
