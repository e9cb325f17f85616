// HttpServer: serves one handler on a Unix socket and/or a TCP address, with
// libmicrohttpd underneath.
//
// A small pool of threads (epoll) serves every connection; a handler runs on a pool
// thread and must not block for long. Requests that may block (long polls: an agent
// waiting for work, `logs -f`) are named by the may_block predicate: their connection is
// suspended and the handler runs on a thread of its own, so a hundred waiting agents hold
// no pool thread. (A thread per connection, the earlier design, cost a thread creation
// and an allocator arena per request: a sixth of the server's CPU under load.)
//
// On Unix sockets each request carries the caller's kernel-verified credentials
// (SO_PEERCRED). Bodies over max_body_bytes are answered with 413 before the handler
// runs. The handler must be thread-safe. Stop() waits for running handlers, including
// blocking ones, as joining a connection thread did. The server owns its sockets and
// removes the Unix socket file on Stop().
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
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
  int connection_timeout_s = 120;
  // Threads serving connections; 0: max(8, 2 x CPUs). A handler that waits on the store
  // holds its thread, so there are more threads than CPUs: reads go on meanwhile.
  int pool_threads = 0;
  // Connections open at once, per listener. 0: what the open-files limit allows (half
  // of it each with two listeners, less a reserve), so that hundreds of agents can hold
  // their long polls beside the clients. libmicrohttpd's own default is ~1,020.
  int max_connections = 0;
  // Requests for which this returns true run on a thread of their own (see above);
  // it sees the whole request (method, path, query, headers, body). Unset: none.
  std::function<bool(const HttpRequest&)> may_block;
};

class HttpServer {
 public:
  virtual ~HttpServer() = default;
  // The TCP port actually bound (useful with tcp_port = 0), or 0 without TCP.
  virtual int tcp_port() const = 0;
  virtual void Stop() = 0;
};

Result<std::unique_ptr<HttpServer>> StartHttpServer(const HttpServerOptions& options,
                                                    HttpHandler handler);

}  // namespace gpupool::net
