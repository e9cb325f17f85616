#include "net/worker_pool.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace gpupool::net {

bool RenicePoolThread(int delta) {
  if (delta == 0) return true;
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, tid);
  if (now == -1 && errno != 0) return false;
  return setpriority(PRIO_PROCESS, tid, std::clamp(now + delta, -20, 19)) == 0;
}

WorkerPool::WorkerPool(Options options) : options_(std::move(options)) {
  const int n = std::max(options_.threads, 1);
  threads_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Run(); });
}

bool WorkerPool::Post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void WorkerPool::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  std::lock_guard lock(mu_);
  threads_.clear();
}

int WorkerPool::prioritized() const {
  std::lock_guard lock(mu_);
  return prioritized_;
}

void WorkerPool::Run() {
  if (!options_.name.empty()) {
    pthread_setname_np(pthread_self(), options_.name.substr(0, 15).c_str());
  }
  const bool reniced = RenicePoolThread(options_.nice);
  std::unique_lock lock(mu_);
  if (reniced) ++prioritized_;
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace gpupool::net
