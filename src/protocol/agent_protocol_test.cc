#include "protocol/agent_protocol.h"

#include <gtest/gtest.h>

#include <functional>

#include "common/strings.h"

namespace gpupool::protocol {
namespace {

Json Reparse(const OrderedJson& j) { return Json::parse(DumpJson(j)); }

gpu::NodeInfo SmallNode() {
  gpu::NodeInfo n;
  n.hostname = "n1";
  gpu::GpuInfo g;
  g.vendor = gpu::Vendor::kNvidia;
  g.index = 0;
  g.uuid = "GPU-1";
  g.name = "NVIDIA H100";
  g.memory_total_bytes = 80ull << 30;
  n.gpus.push_back(g);
  return n;
}

LaunchOrder SampleOrder() {
  LaunchOrder o;
  o.job.id = 7;
  o.job.user = "alice";
  o.job.command = {"python3", "train.py"};
  o.job.attempt = 2;
  o.job.request.tasks = 2;
  o.job.request.gpus = 1;
  o.task_index = 1;
  o.gpus.push_back({"nvidia", 0, "GPU-1", {"/dev/nvidia0"}, 1000});
  o.denied_device_nodes = {"/dev/nvidia1"};
  o.rendezvous = {1, 2, {"10.0.0.1", "10.0.0.2"}, {1, 1}, 41000};
  return o;
}

TEST(ProtocolVersion, ParsesAndChecksCompatibility) {
  EXPECT_EQ(*ParseVersion("1.1"), (Version{1, 1}));
  EXPECT_FALSE(ParseVersion("1").ok());
  EXPECT_FALSE(ParseVersion("x.1").ok());
  EXPECT_FALSE(ParseVersion("-1.0").ok());
  EXPECT_TRUE(CheckCompatible({1, 1}, {1, 0}, "agent").ok());
  EXPECT_TRUE(CheckCompatible({1, 1}, {1, 2}, "agent").ok());
  Status older = CheckCompatible({1, 3}, {1, 1}, "the agent on node n1");
  EXPECT_FALSE(older.ok());
  EXPECT_EQ(older.message(),
            "the agent on node n1 speaks agent protocol 1.1 and this side 1.3; they are too far "
            "apart (the same major and minors at most one apart work together): upgrade gpupool "
            "on the agent on node n1");
  Status newer = CheckCompatible({1, 1}, {2, 0}, "the controller", "this agent");
  EXPECT_EQ(newer.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.message().find("the controller speaks agent protocol 2.0 and this agent 1.1;"),
            std::string::npos)
      << newer.message();
  EXPECT_NE(newer.message().find("upgrade gpupool on this agent"), std::string::npos)
      << newer.message();
  // The controller's refusal carries its version; other answers do not read as one.
  const Json refusal = Json::parse(DumpJson(EncodeRegistrationRefusal({2, 0}, "too far")));
  EXPECT_EQ(refusal["error"], "too far");
  EXPECT_EQ(DecodeRegistrationRefusal(refusal), (Version{2, 0}));
  EXPECT_FALSE(DecodeRegistrationRefusal(Json::parse(R"({"error": "lease lost"})")));
  EXPECT_FALSE(DecodeRegistrationRefusal(Json::parse(R"({"protocol": "x"})")));
  EXPECT_FALSE(DecodeRegistrationRefusal(Json::parse(R"(["protocol"])")));
  EXPECT_FALSE(SupportsExec({1, 0}));
  EXPECT_TRUE(SupportsExec({1, 1}));
  EXPECT_FALSE(SupportsInteractiveExec({1, 1}));
  EXPECT_TRUE(SupportsInteractiveExec({1, 2}));
}

TEST(ProtocolWork, RoundTrips) {
  Work w;
  w.launch.push_back(SampleOrder());
  w.cancel.push_back({7, 2});
  w.logs.push_back({3, "/var/lib/gpupool/jobs/7/stdout.log", 10, 4096});
  w.exec.push_back({9, 7, 2, 1, {"orted", "-mca", "x"}, 41000});
  w.exec.push_back({10, 7, 2, 0, {"bash"}, 0, /*tty=*/true, /*stdin_open=*/true, 50, 132});
  Result<Work> back = DecodeWork(Reparse(EncodeWork(w)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->rejected.empty());
  ASSERT_EQ(back->launch.size(), 1u);
  EXPECT_EQ(back->launch[0], w.launch[0]);
  EXPECT_EQ(back->cancel, w.cancel);
  EXPECT_EQ(back->logs, w.logs);
  EXPECT_EQ(back->exec, w.exec);
}

// Issue 28: a preemption's stop carries its grace and deadline; a plain stop does not
// (it reads back as the job's own grace), and a bad grace is rejected alone.
TEST(ProtocolWork, APreemptionsStopCarriesItsGraceAndDeadline) {
  Work w;
  CancelOrder preempt{7, 2};
  preempt.grace_s = 95;
  preempt.deadline_s = 1'700'000'095;
  w.cancel = {preempt, {8, 1}};
  OrderedJson j = EncodeWork(w);
  EXPECT_EQ(j["cancel"][0]["grace_s"], 95);
  EXPECT_FALSE(j["cancel"][1].contains("grace_s"));
  Result<Work> back = DecodeWork(Reparse(j));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->cancel, w.cancel);
  EXPECT_EQ(back->cancel[1].grace_s, -1);
  Json bad = Reparse(j);
  bad["cancel"][0]["grace_s"] = -5;
  back = DecodeWork(bad);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->rejected.size(), 1u);
  EXPECT_NE(back->rejected[0].error.find("grace_s"), std::string::npos) << back->rejected[0].error;
  EXPECT_EQ(back->cancel.size(), 1u);
}

// A preempted gang's task that said checkpoint-done gets a stop of its own: the order
// names the task; a job's order does not (it reads back as every task of the job).
TEST(ProtocolWork, ATasksOwnStopNamesItsTask) {
  Work w;
  CancelOrder job{7, 2};
  job.grace_s = 95;
  job.deadline_s = 1'700'000'095;
  CancelOrder task = job;
  task.grace_s = 0;
  task.task = 3;
  w.cancel = {job, task};
  OrderedJson j = EncodeWork(w);
  EXPECT_FALSE(j["cancel"][0].contains("task"));
  EXPECT_EQ(j["cancel"][1]["task"], 3);
  Result<Work> back = DecodeWork(Reparse(j));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->cancel, w.cancel);
  EXPECT_EQ(back->cancel[0].task, -1);
  Json bad = Reparse(j);
  bad["cancel"][1]["task"] = -1;
  back = DecodeWork(bad);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->rejected.size(), 1u);
  EXPECT_NE(back->rejected[0].error.find("task"), std::string::npos) << back->rejected[0].error;
}

// gpupool cancel --signal: one order per task, main_only only when set; an agent older
// than 1.4 is sent none (it would ignore them, and the user be told they were sent).
TEST(ProtocolWork, ASignalOrderRoundTripsAndGoesOnlyToMinorFour) {
  Work w;
  w.signal.push_back({7, 2, 0, 10, /*main_only=*/true});
  w.signal.push_back({7, 2, 3, 12, false, /*held_ms=*/4200});
  OrderedJson j = EncodeWork(w);
  EXPECT_EQ(j["signal"][0]["main_only"], true);
  EXPECT_FALSE(j["signal"][1].contains("main_only"));
  // How long the controller held the poll: optional, 0 when absent (the agent's age check).
  EXPECT_FALSE(j["signal"][0].contains("held_ms"));
  EXPECT_EQ(j["signal"][1]["held_ms"], 4200);
  EXPECT_EQ(j["signal"][1]["task_index"], 3);
  Result<Work> back = DecodeWork(Reparse(j));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->rejected.empty());
  EXPECT_EQ(back->signal, w.signal);
  EXPECT_FALSE(back->empty());
  EXPECT_FALSE(EncodeWork(w, Version{1, 3}).contains("signal"));
  EXPECT_FALSE(SupportsSignal({1, 3}));
  EXPECT_TRUE(SupportsSignal({1, 4}));
  EXPECT_TRUE(SupportsSignal({2, 0}));
  // A bad one is rejected alone, naming its field.
  Json bad = Reparse(j);
  bad["signal"][0]["signal"] = 65;
  bad["signal"][1]["unknown_field"] = "ignored";
  back = DecodeWork(bad);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->rejected.size(), 1u);
  EXPECT_EQ(back->rejected[0].what, "signal[0]");
  EXPECT_NE(back->rejected[0].error.find("signal[0].signal"), std::string::npos)
      << back->rejected[0].error;
  ASSERT_EQ(back->signal.size(), 1u);
  EXPECT_EQ(back->signal[0], w.signal[1]);
  for (const char* field : {"job_id", "attempt", "task_index", "signal"}) {
    Json missing = Reparse(j);
    missing["signal"][0].erase(field);
    back = DecodeWork(missing);
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(back->rejected.size(), 1u) << field;
    EXPECT_NE(back->rejected[0].error.find(field), std::string::npos) << back->rejected[0].error;
  }
}

TEST(ProtocolWork, AnOlderPeerGetsNoExecRequests) {
  Work w;
  w.exec.push_back({9, 7, 2, 1, {"true"}});
  OrderedJson j = EncodeWork(w, Version{1, 0});
  EXPECT_FALSE(j.contains("exec"));
  EXPECT_TRUE(EncodeWork(w, Version{1, 1}).contains("exec"));
}

TEST(ProtocolWork, IgnoresUnknownFieldsAtEveryLevel) {
  // What a controller one minor newer might send.
  Json j = Reparse(EncodeWork({{SampleOrder()}, {{7, 2}}, {}, {}, {}}));
  j["new_top_level"] = {1, 2, 3};
  j["launch"][0]["new_order_field"] = "x";
  j["launch"][0]["job"]["new_job_field"] = {{"a", 1}};
  j["launch"][0]["job"]["request"]["new_request_field"] = 5;
  j["launch"][0]["gpus"][0]["mig_profile"] = "1g.10gb";
  j["launch"][0]["rendezvous"]["backend"] = "c10d";
  j["cancel"][0]["reason"] = "why";
  Result<Work> w = DecodeWork(j);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->launch.size(), 1u) << (w->rejected.empty() ? "" : w->rejected[0].error);
  EXPECT_EQ(w->launch[0], SampleOrder());
  EXPECT_EQ(w->cancel.size(), 1u);
}

TEST(ProtocolWork, ABadOrderIsRejectedAloneAndNamesItsField) {
  Json j = Reparse(EncodeWork({{SampleOrder(), SampleOrder()}, {}, {}, {}, {}}));
  j["launch"][0]["task_index"] = "one";  // wrong type: must not throw
  j["launch"][1]["job"]["id"] = 8;
  Result<Work> w = DecodeWork(j);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->launch.size(), 1u);
  EXPECT_EQ(w->launch[0].job.id, 8);
  ASSERT_EQ(w->rejected.size(), 1u);
  EXPECT_EQ(w->rejected[0].what, "launch[0]");
  EXPECT_EQ(w->rejected[0].job_id, 7);  // still known, so the agent can fail the task
  EXPECT_EQ(w->rejected[0].attempt, 2);
  EXPECT_EQ(w->rejected[0].num_tasks, 2);
  EXPECT_NE(w->rejected[0].error.find("launch[0].task_index"), std::string::npos)
      << w->rejected[0].error;
}

// Found by fuzz/wire_messages_fuzzer.cc (regressions/wire_messages/launch-without-rendezvous):
// an order without its rendezvous was taken for a gang of task_index + 1 tasks with no
// hosts, which EncodeWork wrote back as an order no decoder accepts.
TEST(ProtocolWork, ALaunchWithoutItsRendezvousIsRejected) {
  Json j = Reparse(EncodeWork({{SampleOrder()}, {}, {}, {}, {}}));
  j["launch"][0].erase("rendezvous");
  Result<Work> w = DecodeWork(j);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_TRUE(w->launch.empty());
  ASSERT_EQ(w->rejected.size(), 1u);
  EXPECT_NE(w->rejected[0].error.find("launch[0].rendezvous: required"), std::string::npos)
      << w->rejected[0].error;
}

TEST(ProtocolWork, ANodesLaunchUnitNamesItsTasksThisOneFirst) {
  LaunchOrder unit = SampleOrder();
  unit.task_index = 0;
  unit.rendezvous = {0, 3, {"10.0.0.1", "10.0.0.2", "10.0.0.1"}, {1, 1, 1}, 0};
  unit.node_tasks = {0, 2};
  Result<Work> back = DecodeWork(Reparse(EncodeWork({{unit, SampleOrder()}, {}, {}, {}, {}})));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->launch.size(), 2u);
  EXPECT_EQ(back->launch[0], unit);
  EXPECT_TRUE(back->launch[1].node_tasks.empty());  // not sent for a task of its own
  EXPECT_FALSE(
      Reparse(EncodeWork({{SampleOrder()}, {}, {}, {}, {}}))["launch"][0].contains("node_tasks"));
  for (const Json& bad : {Json::array({2, 0}), Json::array({0, 0}), Json::array({0, 3}),
                          Json::array({0, -1}), Json::array({0, "2"}), Json("0,2")}) {
    SCOPED_TRACE(bad.dump());
    Json j = Reparse(EncodeWork({{unit}, {}, {}, {}, {}}));
    j["launch"][0]["node_tasks"] = bad;
    Result<Work> w = DecodeWork(j);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_EQ(w->rejected.size(), 1u);
    EXPECT_NE(w->rejected[0].error.find("launch[0].node_tasks"), std::string::npos)
        << w->rejected[0].error;
  }
}

TEST(ProtocolWork, WrongTypesAnywhereNeverThrow) {
  const Json base = Reparse(EncodeWork({{SampleOrder()}, {{7, 2}}, {{1, "/p", 0, 1}}, {}, {}}));
  // Replace every member of every object, one at a time, with values of other types.
  const std::vector<Json> values = {
      Json(),        Json("s"),      Json(-1),   Json(1.5),
      Json::array(), Json::object(), Json(true), Json(int64_t{1} << 62)};
  int cases = 0;
  std::function<void(const Json::json_pointer&, const Json&)> walk =
      [&](const Json::json_pointer& at, const Json& node) {
        if (node.is_object()) {
          for (auto it = node.begin(); it != node.end(); ++it) walk(at / it.key(), *it);
        } else if (node.is_array()) {
          for (size_t i = 0; i < node.size(); ++i) walk(at / i, node[i]);
        }
        for (const Json& v : values) {
          Json mutated = base;
          mutated[at] = v;
          EXPECT_NO_THROW((void)DecodeWork(mutated)) << at.to_string();
          ++cases;
        }
      };
  walk(Json::json_pointer(), base);
  EXPECT_GT(cases, 100);
  EXPECT_FALSE(DecodeWork(Json::array()).ok());
  EXPECT_FALSE(DecodeWork(Json("x")).ok());
}

TEST(ProtocolRegistration, RoundTripsAndNeedsAVersion) {
  Registration r;
  r.node = "n1";
  r.address = "10.0.0.1";
  r.info = SmallNode();
  r.cpu_milli = 8000;
  r.memory_mib = 1024;
  r.running = {{7, 1, 2}};
  Result<Registration> back = DecodeRegistration(Reparse(EncodeRegistration(r)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->version, kVersion);
  EXPECT_EQ(back->address, "10.0.0.1");
  EXPECT_EQ(back->running, r.running);
  EXPECT_EQ(back->info.gpus.size(), 1u);

  Json old = Reparse(EncodeRegistration(r));
  old.erase("protocol");
  Result<Registration> refused = DecodeRegistration(old);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("upgrade gpupool on the node"), std::string::npos);

  // A newer agent: unknown fields here and inside the node's GPU records.
  Json newer = Reparse(EncodeRegistration(r));
  newer["protocol"] = "1.2";
  newer["telemetry"] = {{"period_s", 5}};
  newer["info"]["gpus"][0]["new_gpu_field"] = 1;
  Result<Registration> n = DecodeRegistration(newer);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->version, (Version{1, 2}));

  Json bad = Reparse(EncodeRegistration(r));
  bad["running"][0]["attempt"] = "2";
  Result<Registration> b = DecodeRegistration(bad);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("running[0].attempt"), std::string::npos);
}

// The agent's identity is optional: sent when set, absent (an older agent) reads as "".
TEST(ProtocolRegistration, CarriesTheAgentIdWhenSet) {
  Registration r;
  r.node = "n1";
  r.info = SmallNode();
  EXPECT_FALSE(Reparse(EncodeRegistration(r)).contains("agent_id"));
  Result<Registration> none = DecodeRegistration(Reparse(EncodeRegistration(r)));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->agent_id, "");
  r.agent_id = "0123abcd:fedc";
  Result<Registration> back = DecodeRegistration(Reparse(EncodeRegistration(r)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->agent_id, "0123abcd:fedc");
  for (const std::string& bad : {std::string(129, 'a'), std::string("a b"), std::string("a\n")}) {
    Json j = Reparse(EncodeRegistration(r));
    j["agent_id"] = bad;
    Result<Registration> refused = DecodeRegistration(j);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("agent_id"), std::string::npos);
  }
}

// Issue 29: an agent whose health program's verdict is still to come says so; an older
// agent's registration (no field) reads as nothing pending, and a bad value is named.
TEST(ProtocolRegistration, CarriesWhetherTheHealthVerdictIsPending) {
  Registration r;
  r.node = "n1";
  r.info = SmallNode();
  EXPECT_FALSE(Reparse(EncodeRegistration(r)).contains("health_pending"));
  r.health_pending = true;
  Json j = Reparse(EncodeRegistration(r));
  Result<Registration> back = DecodeRegistration(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->health_pending);
  j.erase("health_pending");
  EXPECT_FALSE(DecodeRegistration(j)->health_pending);
  j["health_pending"] = "yes";
  Result<Registration> bad = DecodeRegistration(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("health_pending"), std::string::npos);
}

// Issue 25 item 1: the tasks whose ends are still to be reported travel with the
// registration; a registration without them (an older agent) reads as none.
TEST(ProtocolRegistration, CarriesTheTasksWhoseEndsAreNotYetReported) {
  Registration r;
  r.node = "n1";
  r.info = SmallNode();
  r.running = {{7, 0, 1}};
  r.ended = {{8, 0, 1}, {9, 2, 3}};
  Json wire = Reparse(EncodeRegistration(r));
  Result<Registration> back = DecodeRegistration(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->running, r.running);
  EXPECT_EQ(back->ended, r.ended);

  wire.erase("ended");
  back = DecodeRegistration(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->ended.empty());

  Registration none = r;
  none.ended.clear();
  EXPECT_FALSE(Reparse(EncodeRegistration(none)).contains("ended"));
  wire = Reparse(EncodeRegistration(r));
  wire["ended"][1]["job_id"] = 0;
  back = DecodeRegistration(wire);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("ended[1].job_id"), std::string::npos);
}

TEST(ProtocolEvents, RoundTripAndNameBadKinds) {
  EventBatch b;
  b.node = "n1";
  Event e;
  e.kind = EventKind::kExited;
  e.job_id = 7;
  e.attempt = 2;
  e.task_index = 1;
  e.time_us = 5;
  e.exit_code = 3;
  e.reason = "r";
  e.stdout_path = "/s";
  e.master_port = 0;
  b.events.push_back(e);
  Event s;
  s.kind = EventKind::kStarted;
  s.job_id = 7;
  s.master_port = 41000;
  b.events.push_back(s);
  b.exec.push_back({4, true, true, 0, std::nullopt, "", "/o", "/e"});
  Result<EventBatch> back = DecodeEventBatch(Reparse(EncodeEventBatch(b)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->events, b.events);
  EXPECT_EQ(back->exec, b.exec);

  Json j = Reparse(EncodeEventBatch(b));
  j["events"][0]["kind"] = "exploded";
  Result<EventBatch> bad = DecodeEventBatch(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("events[0].kind"), std::string::npos);
  j["events"][0]["kind"] = 3;
  EXPECT_FALSE(DecodeEventBatch(j).ok());
  j = Reparse(EncodeEventBatch(b));
  j["events"][1]["future_field"] = "x";
  EXPECT_TRUE(DecodeEventBatch(j).ok());
}

// Why a task was killed crosses as its own fields (kill_cause, kill_detail), every cause
// by its name; an agent older than them sends neither.
TEST(ProtocolEvents, AKillCauseRoundTripsByName) {
  const std::pair<KillCause, std::string_view> causes[] = {
      {KillCause::kNone, "none"},
      {KillCause::kOomKernel, "oom_kernel"},
      {KillCause::kOomNode, "oom_node"},
      {KillCause::kGpuMemWatch, "gpu_mem_watch"},
      {KillCause::kTimeLimit, "time_limit"},
      {KillCause::kStopRequest, "stop_request"},
      {KillCause::kUnknown, "unknown"}};
  for (const auto& [cause, name] : causes) {
    EXPECT_EQ(KillCauseName(cause), name);
    EXPECT_EQ(ParseKillCause(name), cause);
    EventBatch b;
    b.node = "n1";
    Event e;
    e.kind = EventKind::kExited;
    e.job_id = 7;
    e.signal = 9;
    e.reason = "killed by the kernel's OOM killer: node n1 ran out of memory; ended by SIGKILL";
    e.kill_cause = cause;
    e.kill_detail = "killed by the kernel's OOM killer: node n1 ran out of memory";
    b.events.push_back(e);
    const Json wire = Reparse(EncodeEventBatch(b));
    EXPECT_EQ(wire["events"][0]["kill_cause"], std::string(name));
    Result<EventBatch> back = DecodeEventBatch(wire);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->events, b.events) << name;
  }
  EventBatch old;
  old.node = "n1";
  old.events.push_back(Event{.kind = EventKind::kExited, .job_id = 7, .signal = 9});
  const Json wire = Reparse(EncodeEventBatch(old));
  EXPECT_FALSE(wire["events"][0].contains("kill_cause"));
  EXPECT_FALSE(wire["events"][0].contains("kill_detail"));
  Result<EventBatch> back = DecodeEventBatch(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->events[0].kill_cause, std::nullopt);
}

// A task its node could not start by its own fault is a loss with not_started, which
// crosses only when set (an older controller reads a plain loss).
TEST(ProtocolEvents, ATaskItsNodeCouldNotStartCrossesAsNotStarted) {
  EventBatch b;
  b.node = "n1";
  b.events.push_back(Event{.kind = EventKind::kLost,
                           .job_id = 7,
                           .attempt = 1,
                           .reason = "node n1 could not start it: No space left on device",
                           .not_started = true});
  b.events.push_back(Event{.kind = EventKind::kLost, .job_id = 8, .attempt = 1});
  const Json wire = Reparse(EncodeEventBatch(b));
  EXPECT_EQ(wire["events"][0]["not_started"], true);
  EXPECT_FALSE(wire["events"][1].contains("not_started"));
  Result<EventBatch> back = DecodeEventBatch(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->events, b.events);
  Json bad = wire;
  bad["events"][0]["not_started"] = "yes";
  EXPECT_FALSE(DecodeEventBatch(bad).ok());
}

// A cause from the network is not trusted: a name this build does not know is kept as
// kUnknown (the end still counts), a value of the wrong type is an error naming the field.
TEST(ProtocolEvents, AHostileKillCauseIsUnknownOrRefusedNeverACrash) {
  EventBatch b;
  b.node = "n1";
  b.events.push_back(Event{.kind = EventKind::kExited, .job_id = 7, .signal = 9});
  const std::vector<std::string> names = {"oom_martian",
                                          "",
                                          "NONE",
                                          "oom_kernel ",
                                          std::string(1 << 16, 'x'),
                                          std::string("oom\0kernel", 10)};
  for (const std::string& name : names) {
    Json j = Reparse(EncodeEventBatch(b));
    j["events"][0]["kill_cause"] = name;
    Result<EventBatch> back = DecodeEventBatch(j);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->events[0].kill_cause, KillCause::kUnknown) << name;
    // Encoded back, it says unknown, not the hostile text.
    EXPECT_EQ(Reparse(EncodeEventBatch(*back))["events"][0]["kill_cause"], "unknown");
  }
  const std::vector<Json> bads = {Json(3), Json(true), Json::array({"oom_kernel"}), Json::object()};
  for (const Json& bad : bads) {
    Json j = Reparse(EncodeEventBatch(b));
    j["events"][0]["kill_cause"] = bad;
    Result<EventBatch> back = DecodeEventBatch(j);
    ASSERT_FALSE(back.ok()) << bad.dump();
    EXPECT_NE(back.status().message().find("kill_cause"), std::string::npos);
  }
  Json j = Reparse(EncodeEventBatch(b));
  j["events"][0]["kill_cause"] = nullptr;  // null reads as absent: an older agent
  Result<EventBatch> back = DecodeEventBatch(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->events[0].kill_cause, std::nullopt);
  EXPECT_EQ(ParseKillCause("oom_martian"), std::nullopt);
}

TEST(ProtocolEvents, AnEndedExecCarriesItsLittleOutputInline) {
  EventBatch b;
  b.node = "n1";
  ExecReport r{4, true, true, 0, std::nullopt, "", "/o", "/e"};
  r.output_complete = true;
  r.stdout_data = std::string("out\0\xff\n", 6);
  r.stderr_data = "";
  b.exec.push_back(r);
  Result<EventBatch> back = DecodeEventBatch(Reparse(EncodeEventBatch(b)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->exec, b.exec);

  // A reader that predates the fields sees a report without them (unknown fields are
  // ignored); one that knows them refuses more than the bound, naming the report.
  Json j = Reparse(EncodeEventBatch(b));
  j["exec"][0].erase("output_complete");
  back = DecodeEventBatch(j);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->exec[0].output_complete);
  EXPECT_TRUE(back->exec[0].stdout_data.empty());
  j = Reparse(EncodeEventBatch(b));
  j["exec"][0]["stdout"] = Base64Encode(std::string(kMaxInlineExecOutput + 1, 'x'));
  Result<EventBatch> big = DecodeEventBatch(j);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("exec[0]"), std::string::npos) << big.status().message();
  j["exec"][0]["stdout"] = "not base64!";
  EXPECT_FALSE(DecodeEventBatch(j).ok());
}

TEST(ProtocolExecIo, RoundTripsBinaryBytesAndControlItems) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  ExecInput in;
  in.items.push_back({1, bytes});
  in.items.push_back({2, "", false, 40, 120});
  in.items.push_back({3, "", false, 0, 0, 2});
  in.items.push_back({4, "", true});
  in.hangup = true;
  Result<ExecInput> back = DecodeExecInput(Reparse(EncodeExecInput(in)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, in);

  ExecOutput out{5, "hello\r\n", 7, bytes, true};
  Result<ExecOutput> out_back = DecodeExecOutput(Reparse(EncodeExecOutput(out)));
  ASSERT_TRUE(out_back.ok()) << out_back.status().ToString();
  EXPECT_EQ(*out_back, out);

  ExecOutputAck ack{12, 3, true, false};
  Result<ExecOutputAck> ack_back = DecodeExecOutputAck(Reparse(EncodeExecOutputAck(ack)));
  ASSERT_TRUE(ack_back.ok());
  EXPECT_EQ(*ack_back, ack);
}

TEST(ProtocolExecIo, BadItemsNameTheirField) {
  Result<ExecInputItem> bad64 = DecodeExecInputItem(Json{{"seq", 1}, {"data", "a!=="}}, "input");
  ASSERT_FALSE(bad64.ok());
  EXPECT_EQ(bad64.status().message(), "input.data: not valid base64");
  Result<ExecInputItem> half = DecodeExecInputItem(Json{{"seq", 1}, {"rows", 3}}, "input");
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("rows and cols together"), std::string::npos);
  EXPECT_FALSE(DecodeExecInputItem(Json{{"seq", 0}}, "input").ok());
  EXPECT_FALSE(DecodeExecInputItem(Json{{"seq", 1}, {"signal", 99}}, "input").ok());
  const std::string big = Base64Encode(std::string(kMaxExecChunk + 10, 'x'));
  Result<ExecOutput> huge = DecodeExecOutput(Json{{"stdout", big}});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("output.stdout: more than"), std::string::npos);
  EXPECT_FALSE(DecodeExecOutput(Json{{"stdout", 5}}).ok());
}

}  // namespace
}  // namespace gpupool::protocol

namespace gpupool::protocol {
namespace {

TelemetryBatch SampleBatch() {
  TelemetryBatch b;
  b.node = "n1";
  GpuTelemetry g;
  g.index = 3;
  g.uuid = "GPU-3";
  g.at_ms = 1'700'000'000'000;
  g.util_pct = 87.5;
  g.mem_used_mib = 4096;
  g.mem_total_mib = 81920;
  g.power_w = 301.25;
  g.temp_c = 64;
  g.xid_errors = 79;
  g.xid_count = 2;
  g.ecc_uncorrected = 1;
  g.jobs = {{42, 500}};
  g.processes = {{4242, 42, 2048, 80.0}, {17, 0, std::nullopt, std::nullopt}};
  b.samples.push_back(g);
  GpuTelemetry bare;  // a source that gave only the time
  bare.index = 0;
  bare.at_ms = 1;
  b.samples.push_back(bare);
  return b;
}

TEST(ProtocolTelemetry, RoundTripKeepsUnsetFieldsUnset) {
  const TelemetryBatch b = SampleBatch();
  const OrderedJson wire = EncodeTelemetryBatch(b);
  EXPECT_FALSE(wire["samples"][1].contains("util_pct"));
  EXPECT_FALSE(wire["samples"][1].contains("jobs"));
  EXPECT_FALSE(wire["samples"][1].contains("xid_count"));
  EXPECT_EQ(wire["samples"][0]["xid_errors"], 79);
  EXPECT_EQ(wire["samples"][0]["xid_count"], 2);
  EXPECT_EQ(wire["samples"][0]["ecc_uncorrected"], 1);
  Result<TelemetryBatch> back = DecodeTelemetryBatch(Json::parse(DumpJson(wire)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, b);
}

// The health program's verdict rides a batch (with or without samples); a hostile one is
// refused with the field named.
TEST(ProtocolTelemetry, HealthReportRoundTripsAndIsBounded) {
  TelemetryBatch b;
  b.node = "n1";
  HealthReport h;
  h.at_ms = 1795751271840;
  h.node_reason = "exited 1: fan failure";
  h.gpus = {{3, "retired pages pending"}, {0, ""}};
  h.output = "gpu=3 bad retired pages pending\n";
  b.health = h;
  Result<TelemetryBatch> back =
      DecodeTelemetryBatch(Json::parse(DumpJson(EncodeTelemetryBatch(b))));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, b);
  EXPECT_FALSE(EncodeTelemetryBatch(SampleBatch()).contains("health"));

  Json bad = Json::parse(DumpJson(EncodeTelemetryBatch(b)));
  bad["health"]["gpus"][0]["index"] = -1;
  EXPECT_NE(DecodeTelemetryBatch(bad).status().message().find("health.gpus[0].index"),
            std::string::npos)
      << DecodeTelemetryBatch(bad).status().message();
  bad = Json::parse(DumpJson(EncodeTelemetryBatch(b)));
  bad["health"]["output"] = std::string(9000, 'x');
  EXPECT_FALSE(DecodeTelemetryBatch(bad).ok());
  bad["health"] = "yes";
  EXPECT_NE(DecodeTelemetryBatch(bad).status().message().find("health"), std::string::npos);
}

// The disk watch's report rides a batch too; a hostile one is refused naming the field.
TEST(ProtocolTelemetry, DiskReportRoundTripsAndIsBounded) {
  TelemetryBatch b;
  b.node = "n1";
  DiskReport d;
  d.at_ms = 1795751271840;
  d.path = "/var/lib/gpupool/agent";
  d.pressure = true;
  d.reason = "/var/lib/gpupool/agent has 12 MiB free of 50 GiB, below 1 GiB";
  d.free_bytes = 12u << 20;
  d.total_bytes = uint64_t{50} << 30;
  d.free_inodes = 100;
  d.total_inodes = 3'000'000;
  b.disk = d;
  Result<TelemetryBatch> back =
      DecodeTelemetryBatch(Json::parse(DumpJson(EncodeTelemetryBatch(b))));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, b);
  EXPECT_FALSE(EncodeTelemetryBatch(SampleBatch()).contains("disk"));

  Json bad = Json::parse(DumpJson(EncodeTelemetryBatch(b)));
  bad["disk"].erase("pressure");
  EXPECT_NE(DecodeTelemetryBatch(bad).status().message().find("disk.pressure"), std::string::npos)
      << DecodeTelemetryBatch(bad).status().message();
  bad = Json::parse(DumpJson(EncodeTelemetryBatch(b)));
  bad["disk"]["reason"] = "";
  EXPECT_NE(DecodeTelemetryBatch(bad).status().message().find("disk.reason"), std::string::npos);
  bad["disk"]["reason"] = std::string(5000, 'x');
  EXPECT_FALSE(DecodeTelemetryBatch(bad).ok());
  bad["disk"]["reason"] = "full";
  bad["disk"]["free_bytes"] = -1;
  EXPECT_NE(DecodeTelemetryBatch(bad).status().message().find("disk.free_bytes"), std::string::npos)
      << DecodeTelemetryBatch(bad).status().message();
  bad["disk"] = "yes";
  EXPECT_NE(DecodeTelemetryBatch(bad).status().message().find("disk"), std::string::npos);
}

TEST(ProtocolTelemetry, UnknownFieldsAreIgnored) {
  Json j = Json::parse(DumpJson(EncodeTelemetryBatch(SampleBatch())));
  j["future"] = {1, 2};
  j["samples"][0]["sm_clock_mhz"] = 1980;
  j["samples"][0]["jobs"][0]["queue"] = "x";
  j["samples"][0]["processes"][0]["name"] = "python";
  Result<TelemetryBatch> back = DecodeTelemetryBatch(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, SampleBatch());
}

// xid_count and ecc_uncorrected came within 1.3, as optional fields: a sample from an agent
// without them reads as unset, and to a controller without them they are unknown fields,
// which it ignores (shown here with the same values under names this reader does not know).
TEST(ProtocolTelemetry, XidCountAndEccNeedNoVersionBump) {
  Json old_agent = Json::parse(DumpJson(EncodeTelemetryBatch(SampleBatch())));
  old_agent["samples"][0].erase("xid_count");
  old_agent["samples"][0].erase("ecc_uncorrected");
  Result<TelemetryBatch> back = DecodeTelemetryBatch(old_agent);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->samples[0].xid_errors, 79);
  EXPECT_FALSE(back->samples[0].xid_count.has_value());
  EXPECT_FALSE(back->samples[0].ecc_uncorrected.has_value());

  Json to_old_reader = Json::parse(DumpJson(EncodeTelemetryBatch(SampleBatch())));
  Json& s = to_old_reader["samples"][0];
  s["xid_count_unknown_here"] = s["xid_count"];
  s["ecc_uncorrected_unknown_here"] = s["ecc_uncorrected"];
  s.erase("xid_count");
  s.erase("ecc_uncorrected");
  back = DecodeTelemetryBatch(to_old_reader);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  TelemetryBatch want = SampleBatch();
  want.samples[0].xid_count.reset();
  want.samples[0].ecc_uncorrected.reset();
  EXPECT_EQ(*back, want);
  // (1.4 came later, for signal orders.)
  EXPECT_EQ(kVersion, (Version{1, 4}));
}

TEST(ProtocolTelemetry, BadFieldsAreErrorsNamingThem) {
  struct Case {
    std::function<void(Json&)> spoil;
    const char* error;
  };
  const Case cases[] = {
      {[](Json& j) { j["samples"] = "x"; }, "samples: expected an array"},
      {[](Json& j) { j["samples"][0] = 5; }, "samples[0]: expected an object"},
      {[](Json& j) { j["samples"][0].erase("index"); }, "samples[0].index"},
      {[](Json& j) { j["samples"][0]["index"] = -1; }, "samples[0].index"},
      {[](Json& j) { j["samples"][0]["at_ms"] = "soon"; }, "samples[0].at_ms"},
      {[](Json& j) { j["samples"][0]["util_pct"] = 101; }, "samples[0].util_pct"},
      {[](Json& j) { j["samples"][0]["util_pct"] = "high"; }, "samples[0].util_pct"},
      {[](Json& j) { j["samples"][1]["mem_used_mib"] = -4; }, "samples[1].mem_used_mib"},
      {[](Json& j) { j["samples"][0]["mem_total_mib"] = 1.5; }, "samples[0].mem_total_mib"},
      {[](Json& j) { j["samples"][0]["power_w"] = 1e9; }, "samples[0].power_w"},
      {[](Json& j) { j["samples"][0]["xid_errors"] = true; }, "samples[0].xid_errors"},
      {[](Json& j) { j["samples"][0]["xid_count"] = -1; }, "samples[0].xid_count"},
      {[](Json& j) { j["samples"][0]["ecc_uncorrected"] = "x"; }, "samples[0].ecc_uncorrected"},
      {[](Json& j) { j["samples"][0]["jobs"] = {1}; }, "samples[0].jobs[0]"},
      {[](Json& j) { j["samples"][0]["jobs"][0]["job_id"] = 0; }, "samples[0].jobs[0].job_id"},
      {[](Json& j) { j["samples"][0]["jobs"][0]["gpu_milli"] = 2000; },
       "samples[0].jobs[0].gpu_milli"},
      {[](Json& j) { j["samples"][0]["processes"][1]["pid"] = "x"; },
       "samples[0].processes[1].pid"},
      {[](Json& j) { j["samples"][0]["processes"][0]["util_pct"] = -1; },
       "samples[0].processes[0].util_pct"},
  };
  for (const Case& c : cases) {
    Json j = Json::parse(DumpJson(EncodeTelemetryBatch(SampleBatch())));
    c.spoil(j);
    Result<TelemetryBatch> r = DecodeTelemetryBatch(j);
    ASSERT_FALSE(r.ok()) << c.error;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << c.error << " -> " << r.status().message();
  }
  EXPECT_FALSE(DecodeTelemetryBatch(Json::array()).ok());
  Json many = {{"node", "n"}, {"samples", Json::array()}};
  for (size_t i = 0; i <= kMaxTelemetrySamples; ++i) {
    many["samples"].push_back({{"index", 0}, {"at_ms", 1}});
  }
  EXPECT_FALSE(DecodeTelemetryBatch(many).ok());
}

TEST(ProtocolTelemetry, SentOnlyToMinorThreeAndLater) {
  EXPECT_FALSE(SupportsTelemetry({1, 2}));
  EXPECT_TRUE(SupportsTelemetry({1, 3}));
  EXPECT_TRUE(SupportsTelemetry({2, 0}));
  EXPECT_TRUE(CheckCompatible({1, 3}, {1, 2}, "agent").ok());  // 1.3 still talks to 1.2
}

}  // namespace
}  // namespace gpupool::protocol
