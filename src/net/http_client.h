// HttpClient: one-shot HTTP/1.1 requests to a gpupool server over a Unix socket or TCP
// (one connection per request, closed by the server after its answer; no TLS).
//
// It knows a list of controllers, one of which leads (docs/deploy.md): a standby answers
// every API request with 503 and a JSON body naming the leader, {"leader": "http://H:P"},
// or "" while none is known. Send() goes to the address it believes leads (at first the
// list's first) and fails over within one call:
//   - a failure to connect (nothing sent) moves to the next list address, each tried at
//     most once per call;
//   - a standby's 503 with a leader that parses moves to that leader (even if it is not in
//     the list), at most 3 such hops per call; with no usable leader, to the next list
//     address;
//   - a failure after the request was (possibly) sent (a reset, no answer in time) is
//     never re-sent anywhere: the request may have been processed, so it comes back as
//     kUnavailable and the caller retries (with an idempotency key where it matters).
// A 503 without a `leader` member (a leader's own "node is down", /readyz) is an answer
// like any other. The address that last gave an answer other than a standby's 503 is
// where the next call starts. With one address this is a plain one-server client.
//
// Thread-safe: each call uses its own connection; the remembered leader is guarded by a
// mutex. Copies start from the original's current leader and then go their own way.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "net/http.h"

namespace gpupool::net {

// Parses a whole HTTP/1.1 answer, as read until the server closed the connection: the
// status line, headers (names lower-cased) and a chunked or Content-Length body (else
// all that follows the head). Unavailable, saying what is wrong, for an answer cut short
// or not HTTP. HttpClient's parser, exposed for fuzz/http_response_fuzzer.cc.
Result<HttpResponse> ParseHttpResponse(std::string_view raw);

class HttpClient {
 public:
  explicit HttpClient(ServerAddress address, std::string bearer_token = "");
  // `addresses` in order of preference; an empty list makes every Send kInvalidArgument.
  explicit HttpClient(std::vector<ServerAddress> addresses, std::string bearer_token = "");
  HttpClient(const HttpClient& other);
  HttpClient& operator=(const HttpClient& other);

  // Sends the request (with failover as above); any HTTP status other than a standby's 503
  // comes back as a response. kUnavailable when no address gave an answer (naming each
  // address tried and why it failed) or when the exchange failed after sending;
  // kInvalidArgument for a method, path or token that would break the request.
  Result<HttpResponse> Send(const std::string& method, const std::string& path_and_query,
                            const std::string& body = "", int timeout_ms = 30'000) const;
  Result<HttpResponse> Get(const std::string& path, int timeout_ms = 30'000) const {
    return Send("GET", path, "", timeout_ms);
  }
  Result<HttpResponse> Post(const std::string& path, const std::string& body,
                            int timeout_ms = 30'000) const {
    return Send("POST", path, body, timeout_ms);
  }

  // A file descriptor (an eventfd, a pipe's read end) that, once readable, ends every
  // wait of this client's calls, in flight or later: they fail at once with Unavailable
  // ("cancelled"), and try no other address. For a daemon's shutdown, so that a long
  // poll does not hold it. The caller keeps the fd open while the client is used; -1
  // (the default): none. Set before the client is shared between threads.
  void set_cancel_fd(int fd) { cancel_fd_ = fd; }

  // The address the next call starts at (the believed leader), for messages.
  ServerAddress address() const;
  // The configured list, in order.
  const std::vector<ServerAddress>& addresses() const { return addresses_; }

 private:
  void Remember(const ServerAddress& a) const;

  std::vector<ServerAddress> addresses_;
  std::string bearer_token_;
  int cancel_fd_ = -1;
  mutable std::mutex mu_;
  mutable ServerAddress current_;  // guarded by mu_
};

// Percent-encodes a query value.
std::string UrlEncode(const std::string& s);

}  // namespace gpupool::net
