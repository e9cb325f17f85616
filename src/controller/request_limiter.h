// RequestLimiter: how many requests that may wait (long polls, `logs -f`, inspections)
// one caller and all callers together may have in flight. Each such request holds a
// thread of the HTTP server until it is answered, so without a bound one user could
// hold hundreds of threads (issue: "blocking requests cost a thread each, with no
// per-user cap"). Thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "common/mutex.h"

namespace gpupool::controller {

class RequestLimiter {
 public:
  RequestLimiter(size_t per_caller, size_t total) : per_caller_(per_caller), total_(total) {}

  // A slot held until destroyed.
  class Slot {
   public:
    Slot(RequestLimiter* owner, std::string key) : owner_(owner), key_(std::move(key)) {}
    Slot(Slot&& o) noexcept : owner_(o.owner_), key_(std::move(o.key_)) { o.owner_ = nullptr; }
    Slot& operator=(Slot&& o) noexcept {
      if (this != &o) {
        if (owner_ != nullptr) owner_->Release(key_);
        owner_ = o.owner_;
        key_ = std::move(o.key_);
        o.owner_ = nullptr;
      }
      return *this;
    }
    Slot(const Slot&) = delete;
    ~Slot() {
      if (owner_ != nullptr) owner_->Release(key_);
    }

   private:
    RequestLimiter* owner_;
    std::string key_;
  };

  // A slot for `key`, or nullopt when the caller or the server is at its bound; `*why`
  // then says which, in words for the caller.
  std::optional<Slot> TryAcquire(const std::string& key, std::string* why) EXCLUDES(mu_);

  size_t InFlight(const std::string& key) EXCLUDES(mu_);
  size_t per_caller() const { return per_caller_; }

 private:
  void Release(const std::string& key) EXCLUDES(mu_);

  const size_t per_caller_;
  const size_t total_;
  Mutex mu_;
  std::map<std::string, size_t> in_flight_ GUARDED_BY(mu_);
  size_t all_ GUARDED_BY(mu_) = 0;
};

}  // namespace gpupool::controller
