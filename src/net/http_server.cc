#include "net/http_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/strings.h"

namespace gpupool::net {
namespace {

// Per-connection state while a request body arrives and, for a blocking request, while
// its handler runs on a thread of its own (the connection is suspended meanwhile).
struct PendingRequest {
  std::string body;
  bool too_large = false;
  bool detached = false;   // handed to a thread of its own; the connection is suspended
  bool ready = false;      // that thread's response is in `response` (guarded by mu_)
  bool suspended = false;  // counted in suspended_ (guarded by mu_)
  HttpResponse response;
};

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

Result<int> ListenUnix(const std::string& path, int mode) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("socket path '" + path + "' is longer than " +
                                   std::to_string(sizeof(addr.sun_path) - 1) +
                                   " bytes: choose a shorter --state-dir");
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(Errno("socket(AF_UNIX)"));
  // A socket file left by a crashed server is stale only if nobody answers on it.
  {
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0) {
      const bool live = connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      close(probe);
      if (live) {
        close(fd);
        return Status::AlreadyExists("another gpupool server is listening on '" + path +
                                     "': stop it first or use another --state-dir");
      }
    }
    unlink(path.c_str());
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    Status s = Status::Unavailable(Errno(("bind '" + path + "'").c_str()));
    close(fd);
    return s;
  }
  chmod(path.c_str(), static_cast<mode_t>(mode));
  if (listen(fd, 512) != 0) {
    Status s = Status::Unavailable(Errno("listen"));
    close(fd);
    return s;
  }
  return fd;
}

Result<int> ListenTcp(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("listen address '" + host + "' is not an IPv4 address");
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(Errno("socket(AF_INET)"));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    Status s = Status::Unavailable(Errno(("bind " + host + ":" + std::to_string(port)).c_str()) +
                                   ": pick another --port");
    close(fd);
    return s;
  }
  if (listen(fd, 512) != 0) {
    Status s = Status::Unavailable(Errno("listen"));
    close(fd);
    return s;
  }
  return fd;
}

class MhdServer final : public HttpServer {
 public:
  MhdServer(HttpServerOptions options, HttpHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)) {}
  ~MhdServer() override { Stop(); }

  Status Start() {
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

  void Stop() override {
    // MHD must not be stopped with suspended connections (it aborts the process): from
    // now on no request is suspended (a blocking one is answered 503 at once: an agent's
    // next long poll, arriving while this waits), and the blocking handlers running
    // finish (as joining their connection threads used to) and their answers go out.
    bool drained = false;
    {
      std::unique_lock lock(mu_);
      stopping_ = true;
      idle_cv_.wait(lock, [this] { return blocking_running_ == 0; });
      drained =
          idle_cv_.wait_for(lock, std::chrono::seconds(5), [this] { return suspended_ == 0; });
    }
    if (!drained) {
      // An answer that could not be sent in 5 s: stopping the daemon now would abort.
      // The process is on its way out; its threads go with it.
      if (unix_daemon_ != nullptr) unlink(options_.unix_socket_path.c_str());
      unix_daemon_ = nullptr;
      tcp_daemon_ = nullptr;
      return;
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
  }

 private:
  struct DaemonContext {
    MhdServer* server;
    bool is_unix;
  };

  MHD_Daemon* StartDaemon(int listen_fd, bool is_unix) {
    auto& ctx = is_unix ? unix_ctx_ : tcp_ctx_;
    ctx = {this, is_unix};
    const unsigned hw = std::thread::hardware_concurrency();
    const unsigned threads = options_.pool_threads > 0
                                 ? static_cast<unsigned>(options_.pool_threads)
                                 : std::max(8U, 2 * hw);
    return MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, nullptr,
        nullptr, &MhdServer::OnRequest, &ctx, MHD_OPTION_LISTEN_SOCKET, listen_fd,
        MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_LIMIT, ConnectionLimit(),
        MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(options_.connection_timeout_s),
        MHD_OPTION_NOTIFY_COMPLETED, &MhdServer::OnCompleted, this, MHD_OPTION_END);
  }

  unsigned ConnectionLimit() const {
    if (options_.max_connections > 0) return static_cast<unsigned>(options_.max_connections);
    struct rlimit rl {};
    rlim_t files = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) files = rl.rlim_cur;
    if (rl.rlim_cur == RLIM_INFINITY) files = 1 << 20;
    // Descriptors for the store, logs, pipes and the job supervisors stay free.
    const rlim_t reserve = 128;
    const rlim_t listeners =
        (options_.unix_socket_path.empty() ? 0 : 1) + (options_.tcp_host.empty() ? 0 : 1);
    const rlim_t per = files > reserve ? (files - reserve) / std::max<rlim_t>(listeners, 1) : 16;
    return static_cast<unsigned>(std::clamp<rlim_t>(per, 16, 1 << 20));
  }

  static void OnCompleted(void* cls, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode) {
    auto* pending = static_cast<PendingRequest*>(*con_cls);
    if (pending != nullptr && pending->detached) {
      static_cast<MhdServer*>(cls)->Unsuspended(pending);  // answered (or the peer left)
    }
    delete pending;
    *con_cls = nullptr;
  }

  // A detached request is over: its answer was sent, or its connection closed.
  void Unsuspended(PendingRequest* pending) {
    std::lock_guard lock(mu_);
    if (!pending->suspended) return;
    pending->suspended = false;
    --suspended_;
    idle_cv_.notify_all();
  }

  HttpResponse CallHandler(const HttpRequest& req) {
    try {
      return handler_(req);
    } catch (const std::exception& e) {  // the edge: a handler bug must not kill the server
      return ErrorResponse(500, std::string("internal error: ") + e.what());
    }
  }

  // Runs the handler of a blocking request on a thread of its own with the connection
  // suspended; the thread resumes it when the answer is ready, and MHD calls OnRequest
  // again, which sends it.
  MHD_Result RunDetached(MHD_Connection* conn, PendingRequest* pending, HttpRequest req) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) {
        return Send(conn, ErrorResponse(503,
                                        "the server is shutting down: try again, or "
                                        "another controller of the pool"));
      }
      pending->detached = true;
      pending->suspended = true;
      ++suspended_;
      ++blocking_running_;
    }
    MHD_suspend_connection(conn);
    std::thread([this, conn, pending, req = std::move(req)] {
      HttpResponse resp = CallHandler(req);
      {
        std::lock_guard lock(mu_);
        pending->response = std::move(resp);
        pending->ready = true;
      }
      MHD_resume_connection(conn);  // safe from any thread, at any time
      std::lock_guard lock(mu_);
      --blocking_running_;
      idle_cv_.notify_all();  // nothing of `this` is touched after the lock is released
    }).detach();
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
    r.body = "{\"error\":" + QuoteJson(message) + "}";
    return r;
  }

  static std::string QuoteJson(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20) {
        char buf[8];
        (void)std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
    return out + "\"";
  }

  static MHD_Result OnRequest(void* cls, MHD_Connection* conn, const char* url, const char* method,
                              const char*, const char* upload_data, size_t* upload_data_size,
                              void** con_cls) {
    auto* ctx = static_cast<DaemonContext*>(cls);
    MhdServer* self = ctx->server;
    if (*con_cls == nullptr) {  // first call: headers only
      *con_cls = new PendingRequest();
      return MHD_YES;
    }
    auto* pending = static_cast<PendingRequest*>(*con_cls);
    if (pending->detached) {  // resumed: the blocking handler's answer is ready
      HttpResponse resp;
      {
        std::lock_guard lock(self->mu_);
        if (!pending->ready) return MHD_YES;
        resp = std::move(pending->response);
      }
      return Send(conn, resp);  // counted out of suspended_ in OnCompleted, once it is sent
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
      return Send(conn, ErrorResponse(413, "request body is larger than " +
                                               std::to_string(self->options_.max_body_bytes) +
                                               " bytes" + self->options_.max_body_hint));
    }

    HttpRequest req;
    req.method = method;
    req.path = url;
    req.body = std::move(pending->body);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, &MhdServer::CollectQuery, &req.query);
    MHD_get_connection_values(conn, MHD_HEADER_KIND, &MhdServer::CollectHeader, &req.headers);
    if (ctx->is_unix) {
      req.remote = "unix";
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
      ucred cred{};
      socklen_t len = sizeof cred;
      if (info != nullptr &&
          getsockopt(info->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        req.peer = PeerCredentials{cred.pid, cred.uid, cred.gid};
      }
    } else {
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      if (info != nullptr && info->client_addr != nullptr &&
          info->client_addr->sa_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(info->client_addr);
        char buf[INET_ADDRSTRLEN] = {};
        inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
        req.remote = std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
      }
    }
    if (self->options_.may_block && self->options_.may_block(req)) {
      return self->RunDetached(conn, pending, std::move(req));
    }
    return Send(conn, self->CallHandler(req));
  }

  HttpServerOptions options_;
  HttpHandler handler_;
  DaemonContext unix_ctx_{};
  DaemonContext tcp_ctx_{};
  MHD_Daemon* unix_daemon_ = nullptr;
  MHD_Daemon* tcp_daemon_ = nullptr;
  int tcp_port_ = 0;

  std::mutex mu_;  // guards the two counts and PendingRequest's shared fields
  std::condition_variable idle_cv_;
  bool stopping_ = false;     // Stop() began: nothing is suspended any more
  int blocking_running_ = 0;  // handlers running on threads of their own
  int suspended_ = 0;         // connections suspended for them
};

}  // namespace

Result<std::unique_ptr<HttpServer>> StartHttpServer(const HttpServerOptions& options,
                                                    HttpHandler handler) {
  auto server = std::make_unique<MhdServer>(options, std::move(handler));
  GP_RETURN_IF_ERROR(server->Start());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace gpupool::net
