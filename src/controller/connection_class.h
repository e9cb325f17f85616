// Which share of the HTTP server's connections a request belongs to, from its head alone
// (net::HttpServerOptions::classify; docs/security.md, "Connection exhaustion"): an agent
// (a valid node token) gets the share no one else may use, a known caller (a uid on the
// Unix socket, a valid user or metrics token) the active share, and anyone else stays
// among the connections that make room for new ones. Only capacity: the API still
// authenticates every request itself (auth.h), so a stale answer here (a token revoked a
// minute ago) grants no access. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "net/connection_table.h"
#include "net/http.h"
#include "store/store.h"

namespace gpupool::controller {

class ConnectionClassifier {
 public:
  // How long a token found in the store is taken as it was, without asking again.
  static constexpr int64_t kRememberUs = 60'000'000;
  static constexpr size_t kMaxRemembered = 10'000;

  ConnectionClassifier(store::Store* store, const Clock* clock) : store_(store), clock_(clock) {}

  net::ConnectionClass Classify(const net::HttpRequest& head);

 private:
  struct Known {
    std::string kind;
    int64_t expires_us = 0;
    int64_t found_us = 0;
  };

  store::Store* store_;
  const Clock* clock_;
  std::mutex mu_;
  std::unordered_map<std::string, Known> known_;  // by token hash
};

}  // namespace gpupool::controller
