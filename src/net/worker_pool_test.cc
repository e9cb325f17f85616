// WorkerPool: tasks run in order at the pool's priority, Stop runs what was posted, and a
// pool at the lowest priority still runs its task while every CPU is kept busy by threads
// at the process's priority (Linux gives it its weighted share: no starvation).
#include "net/worker_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace gpupool::net {
namespace {

int WorkerNice() { return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid))); }

TEST(WorkerPoolTest, RunsTasksInOrderAtItsPriorityAndStopRunsWhatWasPosted) {
  std::vector<int> ran;
  int nice = -100;
  {
    WorkerPool pool({/*threads=*/1, /*nice=*/3, "pool-test"});
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(pool.Post([&ran, &nice, i] {
        ran.push_back(i);
        nice = WorkerNice();
      }));
    }
    pool.Stop();
    EXPECT_FALSE(pool.Post([] {})) << "a stopped pool takes no task";
    EXPECT_EQ(pool.prioritized(), 1);
  }
  ASSERT_EQ(ran.size(), 100u);
  EXPECT_TRUE(std::is_sorted(ran.begin(), ran.end()));
  EXPECT_EQ(nice, std::min(WorkerNice() + 3, 19));
}

// Every CPU spins at this process's priority; a task posted to a nice-19 pool still runs
// (within seconds, not for ever): the weighted share a lowered priority keeps.
TEST(WorkerPoolTest, LowestPriorityTaskRunsWhileEveryCpuIsBusy) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  const unsigned cpus = std::max(1U, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < cpus; ++i) {
    spinners.emplace_back([&stop] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  WorkerPool pool({/*threads=*/1, /*nice=*/19, "pool-test"});
  std::promise<int> ran;
  ASSERT_TRUE(pool.Post([&ran] { ran.set_value(WorkerNice()); }));
  std::future<int> f = ran.get_future();
  const bool done = f.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  stop = true;
  for (std::thread& t : spinners) t.join();
  ASSERT_TRUE(done) << "the nice-19 task did not run within 20 s of busy CPUs";
  EXPECT_EQ(f.get(), 19);
}

}  // namespace
}  // namespace gpupool::net
