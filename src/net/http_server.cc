#include "net/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/clock.h"
#include "common/strings.h"
#include "net/hangup_watch.h"
#include "net/listen_socket.h"
#include "net/local_peer.h"
#include "net/request_framing.h"
#include "net/url_unescape.h"
#include "net/worker_pool.h"

namespace gpupool::net {
namespace {

class Deferred;

// Per-connection state while a request body arrives and while its answer is awaited.
struct PendingRequest {
  std::string body;
  bool too_large = false;
  bool refused = false;    // answered 503 at its head (a cap on connections)
  bool suspended = false;  // counted in suspended_ and listed in deferred_ (guarded by mu_)
  std::shared_ptr<Deferred> deferred;  // the handler's answer to come (once it ran)
};

// Per-connection state for its whole life (libmicrohttpd's socket context): who is at
// the other end, and its entry in the ConnectionTable.
struct ConnInfo {
  uint64_t id = 0;
  bool is_unix = false;
  bool reserved_peer = false;
  std::optional<PeerCredentials> peer;  // Unix socket
  std::string remote;                   // "unix" or "ADDRESS:PORT"
  // The request being read kept an escaped control byte (net/url_unescape.h): its path
  // (or query part) as sent, to refuse it by. Cleared as each request reaches OnRequest.
  std::string control_escape;
};

int64_t NowUs() { return SystemClock::Get()->MonotonicMicros(); }

std::string JsonError(const std::string& message) {
  std::string out = "{\"error\":\"";
  for (unsigned char c : message) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20) {
      out += static_cast<char>(c);
    }
  }
  return out + "\"}";
}

// A whole HTTP answer written straight to a connection the server is about to shut, for
// a client that is still reading (libmicrohttpd has written nothing on it yet).
std::string RawAnswer(int status, const char* reason, const std::string& message) {
  const std::string body = JsonError(message);
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

class MhdServer;

// A request's answer (HttpResponder): its handler completes it, at once or later from any
// thread. Unless it was answered before the handler returned, the connection is suspended
// meanwhile (no thread waits); the answer resumes it, and libmicrohttpd calls OnRequest
// again, which sends it. The stages order suspending before resuming: whoever answers
// while the connection is being suspended leaves the resume to the suspending thread.
class Deferred final : public HttpResponder {
 public:
  enum class Stage { kHandling, kSuspending, kSuspended, kResumed };
  Deferred(MhdServer* server, MHD_Connection* conn, int fd, uint64_t id, Stage stage)
      : server_(server), conn_(conn), fd_(fd), id_(id), stage_(stage) {}

  bool Complete(HttpResponse response) override { return Finish(std::move(response), false); }
  void OnAbandoned(std::function<void()> fn) override {
    {
      std::lock_guard lock(mu_);
      if (!answered_) {
        on_abandoned_ = std::move(fn);
        return;
      }
      if (!abandoned_) return;
    }
    fn();
  }
  // The server's own answer (the client hung up, the server stops), unless answered.
  void Abandon(HttpResponse response) { Finish(std::move(response), true); }

  // The answer, once given, for the thread that sends it; nullopt before.
  std::optional<HttpResponse> TakeAnswer() {
    std::lock_guard lock(mu_);
    if (!answered_) return std::nullopt;
    stage_ = Stage::kResumed;
    return std::move(response_);
  }
  // The handler returned unanswered: the connection is about to be suspended.
  void Suspending() {
    std::lock_guard lock(mu_);
    stage_ = Stage::kSuspending;
  }
  // Suspended: true when answered meanwhile, and the caller resumes it.
  bool Suspended() {
    std::lock_guard lock(mu_);
    stage_ = answered_ ? Stage::kResumed : Stage::kSuspended;
    return answered_;
  }

  MHD_Connection* conn() const { return conn_; }
  int fd() const { return fd_; }
  uint64_t id() const { return id_; }

 private:
  bool Finish(HttpResponse response, bool abandon);

  MhdServer* const server_;
  MHD_Connection* const conn_;
  const int fd_;
  const uint64_t id_;
  std::mutex mu_;
  Stage stage_;
  bool answered_ = false;
  bool abandoned_ = false;
  HttpResponse response_;
  std::function<void()> on_abandoned_;
};

class MhdServer final : public HttpServer {
 public:
  MhdServer(HttpServerOptions options, HttpAsyncHandler handler)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        watch_([this](uint64_t id) { OnHangup(id); }),
        table_(ConnectionLimits{}) {}
  ~MhdServer() override { Stop(); }

  Status Start() {
    GP_RETURN_IF_ERROR(SetLimits());
    GP_RETURN_IF_ERROR(watch_.Start());
    if (options_.background) {
      background_ = std::make_unique<WorkerPool>(WorkerPool::Options{
          options_.background_threads > 0 ? options_.background_threads : PoolThreads(),
          std::clamp(options_.background_nice, 0, 19), "http-background"});
    }
    reaper_ = std::thread([this] { Reap(); });
    if (!options_.unix_socket_path.empty()) {
      GP_ASSIGN_OR_RETURN(int fd, ListenUnix(options_.unix_socket_path, options_.unix_socket_mode));
      unix_daemon_ = StartDaemon(fd, /*is_unix=*/true);
      if (unix_daemon_ == nullptr) {
        close(fd);
        return Status::Unavailable("cannot start the HTTP server on " + options_.unix_socket_path);
      }
    }
    if (!options_.tcp_host.empty()) {
      GP_ASSIGN_OR_RETURN(int fd, ListenTcp(options_.tcp_host, options_.tcp_port));
      sockaddr_in bound{};
      socklen_t len = sizeof bound;
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      tcp_port_ = ntohs(bound.sin_port);
      tcp_daemon_ = StartDaemon(fd, /*is_unix=*/false);
      if (tcp_daemon_ == nullptr) {
        close(fd);
        return Status::Unavailable("cannot start the HTTP server on TCP port " +
                                   std::to_string(tcp_port_));
      }
    }
    return Status::Ok();
  }

  int tcp_port() const override { return tcp_port_; }

  bool Drain(int timeout_ms) override {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    {
      std::lock_guard lock(conn_mu_);
      draining_ = true;
    }
    for (MHD_Daemon* d : {unix_daemon_, tcp_daemon_}) {
      if (d != nullptr) TakeWaiting(d);
    }
    std::unique_lock lock(conn_mu_);
    return drain_cv_.wait_until(lock, until,
                                [this] { return adopting_.empty() && table_.busy() == 0; });
  }

  void Stop() override {
    // MHD must not be stopped with suspended connections (it aborts the process): from
    // now on no request is suspended (one that would be is answered 503 at once: an
    // agent's next long poll, arriving while this waits), the blocking handlers running
    // finish (as joining their connection threads used to), the answers still awaited
    // are 503, and all of them go out.
    std::vector<std::shared_ptr<Deferred>> awaited;
    {
      std::unique_lock lock(mu_);
      stopping_ = true;
      idle_cv_.wait(lock, [this] { return blocking_running_ == 0; });
      for (const auto& [id, d] : deferred_) awaited.push_back(d);
    }
    for (const auto& d : awaited) d->Abandon(ShuttingDown());
    awaited.clear();
    bool drained = false;
    {
      std::unique_lock lock(mu_);
      drained =
          idle_cv_.wait_for(lock, std::chrono::seconds(5), [this] { return suspended_ == 0; });
    }
    watch_.Stop();
    if (!drained) {
      // An answer that could not be sent in 5 s: stopping the daemon now would abort.
      // The process is on its way out; its threads go with it.
      if (unix_daemon_ != nullptr) unlink(options_.unix_socket_path.c_str());
      unix_daemon_ = nullptr;
      tcp_daemon_ = nullptr;
    }
    if (unix_daemon_ != nullptr) {
      MHD_stop_daemon(unix_daemon_);
      unix_daemon_ = nullptr;
      unlink(options_.unix_socket_path.c_str());
    }
    if (tcp_daemon_ != nullptr) {
      MHD_stop_daemon(tcp_daemon_);
      tcp_daemon_ = nullptr;
    }
    for (int fd : quiesced_) close(fd);  // the listeners Drain took, once MHD is done
    quiesced_.clear();
    {
      std::lock_guard lock(conn_mu_);
      reaper_stop_ = true;
      reaper_cv_.notify_all();
    }
    if (reaper_.joinable()) reaper_.join();
    if (background_ != nullptr) background_->Stop();  // idle: Stop waited for its handlers
  }

 private:
  struct DaemonContext {
    MhdServer* server;
    bool is_unix;
  };

  // The ConnectionTable's limits from the options and the open-files limit.
  Status SetLimits() {
    struct rlimit rl {};
    uint64_t files = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
      files = rl.rlim_cur == RLIM_INFINITY ? (1U << 20) : static_cast<uint64_t>(rl.rlim_cur);
    }
    // Descriptors for the store, logs, pipes and the job supervisors stay free.
    const uint64_t fd_reserve = std::max<uint64_t>(128, files / 10);
    ConnectionLimits l;
    l.max_connections = options_.max_connections > 0
                            ? static_cast<size_t>(options_.max_connections)
                            : static_cast<size_t>(std::clamp<uint64_t>(
                                  files > fd_reserve ? files - fd_reserve : 0, 64, 1U << 20));
    l.reserved = options_.reserved_connections > 0
                     ? static_cast<size_t>(options_.reserved_connections)
                     : std::max<size_t>(l.max_connections / 4, 8);
    if (l.reserved >= l.max_connections) {
      return Status::InvalidArgument("reserved connections (" + std::to_string(l.reserved) +
                                     ") must be fewer than max " + "connections (" +
                                     std::to_string(l.max_connections) +
                                     "): lower the one, raise the other");
    }
    l.max_pending = options_.max_pending_connections > 0
                        ? static_cast<size_t>(options_.max_pending_connections)
                        : std::max<size_t>((l.max_connections - l.reserved) / 2, 1);
    if (l.reserved + l.max_pending >= l.max_connections) {
      return Status::InvalidArgument(
          "reserved (" + std::to_string(l.reserved) + ") and pending (" +
          std::to_string(l.max_pending) + ") connections leave none of max connections (" +
          std::to_string(l.max_connections) + ") for requests under way: lower them");
    }
    for (const auto& [value, name] :
         {std::pair{options_.head_timeout_ms, "head_timeout_ms"},
          std::pair{options_.idle_timeout_ms, "idle_timeout_ms"},
          std::pair{options_.transfer_timeout_ms, "transfer_timeout_ms"},
          std::pair{options_.min_transfer_bytes_per_s, "min_transfer_bytes_per_s"},
          std::pair{options_.max_pending_per_peer, "max_pending_per_peer"},
          std::pair{options_.max_connections_per_uid, "max_connections_per_uid"},
          std::pair{options_.max_connections_per_address, "max_connections_per_address"}}) {
      if (value <= 0) {
        return Status::InvalidArgument(std::string(name) + " must be positive, not " +
                                       std::to_string(value));
      }
    }
    l.head_timeout_us = int64_t{options_.head_timeout_ms} * 1000;
    l.idle_timeout_us = int64_t{options_.idle_timeout_ms} * 1000;
    l.transfer_floor_us = int64_t{options_.transfer_timeout_ms} * 1000;
    l.min_bytes_per_s = options_.min_transfer_bytes_per_s;
    table_ = ConnectionTable(l);
    uid_caps_ = {static_cast<size_t>(options_.max_pending_per_peer),
                 static_cast<size_t>(options_.max_connections_per_uid), "max-connections-per-uid"};
    address_caps_ = {static_cast<size_t>(options_.max_pending_per_peer),
                     static_cast<size_t>(options_.max_connections_per_address),
                     "max-connections-per-address"};
    if (options_.reserved_uids) {
      reserved_uids_.insert(options_.reserved_uids->begin(), options_.reserved_uids->end());
    } else {
      reserved_uids_ = {0, geteuid()};
    }
    return Status::Ok();
  }

  int PoolThreads() const {
    const int hw = static_cast<int>(std::thread::hardware_concurrency());
    return options_.pool_threads > 0 ? options_.pool_threads : std::max(8, 2 * hw);
  }

  MHD_Daemon* StartDaemon(int listen_fd, bool is_unix) {
    auto& ctx = is_unix ? unix_ctx_ : tcp_ctx_;
    ctx = {this, is_unix};
    const auto threads = static_cast<unsigned>(PoolThreads());
    // The table bounds every listener together; libmicrohttpd's own limit, per listener,
    // only backs it up.
    const auto limit = static_cast<unsigned>(table_.limits().max_connections);
    return MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, nullptr,
        nullptr, &MhdServer::OnRequest, &ctx, MHD_OPTION_LISTEN_SOCKET, listen_fd,
        MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(options_.connection_timeout_s),
        MHD_OPTION_NOTIFY_COMPLETED, &MhdServer::OnCompleted, this, MHD_OPTION_NOTIFY_CONNECTION,
        &MhdServer::OnConnection, &ctx, MHD_OPTION_UNESCAPE_CALLBACK, &MhdServer::Unescape, nullptr,
        MHD_OPTION_END);
  }

  // Drain: libmicrohttpd accepts no more on `d`'s listener; the connections waiting
  // there are accepted here and handed to it (their requests are answered as any other's);
  // then the listener refuses new ones (a client tries another controller at once).
  // No more are taken than can have been waiting (the backlog's bound): a client that
  // connects again and again would otherwise keep this loop from ever ending.
  void TakeWaiting(MHD_Daemon* d) {
    const MHD_socket fd = MHD_quiesce_daemon(d);
    if (fd == MHD_INVALID_SOCKET) return;
    quiesced_.push_back(fd);
    (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    for (int taken = 0; taken <= kListenBacklog; ++taken) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      const int c =
          accept4(fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0 && errno == EINTR) continue;
      if (c < 0) break;  // none left (EAGAIN), or no room for another descriptor
      {
        std::lock_guard lock(conn_mu_);
        adopting_.insert(c);  // until OnConnection has it in the table
      }
      if (MHD_add_connection(d, c, reinterpret_cast<sockaddr*>(&addr), len) != MHD_YES) {
        std::lock_guard lock(conn_mu_);
        adopting_.erase(c);  // closed by libmicrohttpd
      }
    }
    shutdown(fd, SHUT_RDWR);
  }

  // A connection's request is over, or it is gone: Drain may be done (conn_mu_ held).
  void ChangedLocked() {
    if (draining_) drain_cv_.notify_all();
  }

  // --- connections: the table, and closing what it says -----------------------------

  static ConnInfo* InfoOf(MHD_Connection* conn) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info != nullptr ? static_cast<ConnInfo*>(info->socket_context) : nullptr;
  }

  // libmicrohttpd's decoding of the path and of each query name and value.
  static size_t Unescape(void*, MHD_Connection* conn, char* s) {
    bool control = false;
    const size_t n = UnescapeUrlPart(s, &control);
    if (ConnInfo* info = InfoOf(conn); control && info != nullptr && info->control_escape.empty()) {
      info->control_escape = s;
    }
    return n;
  }

  static void OnConnection(void* cls, MHD_Connection* conn, void** socket_context,
                           MHD_ConnectionNotificationCode code) {
    auto* ctx = static_cast<DaemonContext*>(cls);
    MhdServer* self = ctx->server;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      auto* info = static_cast<ConnInfo*>(*socket_context);
      if (info == nullptr) return;
      {
        // Taken before libmicrohttpd closes the descriptor: the reaper never shuts one
        // that is closed (and perhaps reused) already.
        std::lock_guard lock(self->conn_mu_);
        self->table_.Closed(info->id);
        self->fds_.erase(info->id);
        self->ChangedLocked();
      }
      delete info;
      *socket_context = nullptr;
      return;
    }
    auto* info = new ConnInfo();
    *socket_context = info;
    info->is_unix = ctx->is_unix;
    const MHD_ConnectionInfo* fdi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const int fd = fdi != nullptr ? fdi->connect_fd : -1;
    std::string peer;
    bool local_uid = false;  // a TCP peer on this host, counted as its uid
    if (ctx->is_unix) {
      info->remote = "unix";
      ucred cred{};
      socklen_t len = sizeof cred;
      if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        info->peer = PeerCredentials{cred.pid, cred.uid, cred.gid};
        info->reserved_peer = self->reserved_uids_.count(cred.uid) > 0;
        peer = "uid " + std::to_string(cred.uid);
      } else {
        peer = "an unknown uid";
      }
    } else {
      const MHD_ConnectionInfo* ai =
          MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      peer = "an unknown address";
      if (ai != nullptr && ai->client_addr != nullptr && ai->client_addr->sa_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(ai->client_addr);
        char buf[INET_ADDRSTRLEN] = {};
        inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
        peer = buf;
        info->remote = std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
        // From this host: counted as its uid, whichever address it came from (a local
        // user shares 127.0.0.1 with every other, and has all of 127/8 besides).
        sockaddr_in local{};
        socklen_t len = sizeof local;
        if (fd >= 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
            MaybeLocalPeer(*in, local)) {
          if (std::optional<uid_t> uid = LocalTcpPeerUid(*in, local)) {
            peer = "uid " + std::to_string(*uid);
            info->reserved_peer = self->reserved_uids_.count(*uid) > 0;
            local_uid = true;
          }
        }
      }
    }
    std::lock_guard lock(self->conn_mu_);
    info->id = ++self->next_id_;
    if (self->adopting_.erase(fd) > 0) self->ChangedLocked();
    std::vector<ConnectionTable::Close> close;
    const bool admitted = self->table_.Open(
        info->id, peer, ctx->is_unix || local_uid ? self->uid_caps_ : self->address_caps_,
        info->reserved_peer, NowUs(), &close);
    for (const auto& c : close) self->CloseLocked(c);
    if (!admitted) {
      // No room at all: every connection is taken (reserved ones included).
      (void)!send(fd, self->no_room_.data(), self->no_room_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      shutdown(fd, SHUT_RDWR);
      return;
    }
    self->fds_[info->id] = fd;
    self->PokeLocked();
  }

  // Ends connection `c.id` (conn_mu_ held, so its descriptor is still open): says why
  // first where nothing was written on it yet, then shuts it; libmicrohttpd sees the end
  // and closes it.
  void CloseLocked(const ConnectionTable::Close& c) {
    auto it = fds_.find(c.id);
    if (it == fds_.end()) return;
    std::string answer;
    using Phase = ConnectionTable::Phase;
    if (c.phase == Phase::kHead || c.phase == Phase::kBody) {
      if (!c.why.empty()) {
        answer = RawAnswer(503, "Service Unavailable", c.why);
      } else if (c.phase == Phase::kHead) {
        answer = RawAnswer(408, "Request Timeout",
                           "the request head did not arrive in full within " +
                               std::to_string(options_.head_timeout_ms) +
                               " ms of connecting: send it at once");
      } else {
        answer = RawAnswer(408, "Request Timeout",
                           "the request body did not arrive in time (" +
                               std::to_string(options_.transfer_timeout_ms) + " ms, and 1 s per " +
                               std::to_string(options_.min_transfer_bytes_per_s) + " bytes)");
      }
      (void)!send(it->second, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    shutdown(it->second, SHUT_RDWR);
    fds_.erase(it);  // the table forgot it too: nothing shuts it twice
  }

  // Wakes the reaper when a deadline now comes before the one it waits for.
  void PokeLocked() {
    const std::optional<int64_t> next = table_.NextDeadline();
    if (next && *next < reaper_wake_) reaper_cv_.notify_one();
  }

  void Reap() {
    std::unique_lock lock(conn_mu_);
    while (!reaper_stop_) {
      const int64_t now = NowUs();
      for (const auto& c : table_.Expire(now)) CloseLocked(c);
      const std::optional<int64_t> next = table_.NextDeadline();
      reaper_wake_ = next.value_or(std::numeric_limits<int64_t>::max());
      if (next) {
        reaper_cv_.wait_for(lock, std::chrono::microseconds(*next - now));
      } else {
        reaper_cv_.wait(lock);
      }
    }
  }

  // The table's word on a request whose head arrived: "" or why it is refused.
  std::string HeadArrived(MHD_Connection* conn, const HttpRequest& head) {
    ConnInfo* info = InfoOf(conn);
    if (info == nullptr) return "";
    ConnectionClass cls = ConnectionClass::kUser;
    if (!info->reserved_peer) {
      if (options_.classify) {
        cls = options_.classify(head);
      } else {
        cls = info->is_unix ? ConnectionClass::kUser : ConnectionClass::kAnonymous;
      }
    }
    uint64_t body = 0;
    if (const char* te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
        te != nullptr && std::strstr(te, "chunked") != nullptr) {
      body = options_.max_body_bytes;
    } else if (const char* cl =
                   MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
               cl != nullptr) {
      body = std::min<uint64_t>(std::strtoull(cl, nullptr, 10), options_.max_body_bytes);
    }
    std::lock_guard lock(conn_mu_);
    std::string refused = table_.HeadArrived(info->id, cls, body, NowUs());
    PokeLocked();
    return refused;
  }

  void HandlerRunning(MHD_Connection* conn) {
    ConnInfo* info = InfoOf(conn);
    if (info == nullptr) return;
    std::lock_guard lock(conn_mu_);
    table_.HandlerRunning(info->id);
  }

  MHD_Result Answer(MHD_Connection* conn, const HttpResponse& r) {
    if (ConnInfo* info = InfoOf(conn); info != nullptr) {
      std::lock_guard lock(conn_mu_);
      table_.Answering(info->id, r.body.size(), NowUs());
      PokeLocked();
    }
    return Send(conn, r);
  }

  static void OnCompleted(void* cls, MHD_Connection* conn, void** con_cls,
                          MHD_RequestTerminationCode) {
    auto* self = static_cast<MhdServer*>(cls);
    auto* pending = static_cast<PendingRequest*>(*con_cls);
    if (pending != nullptr && pending->suspended) {
      self->Unsuspended(pending);  // answered (or the peer left)
    }
    delete pending;
    *con_cls = nullptr;
    if (ConnInfo* info = InfoOf(conn); info != nullptr) {
      std::lock_guard lock(self->conn_mu_);
      std::vector<ConnectionTable::Close> close;
      self->table_.RequestDone(info->id, NowUs(), &close);
      for (const auto& c : close) self->CloseLocked(c);
      self->PokeLocked();
      self->ChangedLocked();
    }
  }

  // A suspended request is over: its answer was sent, or its connection closed.
  void Unsuspended(PendingRequest* pending) {
    std::lock_guard lock(mu_);
    if (!pending->suspended) return;
    pending->suspended = false;
    deferred_.erase(pending->deferred->id());
    --suspended_;
    idle_cv_.notify_all();
  }

 public:
  // Deferred's answer came after its connection was suspended: wakes it (the descriptor
  // is open until then, so it is forgotten by the hang-up watch first).
  void Resume(const Deferred& d) {
    watch_.Forget(d.fd());
    MHD_resume_connection(d.conn());  // safe from any thread
  }

 private:
  // The hang-up watch's report: the client of a suspended request left.
  void OnHangup(uint64_t id) {
    std::shared_ptr<Deferred> d;
    {
      std::lock_guard lock(mu_);
      auto it = deferred_.find(id);
      if (it == deferred_.end()) return;
      d = it->second;
    }
    d->Abandon(ErrorResponse(503, "the client closed its connection before the answer"));
  }

  static HttpResponse ShuttingDown() {
    return ErrorResponse(503,
                         "the server is shutting down: try again, or another controller of the "
                         "pool");
  }

  void CallHandler(const HttpRequest& req, const std::shared_ptr<Deferred>& out) {
    try {
      handler_(req, out);
    } catch (const std::exception& e) {  // the edge: a handler bug must not kill the server
      out->Complete(ErrorResponse(500, std::string("internal error: ") + e.what()));
    }
  }

  std::shared_ptr<Deferred> NewDeferred(MHD_Connection* conn, Deferred::Stage stage) {
    const MHD_ConnectionInfo* fdi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return std::make_shared<Deferred>(this, conn, fdi != nullptr ? fdi->connect_fd : -1,
                                      next_deferred_.fetch_add(1) + 1, stage);
  }

  // Lists a request whose connection is suspended now (Stop answers it, the hang-up watch
  // looks it up), and counts a blocking handler's thread. False once Stop began: nothing
  // is suspended any more.
  bool ListSuspended(PendingRequest* pending, bool blocking) {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    deferred_[pending->deferred->id()] = pending->deferred;
    pending->suspended = true;
    ++suspended_;
    if (blocking) ++blocking_running_;  // Stop waits for it before it answers the rest
    return true;
  }

  // Runs the handler on this pool thread. Answered before it returned: sent at once.
  // Otherwise the connection is suspended until the answer comes (Deferred::Finish).
  MHD_Result RunDeferrable(MHD_Connection* conn, PendingRequest* pending, const HttpRequest& req) {
    pending->deferred = NewDeferred(conn, Deferred::Stage::kHandling);
    Deferred& d = *pending->deferred;
    CallHandler(req, pending->deferred);
    if (std::optional<HttpResponse> now = d.TakeAnswer()) return Answer(conn, *now);
    d.Suspending();
    if (!ListSuspended(pending, /*blocking=*/false)) {
      d.Abandon(ShuttingDown());
      return Answer(conn, *d.TakeAnswer());
    }
    MHD_suspend_connection(conn);
    watch_.Watch(d.fd(), d.id());
    if (d.Suspended()) Resume(d);  // answered while being suspended
    return MHD_YES;
  }

  // Runs the handler of a blocking request on a thread of its own, or a background one on
  // `pool`, with the connection suspended; its answer resumes the connection, and MHD
  // calls OnRequest again, which sends it. Stop waits for either (blocking_running_).
  MHD_Result RunDetached(MHD_Connection* conn, PendingRequest* pending, HttpRequest req,
                         WorkerPool* pool = nullptr) {
    pending->deferred = NewDeferred(conn, Deferred::Stage::kSuspended);
    if (!ListSuspended(pending, /*blocking=*/true)) return Answer(conn, ShuttingDown());
    MHD_suspend_connection(conn);
    watch_.Watch(pending->deferred->fd(), pending->deferred->id());
    std::function<void()> run = [this, out = pending->deferred, req = std::move(req)] {
      CallHandler(req, out);
      std::lock_guard lock(mu_);
      --blocking_running_;
      idle_cv_.notify_all();  // nothing of `this` is touched after the lock is released
    };
    if (pool == nullptr || !pool->Post(run)) std::thread(std::move(run)).detach();
    return MHD_YES;
  }

  static MHD_Result CollectQuery(void* cls, MHD_ValueKind, const char* key, const char* value) {
    auto* query = static_cast<std::map<std::string, std::string>*>(cls);
    (*query)[key] = value != nullptr ? value : "";
    return MHD_YES;
  }

  static MHD_Result CollectHeader(void* cls, MHD_ValueKind, const char* key, const char* value) {
    auto* headers = static_cast<std::map<std::string, std::string>*>(cls);
    (*headers)[ToLower(key)] = value != nullptr ? value : "";
    return MHD_YES;
  }

  static MHD_Result ListHeader(void* cls, MHD_ValueKind, const char* key, const char* value) {
    static_cast<HeaderList*>(cls)->emplace_back(key, value != nullptr ? value : "");
    return MHD_YES;
  }

  static MHD_Result Send(MHD_Connection* conn, const HttpResponse& r) {
    MHD_Response* resp = MHD_create_response_from_buffer(
        r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
    if (resp == nullptr) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", r.content_type.c_str());
    for (const auto& [k, v] : r.headers) MHD_add_response_header(resp, k.c_str(), v.c_str());
    const MHD_Result ret = MHD_queue_response(conn, static_cast<unsigned>(r.status), resp);
    MHD_destroy_response(resp);
    return ret;
  }

  static HttpResponse ErrorResponse(int status, const std::string& message) {
    HttpResponse r;
    r.status = status;
    r.body = JsonError(message);
    return r;
  }

  // The request as the handler sees it, less its body.
  static HttpRequest HeadOf(MHD_Connection* conn, const char* url, const char* method) {
    HttpRequest req;
    req.method = method;
    req.path = url;
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, &MhdServer::CollectQuery, &req.query);
    MHD_get_connection_values(conn, MHD_HEADER_KIND, &MhdServer::CollectHeader, &req.headers);
    if (const ConnInfo* info = InfoOf(conn); info != nullptr) {
      req.remote = info->remote;
      req.peer = info->peer;
    }
    return req;
  }

  static MHD_Result OnRequest(void* cls, MHD_Connection* conn, const char* url, const char* method,
                              const char*, const char* upload_data, size_t* upload_data_size,
                              void** con_cls) {
    auto* ctx = static_cast<DaemonContext*>(cls);
    MhdServer* self = ctx->server;
    if (*con_cls == nullptr) {  // first call: headers only
      auto* pending = new PendingRequest();
      *con_cls = pending;
      // A body framed two ways (net/request_framing.h), or over a cap on connections:
      // refused before the handler sees it, and closed.
      HeaderList all;
      MHD_get_connection_values(conn, MHD_HEADER_KIND, &MhdServer::ListHeader, &all);
      std::string refused = AmbiguousFraming(all);
      if (ConnInfo* info = InfoOf(conn); info != nullptr && !info->control_escape.empty()) {
        if (refused.empty()) {
          const std::string& part = info->control_escape;
          refused = "request path '" + std::string(url) + "'" +
                    (part == url ? "" : ", its query part '" + part + "'") +
                    ": a percent-encoded control byte (%00-%1F, %7F) is in no path or query "
                    "of this API; send the request without it";
        }
        info->control_escape.clear();
      }
      const int status = refused.empty() ? 503 : 400;
      if (refused.empty()) refused = self->HeadArrived(conn, HeadOf(conn, url, method));
      if (refused.empty()) return MHD_YES;
      pending->refused = true;
      HttpResponse r = ErrorResponse(status, refused);
      r.headers["Connection"] = "close";
      if (status == 503) r.headers["Retry-After"] = "1";
      return self->Answer(conn, r);
    }
    auto* pending = static_cast<PendingRequest*>(*con_cls);
    if (pending->refused) {
      *upload_data_size = 0;
      return MHD_YES;
    }
    if (pending->deferred != nullptr) {  // resumed: the answer is ready
      std::optional<HttpResponse> resp = pending->deferred->TakeAnswer();
      if (!resp) return MHD_YES;
      return self->Answer(conn, *resp);  // counted out of suspended_ in OnCompleted
    }
    if (*upload_data_size > 0) {
      if (pending->body.size() + *upload_data_size > self->options_.max_body_bytes) {
        pending->too_large = true;
        pending->body.clear();
      } else if (!pending->too_large) {
        pending->body.append(upload_data, *upload_data_size);
      }
      *upload_data_size = 0;
      return MHD_YES;
    }
    if (pending->too_large) {
      return self->Answer(
          conn, ErrorResponse(413, "request body is larger than " +
                                       std::to_string(self->options_.max_body_bytes) + " bytes" +
                                       self->options_.max_body_hint));
    }

    HttpRequest req = HeadOf(conn, url, method);
    req.body = std::move(pending->body);
    self->HandlerRunning(conn);
    if (self->options_.may_block && self->options_.may_block(req)) {
      return self->RunDetached(conn, pending, std::move(req));
    }
    if (self->background_ != nullptr && self->options_.background(req)) {
      return self->RunDetached(conn, pending, std::move(req), self->background_.get());
    }
    return self->RunDeferrable(conn, pending, req);
  }

  HttpServerOptions options_;
  HttpAsyncHandler handler_;
  DaemonContext unix_ctx_{};
  DaemonContext tcp_ctx_{};
  MHD_Daemon* unix_daemon_ = nullptr;
  MHD_Daemon* tcp_daemon_ = nullptr;
  int tcp_port_ = 0;

  std::mutex mu_;  // guards the counts, deferred_ and PendingRequest::suspended
  std::condition_variable idle_cv_;
  bool stopping_ = false;     // Stop() began: nothing is suspended any more
  int blocking_running_ = 0;  // handlers running on threads of their own
  int suspended_ = 0;         // connections suspended for an answer
  // The answers awaited by suspended connections, by Deferred::id.
  std::unordered_map<uint64_t, std::shared_ptr<Deferred>> deferred_;
  std::atomic<uint64_t> next_deferred_{0};
  HangupWatch watch_;                       // the peers of suspended connections
  std::unique_ptr<WorkerPool> background_;  // background requests' handlers (or none)

  // Connections (net/connection_table.h). conn_mu_ guards the table, the descriptors and
  // the reaper's state; it is never held while calling into libmicrohttpd.
  std::mutex conn_mu_;
  ConnectionTable table_;
  std::unordered_map<uint64_t, int> fds_;  // open connections' descriptors, by table id
  uint64_t next_id_ = 0;
  PeerCaps uid_caps_;
  PeerCaps address_caps_;
  std::set<uid_t> reserved_uids_;
  std::thread reaper_;                // closes connections past their deadline
  bool draining_ = false;             // Drain began
  std::condition_variable drain_cv_;  // Drain waits on it for the requests under way
  std::set<int> adopting_;            // descriptors Drain gave libmicrohttpd, not yet opened
  std::vector<int> quiesced_;         // the listeners Drain took from libmicrohttpd
  std::condition_variable reaper_cv_;
  int64_t reaper_wake_ = std::numeric_limits<int64_t>::max();
  bool reaper_stop_ = false;
  const std::string no_room_ =
      RawAnswer(503, "Service Unavailable", "the server has no connection free: try again shortly");
};

bool Deferred::Finish(HttpResponse response, bool abandon) {
  std::function<void()> abandoned;
  bool resume = false;
  {
    std::lock_guard lock(mu_);
    if (answered_) return false;
    answered_ = true;
    abandoned_ = abandon;
    response_ = std::move(response);
    if (stage_ == Stage::kSuspended) {
      stage_ = Stage::kResumed;
      resume = true;
    }
    if (abandon) abandoned = std::move(on_abandoned_);
    on_abandoned_ = nullptr;
  }
  // The connection stays suspended, and the server waits for it, until this resumes it.
  if (resume) server_->Resume(*this);
  if (abandoned) abandoned();
  return true;
}

}  // namespace

Result<std::unique_ptr<HttpServer>> StartHttpServer(const HttpServerOptions& options,
                                                    HttpAsyncHandler handler) {
  auto server = std::make_unique<MhdServer>(options, std::move(handler));
  GP_RETURN_IF_ERROR(server->Start());
  return std::unique_ptr<HttpServer>(std::move(server));
}

Result<std::unique_ptr<HttpServer>> StartHttpServer(const HttpServerOptions& options,
                                                    HttpHandler handler) {
  return StartHttpServer(options,
                         [handler = std::move(handler)](const HttpRequest& r,
                                                        const std::shared_ptr<HttpResponder>& out) {
                           out->Complete(handler(r));
                         });
}

}  // namespace gpupool::net
