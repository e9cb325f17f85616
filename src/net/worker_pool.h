// WorkerPool: a fixed set of threads that run posted tasks in the order they came, at an
// OS priority of their own (a nice value above the process's, which needs no privilege;
// below it needs CAP_SYS_NICE or RLIMIT_NICE, and is left as inherited where refused).
// The HTTP server runs the handlers of background requests (agents' traffic) on one, so
// that the CPU goes to users' requests and the scheduler first when it is short
// (http_server.h, HttpServerOptions::background). Linux's scheduler still gives a nice-N
// thread its weighted share of a busy CPU, so a posted task waits for its turn, never for
// ever. Thread-safe; Stop() (and the destructor) runs what was posted, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpupool::net {

class WorkerPool {
 public:
  struct Options {
    int threads = 1;
    int nice = 0;      // added to the process's nice value on each thread (-20..19)
    std::string name;  // the threads' name (/proc/PID/task/TID/comm), at most 15 bytes
  };
  explicit WorkerPool(Options options);
  ~WorkerPool() { Stop(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task` for the next free thread. False once Stop() began (the task is dropped).
  bool Post(std::function<void()> task);
  // Runs what was posted, then joins the threads. Idempotent.
  void Stop();
  // The threads whose priority could be set as asked (all of them, once started).
  int prioritized() const;

 private:
  void Run();

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  int prioritized_ = 0;
  std::vector<std::thread> threads_;
};

// Adds `delta` to the calling thread's nice value (Linux: per thread). False where the
// kernel refused (a negative delta without the privilege).
bool RenicePoolThread(int delta);

}  // namespace gpupool::net
