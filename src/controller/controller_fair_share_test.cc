// Fair share by project in the live controller (the server's --fair-by project;
// docs/deploy.md, "Fair share"): the fair queue and fair-share preemption divide the pool
// between projects (a job's project, else its user's name) instead of between users, so a
// project with two busy users does not get twice the GPUs of a project with one.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "controller/controller_test.h"

namespace gpupool::controller::controller_test {
namespace {

class FairShareTest : public ControllerTest {
 protected:
  // `fair_by`: the controller's ControllerOptions::fair_by; a 6-GPU node.
  void Start(sched::FairShareGroup fair_by) {
    ControllerOptions o;
    o.fair_by = fair_by;
    o.start_rule = "strict";
    Restart(o);
    Register(6);
  }
  Job SubmitTo(const Caller& who, const std::string& project, bool preemptible = false) {
    Job j = MakeJob(1);
    j.project = project;
    j.preemptible = preemptible;
    return c_->Submit(j, who).value();
  }
  // GPUs held by the jobs of each project (`by_user`: of each user).
  std::map<std::string, int> GpusBy(const std::vector<Job>& jobs, bool by_user = false) {
    std::map<std::string, int> out;
    for (const Job& j : jobs) {
      const Job now = Get(j.id);
      if (now.state == JobState::kAssigned || now.state == JobState::kRunning) {
        out[by_user ? now.user : now.project] += now.request.gpus;
      }
    }
    return out;
  }
  std::map<std::string, int> GpusByProject(const std::vector<Job>& jobs) { return GpusBy(jobs); }
  std::map<std::string, int> GpusByUser(const std::vector<Job>& jobs) {
    return GpusBy(jobs, /*by_user=*/true);
  }
  // Every job of `running` (placed) starts, and the clock passes the default 600 s
  // minimum run time, so they may be preempted.
  void StartPastTheMinimumRunTime(std::vector<Job>& running) {
    for (Job& j : running) {
      j = Get(j.id);
      ASSERT_EQ(j.state, JobState::kAssigned);
      ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}).ok());
    }
    clock_.AdvanceMicros(int64_t{1800} * 1'000'000);
  }
  // Sets the limits from their JSON (as PUT /v1/limits takes them).
  void SetLimits(const char* json) {
    Result<Limits> l = LimitsFromJson(Json::parse(json));
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ASSERT_TRUE(c_->SetLimits(*l, root_).ok());
  }
  Caller carol_{"carol", 1002, 1002, false};
};

// Fair-share weights (the limits' fair_share, Slurm's Fairshare=N): with both users
// backlogged, alice at weight 2 gets twice bob's GPUs (4 of 6), where equal weights give
// each 3; by project the projects' weights count, not the users'.
TEST_F(FairShareTest, AGroupOfWeightTwoGetsTwiceTheGpusOfAGroupOfWeightOne) {
  for (const char* limits :
       {R"({})", R"({"users": {"alice": {"fair_share": 2}}})",
        R"({"users": {"bob": {"fair_share": 2}}, "projects": {"A": {"fair_share": 2}}})"}) {
    const bool by_project = std::string(limits).find("projects") != std::string::npos;
    c_.reset();  // before the store it uses
    store_ = OpenSqliteStore(":memory:");
    Start(by_project ? sched::FairShareGroup::kProject : sched::FairShareGroup::kUser);
    SetLimits(limits);
    std::vector<Job> jobs;
    for (int i = 0; i < 6; ++i) jobs.push_back(SubmitTo(alice_, "A"));
    for (int i = 0; i < 6; ++i) jobs.push_back(SubmitTo(bob_, "B"));
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    const std::map<std::string, int> gpus = GpusByUser(jobs);
    if (std::string(limits) == "{}") {
      EXPECT_EQ(gpus, (std::map<std::string, int>{{"alice", 3}, {"bob", 3}})) << limits;
    } else {
      EXPECT_EQ(gpus, (std::map<std::string, int>{{"alice", 4}, {"bob", 2}})) << limits;
    }
  }
}

// Fair-share preemption weighs the shares too. Bob holds 4 of 6 GPUs, alice 2, all
// preemptible and past their minimum run time; alice's third job waits. Equally (3 each)
// alice is below her share with it and bob above his: one of bob's jobs is preempted. At
// bob's weight 2 his share is 4 and alice's 2: nobody is; at alice's weight 2 (4 GPUs)
// she preempts him again, the limits changed between passes.
TEST_F(FairShareTest, FairSharePreemptionWeighsTheShares) {
  for (const char* limits : {R"({})", R"({"users": {"bob": {"fair_share": 2}}})",
                             R"({"users": {"alice": {"fair_share": 2}}})"}) {
    c_.reset();
    store_ = OpenSqliteStore(":memory:");
    Start(sched::FairShareGroup::kUser);
    SetLimits(R"({"users": {"bob": {"fair_share": 2}}})");  // as the second case, at first
    std::vector<Job> running;
    for (int i = 0; i < 4; ++i) running.push_back(SubmitTo(bob_, "B", /*preemptible=*/true));
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    for (int i = 0; i < 2; ++i) running.push_back(SubmitTo(alice_, "A", /*preemptible=*/true));
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    StartPastTheMinimumRunTime(running);
    if (HasFatalFailure()) return;
    const Job waiting = SubmitTo(alice_, "A");
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    SetLimits(limits);
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    std::map<std::string, int> stopping;  // by victim's user
    for (const Job& j : running) {
      if (Get(j.id).preempted_by == waiting.id) ++stopping[j.user];
    }
    const std::string reason = Get(waiting.id).pending_reason;
    if (std::string(limits).find("bob") != std::string::npos) {
      EXPECT_TRUE(stopping.empty()) << limits << ": " << reason;
    } else {
      EXPECT_EQ(stopping, (std::map<std::string, int>{{"bob", 1}})) << limits << ": " << reason;
      EXPECT_NE(reason.find("; preempting job "), std::string::npos) << reason;
    }
  }
}

// A priority orders only its user's own jobs in preemption's weighing too: between users
// the waiting job weighed first (and so taking the one victim there is) goes by fair share,
// then queue order, never by a priority another user chose for themself (red team 5,
// finding 4: bob's later job at 1000000 would take it from alice's).
TEST_F(FairShareTest, AnotherUsersPriorityDoesNotGoFirstToPreempt) {
  Start(sched::FairShareGroup::kUser);
  const Caller dave{"dave", 1003, 1003, false};
  std::vector<Job> running;
  running.push_back(c_->Submit(MakeJob(4), dave).value());
  Job two = MakeJob(2);
  two.preemptible = true;
  running.push_back(c_->Submit(two, carol_).value());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  StartPastTheMinimumRunTime(running);
  if (HasFatalFailure()) return;
  // Four users with jobs: a share of 1.5 GPUs each; carol holds 2, alice and bob none.
  const Job first = SubmitTo(alice_, "");
  Job urgent = MakeJob(1);
  urgent.priority = 1000000;
  urgent = c_->Submit(urgent, bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(running[1].id).preempted_by, first.id)
      << Get(first.id).pending_reason << " / " << Get(urgent.id).pending_reason;
}

// Project A has two users, project B one; each submits many 1-GPU jobs, A's users first.
// By user, A's two users get 4 of the 6 GPUs (twice B's); by project, each project 3.
TEST_F(FairShareTest, ByProjectTwoUsersOfOneProjectDoNotGetTwiceTheOtherProjectsGpus) {
  for (sched::FairShareGroup fair_by :
       {sched::FairShareGroup::kUser, sched::FairShareGroup::kProject}) {
    c_.reset();  // before the store it uses
    store_ = OpenSqliteStore(":memory:");
    Start(fair_by);
    std::vector<Job> jobs;
    for (const Caller* who : {&alice_, &bob_}) {
      for (int i = 0; i < 6; ++i) jobs.push_back(SubmitTo(*who, "A"));
    }
    for (int i = 0; i < 6; ++i) jobs.push_back(SubmitTo(carol_, "B"));
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    const std::map<std::string, int> gpus = GpusByProject(jobs);
    if (fair_by == sched::FairShareGroup::kUser) {
      EXPECT_EQ(gpus, (std::map<std::string, int>{{"A", 4}, {"B", 2}}));
    } else {
      EXPECT_EQ(gpus, (std::map<std::string, int>{{"A", 3}, {"B", 3}}));
    }
  }
}

// A project's second user is not a fresh share: alice (project A) holds 4 of 6 GPUs and
// carol (B) 2, all preemptible; bob's job of A waits. By user, bob is below his share
// (6 / 3 users) and alice above hers, so one of alice's jobs is preempted for him; by
// project A already holds more than its share (6 / 2 projects) and nobody is.
TEST_F(FairShareTest, ByProjectAnotherUserOfAProjectAboveItsSharePreemptsNobody) {
  for (sched::FairShareGroup fair_by :
       {sched::FairShareGroup::kUser, sched::FairShareGroup::kProject}) {
    c_.reset();
    store_ = OpenSqliteStore(":memory:");
    Start(fair_by);
    std::vector<Job> running;
    for (int i = 0; i < 4; ++i) running.push_back(SubmitTo(alice_, "A", /*preemptible=*/true));
    for (int i = 0; i < 2; ++i) running.push_back(SubmitTo(carol_, "B", /*preemptible=*/true));
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    StartPastTheMinimumRunTime(running);
    if (HasFatalFailure()) return;
    const Job waiting = SubmitTo(bob_, "A");
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    std::map<std::string, int> stopping;  // by victim's user
    for (const Job& j : running) {
      if (Get(j.id).preempted_by == waiting.id) ++stopping[j.user];
    }
    const std::string reason = Get(waiting.id).pending_reason;
    if (fair_by == sched::FairShareGroup::kUser) {
      EXPECT_EQ(stopping, (std::map<std::string, int>{{"alice", 1}})) << reason;
      EXPECT_NE(reason.find("; preempting job "), std::string::npos) << reason;
    } else {
      EXPECT_TRUE(stopping.empty()) << reason;
      EXPECT_EQ(reason.find("preempting"), std::string::npos) << reason;
    }
  }
}

// By user, the same waiting job of carol's preempts as a user below her share, and the
// victim's requeue reason names her, not her project; by project it names project B.
TEST_F(FairShareTest, ThePreemptionsReasonNamesTheGroupFairShareIsBy) {
  for (sched::FairShareGroup fair_by :
       {sched::FairShareGroup::kUser, sched::FairShareGroup::kProject}) {
    c_.reset();  // before the store it uses
    store_ = OpenSqliteStore(":memory:");
    Start(fair_by);
    std::vector<Job> running;
    for (const Caller* who : {&alice_, &bob_}) {
      for (int i = 0; i < 3; ++i) running.push_back(SubmitTo(*who, "A", /*preemptible=*/true));
    }
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    StartPastTheMinimumRunTime(running);
    if (HasFatalFailure()) return;
    const Job waiting = SubmitTo(carol_, "B");
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    Job victim;
    for (const Job& j : running) {
      if (Get(j.id).preempted_by == waiting.id) victim = Get(j.id);
    }
    ASSERT_NE(victim.id, 0);
    clock_.AdvanceMicros(1'000'000);
    Event stopped = Ev(victim, protocol::EventKind::kExited);
    stopped.signal = 15;  // its stop order's SIGTERM
    stopped.cancelled = true;
    ASSERT_TRUE(Apply({stopped}).ok());
    const std::string why = Get(victim.id).reason;
    const std::string group =
        fair_by == sched::FairShareGroup::kProject ? "of project B" : "of user carol";
    EXPECT_NE(why.find("preempted by job " + std::to_string(waiting.id) + ", " + group +
                       ", below its fair share of GPUs"),
              std::string::npos)
        << why;
  }
}

}  // namespace
}  // namespace gpupool::controller::controller_test
