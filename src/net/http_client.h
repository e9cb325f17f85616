// HttpClient: one-shot HTTP/1.1 requests to a gpupool server over a Unix socket or TCP
// (one connection per request, closed by the server after its answer; no TLS).
// Thread-safe: each call uses its own connection.
#pragma once

#include <map>
#include <string>

#include "common/status.h"
#include "net/http.h"

namespace gpupool::net {

class HttpClient {
 public:
  explicit HttpClient(ServerAddress address, std::string bearer_token = "");

  // Sends the request; any HTTP status comes back as a response. A transport failure
  // (no server, refused, timed out) is kUnavailable naming the address.
  Result<HttpResponse> Send(const std::string& method, const std::string& path_and_query,
                            const std::string& body = "", int timeout_ms = 30'000) const;
  Result<HttpResponse> Get(const std::string& path, int timeout_ms = 30'000) const {
    return Send("GET", path, "", timeout_ms);
  }
  Result<HttpResponse> Post(const std::string& path, const std::string& body,
                            int timeout_ms = 30'000) const {
    return Send("POST", path, body, timeout_ms);
  }

  const ServerAddress& address() const { return address_; }

 private:
  ServerAddress address_;
  std::string bearer_token_;
};

// Percent-encodes a query value.
std::string UrlEncode(const std::string& s);

}  // namespace gpupool::net
