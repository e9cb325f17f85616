#include "common/periodic_thread.h"

#include <chrono>

namespace gpupool {

void PeriodicThread::Start() {
  std::lock_guard lock(mu_);
  if (started_ || stopping_) return;
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
}

void PeriodicThread::Kick() {
  {
    std::lock_guard lock(mu_);
    kicked_ = true;
  }
  cv_.notify_all();
}

void PeriodicThread::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

uint64_t PeriodicThread::runs() const {
  std::lock_guard lock(mu_);
  return runs_;
}

bool PeriodicThread::WaitForRuns(uint64_t n, int real_timeout_ms) const {
  std::unique_lock lock(mu_);
  return runs_cv_.wait_for(lock, std::chrono::milliseconds(real_timeout_ms),
                           [&] { return runs_ >= n; });
}

void PeriodicThread::Loop() {
  std::unique_lock lock(mu_);
  int64_t next_us = clock_->MonotonicMicros() + period_us_;
  while (!stopping_) {
    clock_->WaitUntil(cv_, lock, next_us, [this] { return stopping_ || kicked_; });
    if (stopping_) break;
    kicked_ = false;
    lock.unlock();
    task_();
    lock.lock();
    ++runs_;
    runs_cv_.notify_all();
    next_us = clock_->MonotonicMicros() + period_us_;
  }
}

}  // namespace gpupool
