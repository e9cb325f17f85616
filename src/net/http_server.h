// HttpServer: serves one handler on a Unix socket and/or a TCP address, with
// libmicrohttpd underneath (a thread per connection, so a handler may block, e.g. for a
// long poll).
//
// On Unix sockets each request carries the caller's kernel-verified credentials
// (SO_PEERCRED). Bodies over max_body_bytes are answered with 413 before the handler
// runs. The handler must be thread-safe; it runs on the connection's thread. The server
// owns its sockets and removes the Unix socket file on Stop().
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
  int connection_timeout_s = 120;
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
