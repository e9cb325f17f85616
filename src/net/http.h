// HTTP request/response values shared by the server (libmicrohttpd) and the client
// (libcurl), and the address syntax every gpupool command uses to find a server:
// "unix:/path/to/gpupool.sock" or "http://host:port", or a comma list of them (several
// controllers, one of which leads).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
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
