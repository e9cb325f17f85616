// checkpoint-done in a gang (job_lifecycle_checkpoint.h; red team 7, finding 2): said by
// one task it ends that task's grace alone, as that task's exit would; the job's grace is
// over once every task has ended or said it; said without a task, the whole job's.
#include <gtest/gtest.h>

#include "controller/job_lifecycle.h"

namespace gpupool::controller::lifecycle {
namespace checkpoint_test {  // its own: the lifecycle's other tests share a unity build
namespace {

using jobs::Job;
using jobs::JobState;

constexpr int64_t kNowS = 1'700'000'000;
constexpr int64_t kNow = kNowS * 1'000'000;

// Alice's preemptible gang of `tasks` tasks of 2 GPUs, two tasks a node (n0, n1, ...),
// running, preempted by job 9 with 60 s of grace.
Job PreemptedGang(int tasks) {
  Job j;
  j.id = 7;
  j.user = "alice";
  j.uid = 1000;
  j.command = {"train.sh"};
  j.state = JobState::kRunning;
  j.preemptible = true;
  j.attempt = 1;
  j.request.tasks = tasks;
  j.master_port = 29400;
  j.start_time_us = kNow - 600'000'000;
  for (int t = 0; t < tasks; ++t) {
    const std::string node = "n" + std::to_string(t / 2);
    j.placement.push_back({node, {2 * (t % 2), 2 * (t % 2) + 1}, {"GPU-a", "GPU-b"}, 1000});
    jobs::TaskStatus ts;
    ts.host = node;
    ts.start_time_us = j.start_time_us;
    j.tasks.push_back(ts);
  }
  Result<Transition> p = Step(j, Preempt{9, "of higher priority (10 > 0)", 60, kNowS + 60}, kNow);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->next.cancel_requested);
  return p->next;
}

CheckpointDone FromTask(int task) { return CheckpointDone{"alice", task}; }

TaskExited Exit(const Job& job, int task, int code) {
  TaskExited e;
  e.node = job.placement[static_cast<size_t>(task)].node;
  e.task = task;
  e.attempt = 1;
  e.time_us = kNow;
  e.exit_code = code;
  e.cancelled = true;  // it ended in its grace, told to stop
  return e;
}

// The finding: a 4-task gang in its grace; task 1 has saved its shard and says so. Only
// task 1's grace ends (a stop order without grace for it alone); tasks 0, 2 and 3 keep
// theirs to save their own shards.
TEST(CheckpointDoneTest, ATaskOfAGangEndsItsOwnGraceOnly) {
  const Job job = PreemptedGang(4);
  Result<Transition> t = Step(job, FromTask(1), kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->changed);
  EXPECT_EQ(t->next.state, JobState::kRunning);
  EXPECT_FALSE(t->next.checkpoint_done);  // the job's grace goes on
  EXPECT_FALSE(t->effects.resend_stop);   // no stop without grace for the whole job
  EXPECT_EQ(t->effects.stop_tasks, std::vector<int>{1});
  EXPECT_TRUE(t->effects.notify_nodes);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(t->next.tasks[k].checkpoint_done, k == 1) << k;
  EXPECT_EQ(t->effects.log,
            "job 7 task 1: alice says it has checkpointed; its grace ends (the other tasks' "
            "goes on)");
  // Said again: nothing new.
  EXPECT_FALSE(Step(t->next, FromTask(1), kNow)->changed);
}

// The job's grace as a whole is over once every task has ended or said checkpoint-done:
// task 1 said it, task 0 ended (saving done), task 2 says it, then task 3 does.
TEST(CheckpointDoneTest, TheJobsGraceEndsWhenEveryTaskEndedOrSaidIt) {
  Job job = PreemptedGang(4);
  job = Step(job, FromTask(1), kNow)->next;
  Result<Transition> t = Step(job, Exit(job, 0, 0), kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->next.checkpoint_done);  // tasks 2 and 3 still save
  t = Step(t->next, FromTask(2), kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->next.checkpoint_done);
  EXPECT_EQ(t->effects.stop_tasks, std::vector<int>{2});
  t = Step(t->next, FromTask(3), kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->next.checkpoint_done);  // every task ended or said it
  EXPECT_TRUE(t->effects.resend_stop);   // the job's own order, now without grace
  EXPECT_NE(t->effects.log.find("every task has ended or checkpointed"), std::string::npos)
      << t->effects.log;
  // A task that ended says nothing new; nor one said after the job's grace ended.
  EXPECT_FALSE(Step(t->next, FromTask(0), kNow)->changed);
  EXPECT_FALSE(Step(t->next, FromTask(2), kNow)->changed);
  EXPECT_FALSE(Step(t->next, CheckpointDone{"alice"}, kNow)->changed);
}

// The last task still saving ends, every other one having said checkpoint-done: the job's
// grace is over (its mark set) and, every task ended, it goes back to the queue.
TEST(CheckpointDoneTest, TheLastTaskEndingAfterTheOthersSaidItEndsTheJobsGrace) {
  Job job = PreemptedGang(3);
  job = Step(job, FromTask(0), kNow)->next;
  job = Step(job, FromTask(2), kNow)->next;
  EXPECT_FALSE(job.checkpoint_done);
  Result<Transition> t = Step(job, Exit(job, 0, 0), kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->next.state, JobState::kRunning);
  t = Step(t->next, Exit(job, 1, 0), kNow);  // task 1, the one that saved to the end
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->next.checkpoint_done);  // task 2, still running, said it
  EXPECT_EQ(t->next.state, JobState::kRunning);
  t = Step(t->next, Exit(job, 2, 0), kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->next.state, JobState::kPending);
  EXPECT_TRUE(t->effects.requeued);
  EXPECT_EQ(t->next.preemptions, 1);
  EXPECT_FALSE(t->next.checkpoint_done);
  EXPECT_TRUE(t->next.tasks.empty());  // the per-task marks go with the attempt
}

// Said without a task (from the user's terminal, or by an older client): the whole job's
// grace ends, as before.
TEST(CheckpointDoneTest, WithoutATaskTheWholeJobsGraceEnds) {
  const Job job = PreemptedGang(4);
  Result<Transition> t = Step(job, CheckpointDone{"alice"}, kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->next.checkpoint_done);
  EXPECT_TRUE(t->effects.resend_stop);
  EXPECT_TRUE(t->effects.stop_tasks.empty());
  EXPECT_EQ(t->effects.log, "job 7: alice says it has checkpointed; its grace ends");
  // A task's after the job's: nothing new.
  EXPECT_FALSE(Step(t->next, FromTask(2), kNow)->changed);
}

// A job of one task: its task's checkpoint-done is the job's, as before.
TEST(CheckpointDoneTest, InAJobOfOneTaskTheTasksIsTheJobs) {
  const Job job = PreemptedGang(1);
  Result<Transition> t = Step(job, FromTask(0), kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->next.checkpoint_done);
  EXPECT_TRUE(t->effects.resend_stop);
  EXPECT_TRUE(t->effects.stop_tasks.empty());
}

// A task the job does not have is refused naming the field and the job's tasks; a job not
// being preempted refuses a task's checkpoint-done as the job's.
TEST(CheckpointDoneTest, ATaskOutOfRangeIsRefusedNamingTheField) {
  const Job job = PreemptedGang(4);
  for (int task : {4, -1, 4096}) {
    Result<Transition> t = Step(job, FromTask(task), kNow);
    ASSERT_FALSE(t.ok()) << task;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.status().message(), "task: job 7 has tasks 0..3, not " + std::to_string(task) +
                                        " (inside a task, GPUPOOL_TASK_INDEX is its index)");
  }
  Job running = job;
  running.preempted_by = 0;
  running.cancel_requested = false;
  Result<Transition> t = Step(running, FromTask(1), kNow);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("not being preempted"), std::string::npos);
}

}  // namespace
}  // namespace checkpoint_test
}  // namespace gpupool::controller::lifecycle
