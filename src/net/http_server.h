// HttpServer: serves one handler on a Unix socket and/or a TCP address, with
// libmicrohttpd underneath.
//
// A small pool of threads (epoll) serves every connection; a handler runs on a pool
// thread and must not block for long. A handler answers through an HttpResponder
// (net/http.h): at once, or later from any thread (a long poll: an agent waiting for
// work). Until a later answer comes the connection is suspended and no thread waits for
// it, so 10,000 waiting agents cost memory, not threads; a client that hangs up meanwhile
// is noticed at once (net/hangup_watch.h) and its responder abandoned. Requests whose
// handler blocks instead (`logs -f`, image inspections) are named by the may_block
// predicate: their connection is suspended and the handler runs on a thread of its own.
// (A thread per connection, the earlier design, cost a thread creation and an allocator
// arena per request: a sixth of the server's CPU under load.)
//
// On Unix sockets each request carries the caller's kernel-verified credentials
// (SO_PEERCRED). Bodies over max_body_bytes are answered with 413 before the handler
// runs, and bodies framed two ways (net/request_framing.h) with 400. The handler must
// be thread-safe. Stop() waits for running handlers, including blocking ones, as
// joining a connection thread did, then answers every answer still awaited with 503
// (its OnAbandoned function runs). The server owns its sockets and removes the Unix
// socket file on Stop().
//
// No peer can take every connection (docs/security.md, "Connection exhaustion"): each
// uid on the socket and each address over TCP has its caps, connections that have not
// shown who they are make room for new ones, agents have a share no one else may use, and
// each phase of a request has a deadline that trickled bytes do not move
// (HttpServerOptions below, net/connection_table.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "net/connection_table.h"
#include "net/http.h"

namespace gpupool::net {

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  std::string unix_socket_path;  // empty: no Unix socket
  int unix_socket_mode = 0666;   // everyone may connect; identity comes from SO_PEERCRED
  std::string tcp_host;          // empty: no TCP listener
  int tcp_port = 0;              // 0 with a tcp_host: pick a free port
  size_t max_body_bytes = 1 << 20;
  // Appended to the 413 answer for a larger body: where the limit comes from.
  std::string max_body_hint;
  // libmicrohttpd's own timeout: this long without a byte either way. The deadlines
  // below come first; this one covers a handler's answer being written when the
  // connection stalls.
  int connection_timeout_s = 120;
  // Threads serving connections; 0: max(8, 2 x CPUs). A handler that waits on the store
  // holds its thread, so there are more threads than CPUs: reads go on meanwhile.
  int pool_threads = 0;

  // Connections, every listener together (docs/security.md, "Connection exhaustion";
  // the rules are net/connection_table.h's). 0: the open-files limit less a tenth of it
  // (at least 128) for the store, logs and jobs' pipes, so that hundreds of agents can
  // hold their long polls beside the clients (libmicrohttpd's default is ~1,020).
  int max_connections = 0;
  // Of those, kept for agents (a request head with a node token, see `classify`) and the
  // reserved uids; 0: a quarter.
  int reserved_connections = 0;
  // Connections that have not shown who they are (no complete head yet, between two
  // requests, no valid credentials), in all; 0: half of those not reserved. Past it the
  // oldest is closed.
  int max_pending_connections = 0;
  int max_pending_per_peer = 64;          // the same, of one uid or address
  int max_connections_per_uid = 256;      // a uid's on the socket with a request under way
  int max_connections_per_address = 256;  // an address's over TCP, the same
  // Unix-socket peers whose connections are reserved from accept and bear no per-uid cap.
  // Unset: root and this process's own uid (the local agent of `gpupool up`).
  std::optional<std::vector<uid_t>> reserved_uids;
  // Deadlines that bytes do not move: the whole request head (request line and headers)
  // within head_timeout_ms of accept; the body, and the answer, within transfer_timeout_ms
  // plus their size at min_transfer_bytes_per_s; the next request's head within
  // idle_timeout_ms of the last answer.
  int head_timeout_ms = 10'000;
  int idle_timeout_ms = 5'000;
  int transfer_timeout_ms = 10'000;
  int min_transfer_bytes_per_s = 16 * 1024;
  // What a request's head (no body yet) shows of its caller: kReserved for agents,
  // kUser for a known caller, kAnonymous otherwise. It must be quick and thread-safe.
  // Unset: kUser on the Unix socket (the kernel names the uid), kAnonymous over TCP.
  std::function<ConnectionClass(const HttpRequest&)> classify;

  // Requests for which this returns true run on a thread of their own (see above);
  // it sees the whole request (method, path, query, headers, body). Unset: none.
  std::function<bool(const HttpRequest&)> may_block;

  // Request priority (docs/deploy.md, "Request priority"): requests for which this returns
  // true (agents' polls, event reports, registrations) are background. Their handlers run
  // on background_threads threads of their own (named http-background) at background_nice
  // above the process's nice value, their connection suspended meanwhile (as a long poll's
  // is), so that users' requests, whose handlers run on the pool threads, and the process's
  // other threads (the scheduler) get a short CPU first. A background request waits for a
  // free background thread in arrival order; the kernel still gives those threads their
  // weighted share of a busy CPU, so none waits for ever. It sees the whole request, must
  // be quick and thread-safe; may_block comes first. Unset: none, every handler runs on
  // the pool threads.
  std::function<bool(const HttpRequest&)> background;
  int background_threads = 0;  // 0: as many as pool threads
  int background_nice = 10;    // 0..19
};

// Raises this process's soft open-files limit (RLIMIT_NOFILE) to its hard limit, so that
// the server's connections are bounded by what the system allows rather than by a
// login's 1,024. Returns the limit now in force.
Result<uint64_t> RaiseOpenFilesLimit();

class HttpServer {
 public:
  virtual ~HttpServer() = default;
  // The TCP port actually bound (useful with tcp_port = 0), or 0 without TCP.
  virtual int tcp_port() const = 0;
  // Answers what reached the server and takes nothing more, for a process about to exit
  // (a controller that lost its lease): libmicrohttpd stops accepting, the connections
  // waiting on the listeners are accepted and served, the listeners then refuse new ones,
  // and this waits, up to `timeout_ms`, until no connection has a request under way (its
  // head arriving, its handler running or its answer awaited, its answer going out).
  // Returns whether none had in time. Any thread, once; Stop() still stops afterwards.
  virtual bool Drain(int timeout_ms) = 0;
  virtual void Stop() = 0;
};

// `handler` answers each request through its responder, at once or later.
Result<std::unique_ptr<HttpServer>> StartHttpServer(const HttpServerOptions& options,
                                                    HttpAsyncHandler handler);
// A handler that always answers at once.
Result<std::unique_ptr<HttpServer>> StartHttpServer(const HttpServerOptions& options,
                                                    HttpHandler handler);

}  // namespace gpupool::net
