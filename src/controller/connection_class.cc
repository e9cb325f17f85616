#include "controller/connection_class.h"

#include <optional>

#include "controller/auth.h"

namespace gpupool::controller {

net::ConnectionClass ConnectionClassifier::Classify(const net::HttpRequest& head) {
  const std::string header = head.Header("authorization");
  // The kernel's word on the socket, as Authenticate takes it.
  if (head.peer && header.empty()) return net::ConnectionClass::kUser;
  const std::string prefix = "Bearer ";
  if (header.size() <= prefix.size() || header.compare(0, prefix.size(), prefix) != 0) {
    return net::ConnectionClass::kAnonymous;  // no token over TCP (a dashboard cookie too)
  }
  const std::string hash = HashToken(header.substr(prefix.size()));
  const int64_t now = clock_->NowMicros();
  std::optional<Known> known;
  {
    std::lock_guard lock(mu_);
    if (auto it = known_.find(hash);
        it != known_.end() && now - it->second.found_us < kRememberUs) {
      known = it->second;
    }
  }
  if (!known) {
    Result<std::optional<store::TokenRecord>> rec = store_->FindToken(hash);
    if (!rec.ok() || !rec->has_value()) return net::ConnectionClass::kAnonymous;
    known = Known{(*rec)->kind, (*rec)->expires_us, now};
    std::lock_guard lock(mu_);
    if (known_.size() >= kMaxRemembered) known_.clear();
    known_[hash] = *known;
  }
  if (known->expires_us != 0 && now >= known->expires_us) return net::ConnectionClass::kAnonymous;
  return known->kind == "node" ? net::ConnectionClass::kReserved : net::ConnectionClass::kUser;
}

}  // namespace gpupool::controller
