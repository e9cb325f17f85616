// One test per gate: what it admits, what it refuses and the reason users read.
#include "sched/admission/gates.h"

#include <gtest/gtest.h>

#include <vector>

#include "sched/queue/queue_test_util.h"

namespace gpupool::sched {
namespace {

using testing::GpuTask;
using testing::Job;

QueuedJob GpuJob(std::string id, std::string user, int gpus) {
  QueuedJob j = Job(std::move(id), std::move(user), 0, {GpuTask(gpus)});
  j.admission.gpus = gpus;
  return j;
}

// The gate's verdict as its reason: empty when it admits the job.
std::string Why(GatePlugin& gate, const QueuedJob& job) {
  std::string why;
  const bool admitted = gate.Admit(job, &why);
  EXPECT_EQ(admitted, why.empty()) << why;  // a refusal always says why
  return admitted ? "" : why;
}

PassContext Context(const std::vector<const QueuedJob*>& occupying,
                    const Limits* limits = nullptr) {
  PassContext ctx;
  ctx.occupying = occupying;
  ctx.limits = limits;
  return ctx;
}

TEST(HoldGate, HeldJobsWaitWithWhoHeldThemAndHowToRelease) {
  HoldGate gate;
  QueuedJob j = GpuJob("7", "alice", 1);
  EXPECT_EQ(Why(gate, j), "");
  j.admission.held_by = "alice";
  EXPECT_EQ(Why(gate, j), "held by alice: `gpupool release 7` lets it start");
  j.admission.held_by = "root";
  j.admission.held_by_admin = true;
  EXPECT_EQ(Why(gate, j), "held by root (admin): `gpupool release 7` by an admin lets it start");
  // An array's element as its user knows it (ARRAY_INDEX), not by its id in the store.
  j.admission.user_id = "5_2";
  EXPECT_EQ(Why(gate, j), "held by root (admin): `gpupool release 5_2` by an admin lets it start");
}

TEST(DependencyGate, WaitsWithTheHostsReasonWhileDependenciesAreUnmet) {
  DependencyGate gate;
  QueuedJob j = GpuJob("8", "alice", 1);
  EXPECT_EQ(Why(gate, j), "");
  j.admission.waits_for = "waits for job 3 (RUNNING) to succeed (--after-ok)";
  EXPECT_EQ(Why(gate, j), "waits for job 3 (RUNNING) to succeed (--after-ok)");
}

TEST(EarlierAttemptGate, WaitsWhileANodeStopsTheEarlierAttempt) {
  EarlierAttemptGate gate;
  QueuedJob j = GpuJob("9", "alice", 1);
  EXPECT_EQ(Why(gate, j), "");
  j.admission.stopping_attempt = 2;
  j.admission.stopping_node = "n1";
  EXPECT_EQ(Why(gate, j),
            "waits for attempt 2 to stop on node n1 (it still ran there when the node came back)");
  j.admission.stopping_until_s = 1'764'408'665;  // 2025-11-29 09:31:05 UTC
  EXPECT_EQ(Why(gate, j),
            "waits for attempt 2 to stop on node n1 (the node was lost while it ran; its lease "
            "stops it by 2025-11-29 09:31:05 UTC)");
  j.admission.stopping_node = "n1 and n2";
  j.admission.stopping_nodes = 2;
  EXPECT_EQ(Why(gate, j),
            "waits for attempt 2 to stop on nodes n1 and n2 (the nodes were lost while it ran; "
            "their leases stop it by 2025-11-29 09:31:05 UTC)");
}

TEST(ArrayThrottle, RunsAtMostNElementsCountingRunningAndAdmittedOnes) {
  ArrayThrottle gate;
  auto element = [](std::string id) {
    QueuedJob j = GpuJob(std::move(id), "alice", 1);
    j.admission.array_id = "40";
    j.admission.array_max_running = 2;
    return j;
  };
  QueuedJob running = element("40");
  QueuedJob other_array = element("50");
  other_array.admission.array_id = "50";
  const std::vector<const QueuedJob*> occupying = {&running, &other_array};
  gate.BeginPass(Context(occupying));
  EXPECT_EQ(Why(gate, element("41")), "");  // 1 running + 1 admitted = 2
  const std::string reason =
      "array 40 runs at most 2 elements at once (--array ...%2); its earlier elements come first";
  EXPECT_EQ(Why(gate, element("42")), reason);
  EXPECT_EQ(Why(gate, element("43")), reason);
  QueuedJob plain = GpuJob("60", "alice", 1);
  EXPECT_EQ(Why(gate, plain), "");  // not an array element
  // A new pass forgets what the last one admitted.
  gate.BeginPass(Context(occupying));
  EXPECT_EQ(Why(gate, element("42")), "");
  gate.BeginPass(Context({}));
  EXPECT_EQ(Why(gate, element("42")), "");
  EXPECT_EQ(Why(gate, element("43")), "");
  EXPECT_EQ(Why(gate, element("44")), reason);
}

// Security: a job queued before its user left the project (or before the server enforced
// projects) waits under enforcement, as a new submission would be refused.
TEST(ProjectGate, UnderEnforcementAJobWaitsWhileItsUserMayNotChargeItsProject) {
  Limits limits;
  limits.projects["vision"].members = {"alice"};
  QueuedJob bobs = GpuJob("8", "bob", 1);
  bobs.project = "vision";
  QueuedJob alices = GpuJob("9", "alice", 1);
  alices.project = "vision";
  QueuedJob own = GpuJob("10", "bob", 1);
  own.project = "bob";  // no --project: the user's name
  ProjectGate gate;
  PassContext ctx = Context({}, &limits);
  gate.BeginPass(ctx);  // enforcement off: as before
  EXPECT_EQ(Why(gate, bobs), "");
  ctx.project_enforcement = ProjectEnforcement::kMembers;
  gate.BeginPass(ctx);
  EXPECT_EQ(Why(gate, bobs),
            "waits: bob may not charge project 'vision' (enforce-projects members): an admin adds "
            "them (`gpupool limits set --project vision --add-member bob`), or cancel it");
  EXPECT_EQ(Why(gate, alices), "");
  EXPECT_EQ(Why(gate, own), "");
  ctx.project_enforcement = ProjectEnforcement::kKnown;
  gate.BeginPass(ctx);
  EXPECT_EQ(Why(gate, bobs), "");  // vision has an entry
  bobs.project = "made-up";
  EXPECT_NE(Why(gate, bobs).find("may not charge project 'made-up' (enforce-projects known)"),
            std::string::npos);
  // A team project named like bob, made for others, is not his (project_access.h).
  limits.projects["bob"].members = {"alice"};
  ctx.project_enforcement = ProjectEnforcement::kMembers;
  gate.BeginPass(ctx);
  EXPECT_NE(Why(gate, own).find("waits: bob may not charge project 'bob'"), std::string::npos);
  // A job queued without --project before its user got a default project is not held:
  // only a new submission may not name its user (project_access.h).
  limits.projects.erase("bob");
  limits.projects["vision"].members.insert("bob");
  limits.users["bob"].default_project = "vision";
  gate.BeginPass(ctx);
  EXPECT_EQ(Why(gate, own), "");
}

TEST(QuotaLimit, UsersAndProjectsStayWithinTheirLimits) {
  Limits limits;
  limits.users["alice"].max_gpus = 3;
  limits.users["alice"].max_running = 10;  // her own: above the default's
  limits.users["dave"].max_gpus = 8;       // the default's max_running still holds (issue 30)
  limits.user_default.max_running = 1;
  limits.projects["vision"].max_gpus = 1;
  QuotaLimit gate;
  QueuedJob running = GpuJob("1", "alice", 2);
  const std::vector<const QueuedJob*> occupying = {&running};
  gate.BeginPass(Context(occupying, &limits));
  EXPECT_EQ(Why(gate, GpuJob("2", "alice", 2)),
            "waits: user alice has 2 GPUs in use or next to start; this job's 2 more would pass "
            "the limit (max_gpus 3, `gpupool limits`)");
  EXPECT_EQ(Why(gate, GpuJob("3", "alice", 1)), "");  // 2 + 1 = 3
  EXPECT_EQ(Why(gate, GpuJob("4", "alice", 1)),       // the admitted job counts
            "waits: user alice has 3 GPUs in use or next to start; this job's 1 more would pass "
            "the limit (max_gpus 3, `gpupool limits`)");
  // bob has the default: one job running at once.
  EXPECT_EQ(Why(gate, GpuJob("5", "bob", 0)), "");
  EXPECT_EQ(Why(gate, GpuJob("6", "bob", 0)),
            "waits: user bob has 1 jobs running or next to start, the limit (max_running 1, "
            "`gpupool limits`)");
  // dave's own row sets GPUs only: the default's one job running at once is his too.
  EXPECT_EQ(Why(gate, GpuJob("9", "dave", 1)), "");
  EXPECT_EQ(Why(gate, GpuJob("10", "dave", 1)),
            "waits: user dave has 1 jobs running or next to start, the limit (max_running 1, "
            "`gpupool limits`)");
  // A project's limit applies to all its members.
  QueuedJob v = GpuJob("7", "carol", 2);
  v.project = "vision";
  EXPECT_EQ(Why(gate, v),
            "waits: this job alone asks for 2 GPUs, more than project vision's limit (max_gpus "
            "1): it starts only if an admin raises the limit (`gpupool limits`)");
  // Without limits every job is admitted.
  QuotaLimit open;
  open.BeginPass(Context(occupying));
  EXPECT_EQ(Why(open, GpuJob("8", "alice", 64)), "");
}

}  // namespace
}  // namespace gpupool::sched
