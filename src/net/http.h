// HTTP request/response values shared by the server (libmicrohttpd) and the client
// (libcurl), and the address syntax every gpupool command uses to find a server:
// "unix:/path/to/gpupool.sock" or "http://host:port", or a comma list of them (several
// controllers, one of which leads).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::net {

// Who is calling, as the kernel says (Unix sockets only, from SO_PEERCRED).
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // "/v1/jobs/12"
  std::map<std::string, std::string> query;    // decoded query arguments
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::optional<PeerCredentials> peer;  // set on Unix-socket connections
  std::string remote;                   // "unix" or "127.0.0.1:5678"

  std::string Header(std::string_view name) const;  // lower-case name; "" when absent
  std::string Query(std::string_view name, std::string fallback = "") const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;
};

// The answer to a request that its handler gives later (HttpServer's deferred answers):
// a long poll hands it to whatever will complete it, and returns at once, holding no
// thread while it waits. Thread-safe; it may outlive the server (completing it then does
// nothing).
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  // Answers with `response`. Only the first answer counts: returns whether this one did
  // (false once answered, abandoned, or the server stopped). Any thread; never blocks on
  // the network.
  virtual bool Complete(HttpResponse response) = 0;
  // `fn` runs once, on a thread of the server and with none of its locks held, when the
  // request ends without Complete's answer: its client hung up, or the server stops
  // (which answers 503 itself). At once, on the calling thread, when that happened
  // already; never once Complete answered. Lets a waiter's owner forget it at once.
  virtual void OnAbandoned(std::function<void()> fn) = 0;
};

// A handler that answers through `responder`: at once (Complete before returning) or
// later, from any thread.
using HttpAsyncHandler =
    std::function<void(const HttpRequest& request, std::shared_ptr<HttpResponder> responder)>;

struct ServerAddress {
  enum class Kind { kUnix, kTcp } kind = Kind::kUnix;
  std::string path;  // kUnix
  std::string host;  // kTcp
  int port = 0;      // kTcp
  std::string ToString() const;
};

// Parses "unix:/path", "unix:///path", "http://host:port" or "host:port".
Result<ServerAddress> ParseServerAddress(std::string_view text);

// Parses a comma-separated list of what ParseServerAddress accepts, spaces around the
// commas allowed: "http://c1:8421, http://c2:8421". At least one; kInvalidArgument naming
// the empty or bad element otherwise.
Result<std::vector<ServerAddress>> ParseServerAddressList(std::string_view text);

// The list as ParseServerAddressList reads it back: "http://c1:8421,http://c2:8421".
std::string ServerAddressListToString(const std::vector<ServerAddress>& addresses);

}  // namespace gpupool::net
