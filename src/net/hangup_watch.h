// HangupWatch: one thread that watches the descriptors of suspended connections (long
// polls waiting for their answer) for their peer's hang-up, so that a waiter whose client
// left is dropped at once rather than at its deadline. libmicrohttpd does not look at a
// suspended connection at all until it is resumed.
//
// A descriptor is reported once (EPOLLONESHOT) by the id it was watched with; the owner
// Forgets it before the descriptor can be closed (before resuming its connection).
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>

#include "common/status.h"

namespace gpupool::net {

class HangupWatch {
 public:
  // `on_hangup(id)` runs on the watch's thread, with no lock of the watch held.
  explicit HangupWatch(std::function<void(uint64_t id)> on_hangup);
  ~HangupWatch() { Stop(); }
  HangupWatch(const HangupWatch&) = delete;
  HangupWatch& operator=(const HangupWatch&) = delete;

  Status Start();
  // Reports `id` once `fd`'s peer hangs up (or at once if it has). False when the
  // descriptor cannot be watched: its waiter then ends at its deadline.
  bool Watch(int fd, uint64_t id);
  // Stops watching `fd` (it stays open: the caller closes it, or lets it be closed).
  void Forget(int fd);
  // Ends the thread; idempotent. No report runs after it returns.
  void Stop();

 private:
  void Run();

  std::function<void(uint64_t)> on_hangup_;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd: readable once Stop began
  std::thread thread_;
};

}  // namespace gpupool::net
