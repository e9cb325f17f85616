// Real answers of the API for openapi_schema_test.py: drives an Api over a real controller
// and an in-memory SQLite store through a job's life (register a node, submit, place,
// start, signal, exec, hold, cancel, jobs that end: time limit, exit code, alloc, preemption with
// checkpoint-done, start estimate; drain, limits, usage, tokens, environments, errors) and
// prints every request and answer as a JSON array on stdout:
//   [{"method", "pattern", "path", "status", "content_type", "headers", "body"}, ...]
// `pattern` is the docs/openapi.json path that describes the request. Exits 1, saying
// why on stderr, when a step does not answer as the scenario expects.
// With --routes, prints the route table instead (api/route_table.h), the list the
// document must describe: [{"method", "pattern", "public"}, ...].
#include <pwd.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/json.h"
#include "controller/api.h"
#include "gpu/node_json.h"
#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

// Images known to this program, with what they need; no podman.
class FixedInspector final : public EnvInspector {
 public:
  Result<jobs::EnvNeeds> InspectImage(const std::string& ref) override {
    if (ref != kImage) return Status::NotFound("image '" + ref + "' is not here");
    jobs::EnvNeeds n;
    n.source = "image " + ref + " (3f2a9c1e0b7d)";
    n.cuda = "12.4";
    n.min_driver = "550.54.14";
    n.min_driver_minor_compat = "525.60.13";
    n.sass = {"sm_80", "sm_90"};
    n.ptx = {"compute_90"};
    return n;
  }
  Result<std::string> ImageId(const std::string& ref) override {
    if (ref != kImage) return Status::NotFound("image '" + ref + "' is not here");
    return std::string("3f2a9c1e0b7d4a5f8e6c2d1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f");
  }
  Result<DirInspection> InspectDir(const std::string& dir, const DirReader&) override {
    return Status::NotFound("'" + dir + "' does not exist");
  }
  Result<std::string> DigestDir(const std::string& dir) override {
    return Status::NotFound("'" + dir + "' does not exist");
  }
  static constexpr const char* kImage = "localhost/torch:2.4";
};

class Scenario {
 public:
  Scenario() {
    store_ = store::OpenSqliteStore(":memory:").value();
    ControllerOptions options;
    options.node_timeout_us = 3'600'000'000;
    controller_ = Controller::Create(store_.get(), &clock_, options).value();
    api_ =
        std::make_unique<Api>(controller_.get(), store_.get(), &clock_, AuthOptions{}, &inspector_);
    const passwd* pw = getpwnam("nobody");
    user_uid_ = pw != nullptr ? pw->pw_uid : 65534;
  }

  // Runs the scenario; false when a step failed (said on stderr).
  bool Run() {
    Submit();
    if (!StartAndReport()) return false;
    Exec();
    Lifecycle();
    Ends();
    Admin();
    const std::string& id = id_;
    // Environments.
    Expect(201, Root("POST", "/v1/environments", "/v1/environments", {},
                     R"({"name": "torch:2.4", "image": "localhost/torch:2.4"})"));
    Expect(200, User("GET", "/v1/environments", "/v1/environments"));
    Expect(200, User("GET", "/v1/environments/{ref}", "/v1/environments/torch:2.4"));
    Expect(200, User("POST", "/v1/environments/check", "/v1/environments/check", {},
                     R"({"environment": "torch:2.4"})"));
    Expect(200, Root("DELETE", "/v1/environments/{ref}", "/v1/environments/torch:2.4"));

    // Errors.
    Expect(404, Root("GET", "/v1/jobs/{id}", "/v1/jobs/999"));
    Expect(400, Root("POST", "/v1/jobs", "/v1/jobs", {}, R"({"command": ["true"], "id": 3})"));
    Expect(400,
           Root("GET", "/v1/jobs/{id}/logs", "/v1/jobs/" + id + "/logs", {{"stream", "stdin"}}));
    Expect(403, User("GET", "/v1/tokens", "/v1/tokens"));
    Expect(403, User("POST", "/v1/agent/register", "/v1/agent/register", {}, RegisterBody("vm")));
    Expect(404, Root("GET", "/v1/environments/{ref}", "/v1/environments/team/none:1"));

    // Ready once the scheduler loop goes round.
    controller_->Start();
    net::HttpRequest ready = Req("GET", "/readyz", {}, "");
    for (int i = 0; i < 500 && api_->Handle(ready).status != 200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Expect(200, Tcp("GET", "/readyz", "/readyz"));
    controller_->Stop();
    return ok_;
  }

 private:
  // Public endpoints, a node, and the jobs the other steps use (id_, head_).
  void Submit() {
    // Public endpoints: no token over TCP.
    Tcp("GET", "/healthz", "/healthz");
    Tcp("GET", "/readyz", "/readyz");  // 503: the scheduler loop is not started here
    Tcp("GET", "/v1/openapi.json", "/v1/openapi.json");
    Tcp("GET", "/v1/jobs", "/v1/jobs");  // 401

    // A node with two GPUs, registered by root on the socket (a local agent).
    Expect(200, Root("POST", "/v1/agent/register", "/v1/agent/register", {}, RegisterBody("vm")));
    Expect(200, Root("GET", "/v1/nodes", "/v1/nodes"));

    // Jobs: a GPU job, and an array with a dependency, a project and an environment.
    Json job = Expect(201, Root("POST", "/v1/jobs", "/v1/jobs", {},
                                R"({"name": "train", "command": ["sleep", "60"], "workdir": "/",
                                    "request": {"gpus": 1, "cpu_milli": 2000}, "env": {"A": "1"},
                                    "time_limit_s": 3600, "requeue": true})"));
    id_ = std::to_string(job["job"]["id"].get<int64_t>());
    const std::string& id = id_;
    Json array = Expect(201, Root("POST", "/v1/jobs", "/v1/jobs", {},
                                  R"({"name": "sweep", "project": "vision", "command": ["true"],
                                      "workdir": "/", "array": "0-2%1",
                                      "dependencies": [{"job_id": )" +
                                      id + R"(, "kind": "after-any"}]})"));
    head_ = std::to_string(array["job"]["id"].get<int64_t>());
    Expect(200, Root("GET", "/v1/jobs", "/v1/jobs"));
    Expect(200, User("GET", "/v1/jobs", "/v1/jobs", {{"all", "1"}}));  // all_refused
    Expect(200, Root("GET", "/v1/jobs/{id}", "/v1/jobs/" + id));
  }

  // The first job placed and started, with telemetry; false when the pass failed.
  bool StartAndReport() {
    const std::string& id = id_;
    // Placed, started by the agent: a RUNNING job with placement and tasks.
    if (Status s = controller_->ScheduleOnce(); !s.ok())
      return Fail("ScheduleOnce: " + s.message());
    Expect(200, Root("GET", "/v1/agent/work", "/v1/agent/work", {{"node", "vm"}}));
    Expect(200, Root("POST", "/v1/agent/events", "/v1/agent/events", {},
                     R"({"node": "vm", "events": [{"job_id": )" + id +
                         R"(, "attempt": 1, "kind": "started", "master_port": 29500}]})"));
    // Telemetry from the agent (protocol 1.3): GPU 0 runs the job at 80%, GPU 1 is free.
    for (int i = 0; i < 2; ++i) {
      const std::string at = std::to_string(clock_.NowMicros() / 1000 + i * 5000);
      Expect(200, Root("POST", "/v1/agent/telemetry", "/v1/agent/telemetry", {},
                       R"({"node": "vm", "samples": [{"index": 0, "uuid": "GPU-1000", "at_ms": )" +
                           at + R"(, "util_pct": 80, "mem_used_mib": 30000,
                           "mem_total_mib": 81559, "power_w": 512.5, "temp_c": 61,
                           "xid_errors": 63, "xid_count": 1, "ecc_uncorrected": 0,
                           "jobs": [{"job_id": )" +
                           id + R"(, "gpu_milli": 1000}], "processes": [{"pid": 4242,
                           "job_id": )" +
                           id + R"(, "used_mib": 29000, "util_pct": 80}]},
                           {"index": 1, "uuid": "GPU-1001", "at_ms": )" +
                           at + R"(, "util_pct": 0, "mem_used_mib": 0}]})"));
    }
    Expect(400, Root("POST", "/v1/agent/telemetry", "/v1/agent/telemetry", {},
                     R"({"node": "vm", "samples": [{"index": 0, "at_ms": "now"}]})"));
    Expect(200, Root("GET", "/v1/nodes", "/v1/nodes"));
    Expect(200, Root("GET", "/v1/telemetry", "/v1/telemetry"));
    Expect(200, User("GET", "/v1/telemetry", "/v1/telemetry", {{"node", "vm"}, {"gpu", "0"}}));
    Expect(200, Root("GET", "/v1/telemetry", "/v1/telemetry", {{"job", id}, {"step_s", "300"}}));
    Expect(400, Root("GET", "/v1/telemetry", "/v1/telemetry", {{"gpu", "0"}}));
    Expect(404, Root("GET", "/v1/telemetry", "/v1/telemetry", {{"node", "nowhere"}}));
    Expect(200, Root("GET", "/v1/jobs/{id}", "/v1/jobs/" + id));
    Expect(200, Root("GET", "/v1/jobs/{id}/logs", "/v1/jobs/" + id + "/logs"));
    Expect(200, Root("GET", "/metrics", "/metrics"));
    Expect(403, User("GET", "/metrics", "/metrics"));

    return true;
  }

  // Exec sessions in the running job, one plain and one interactive.
  void Exec() {
    const std::string& id = id_;
    // gpupool cancel --signal USR1: the agent's next work carries the order, once, and
    // the answer comes once the agent polled again (it waits for that, on a thread of its
    // own here); a pending element has nothing to signal.
    std::future<net::HttpResponse> signal = std::async(std::launch::async, [&] {
      return Root("POST", "/v1/jobs/{id}/signal", "/v1/jobs/" + id + "/signal", {},
                  R"({"signal": 10})");
    });
    Json work = Expect(200, Root("GET", "/v1/agent/work", "/v1/agent/work",
                                 {{"node", "vm"}, {"wait_ms", "60000"}}));
    if (!work.contains("signal") || work["signal"].size() != 1) {
      Fail("the agent's work should carry the signal order: " + work.dump());
    }
    Root("GET", "/v1/agent/work", "/v1/agent/work", {{"node", "vm"}});
    Expect(200, signal.get());
    Expect(409, Root("POST", "/v1/jobs/{id}/signal", "/v1/jobs/" + head_ + "_2/signal", {},
                     R"({"signal": 10, "batch": true})"));
    Expect(400, Root("POST", "/v1/jobs/{id}/signal", "/v1/jobs/" + id + "/signal", {},
                     R"({"signal": 0})"));
    // An exec session in the running job.
    Json exec = Expect(201, Root("POST", "/v1/jobs/{id}/exec", "/v1/jobs/" + id + "/exec", {},
                                 R"({"task": 0, "argv": ["hostname"]})"));
    const std::string eid = std::to_string(exec["id"].get<int64_t>());
    Expect(200, Root("GET", "/v1/agent/work", "/v1/agent/work", {{"node", "vm"}}));
    // Its end carries its little output ("vm\n"), which the client then gets with the state.
    Expect(200, Root("POST", "/v1/agent/events", "/v1/agent/events", {},
                     R"({"node": "vm", "events": [], "exec": [{"id": )" + eid +
                         R"(, "started": true, "ended": true, "exit_code": 0,
                         "output_complete": true, "stdout": "dm0K"}]})"));
    Expect(200, Root("GET", "/v1/exec/{id}", "/v1/exec/" + eid));
    Json done =
        Expect(200, Root("GET", "/v1/exec/{id}", "/v1/exec/" + eid,
                         {{"output", "1"}, {"stdout_offset", "1"}, {"stderr_offset", "0"}}));
    if (done.value("stdout", "") != "bQo=" || done.value("stderr", "?") != "") {
      Fail("GET /v1/exec/ID?output=1 should hold the rest of its output: " + done.dump());
    }
    Expect(200, Root("GET", "/v1/exec/{id}/output", "/v1/exec/" + eid + "/output"));
    Expect(200, Root("DELETE", "/v1/exec/{id}", "/v1/exec/" + eid));
    Expect(200, Root("POST", "/v1/agent/logs", "/v1/agent/logs",
                     {{"node", "vm"}, {"id", "99"}, {"size", "5"}}, "hello"));

    // An interactive session: the client's input to the agent, the agent's output to it.
    Json tty = Expect(201, Root("POST", "/v1/jobs/{id}/exec", "/v1/jobs/" + id + "/exec", {},
                                R"({"task": 0, "argv": ["bash"], "tty": true, "rows": 50,
                                    "cols": 132})"));
    const std::string tid = std::to_string(tty["id"].get<int64_t>());
    Expect(200, Root("GET", "/v1/agent/work", "/v1/agent/work", {{"node", "vm"}}));
    Expect(200, Root("POST", "/v1/exec/{id}/input", "/v1/exec/" + tid + "/input", {},
                     R"({"seq": 1, "data": "bHMK"})"));
    Expect(200, Root("GET", "/v1/agent/exec/{id}/input", "/v1/agent/exec/" + tid + "/input",
                     {{"node", "vm"}}));
    Expect(200, Root("POST", "/v1/agent/exec/{id}/output", "/v1/agent/exec/" + tid + "/output",
                     {{"node", "vm"}}, R"({"stdout_offset": 0, "stdout": "aGkNCg==",
                                          "stderr_offset": 0})"));
    Expect(200, Root("GET", "/v1/exec/{id}/stream", "/v1/exec/" + tid + "/stream"));
    Expect(409, Root("GET", "/v1/exec/{id}/stream", "/v1/exec/" + eid + "/stream"));
    Expect(400, Root("POST", "/v1/exec/{id}/input", "/v1/exec/" + tid + "/input", {},
                     R"({"seq": 5, "data": "bHMK"})"));
    Expect(200, Root("DELETE", "/v1/exec/{id}", "/v1/exec/" + tid));
  }

  // An interactive job attached to, holds, releases and cancels.
  void Lifecycle() {
    const std::string& id = id_;
    const std::string& head = head_;
    // gpupool run: a job that waits for GPUs, attached to while it waits.
    Json run = Expect(201, Root("POST", "/v1/jobs", "/v1/jobs", {},
                                R"({"command": ["bash"], "workdir": "/", "interactive": "run",
                                    "pty": true, "request": {"gpus": 2}})"));
    const std::string rid = std::to_string(run["job"]["id"].get<int64_t>());
    Expect(200, Root("POST", "/v1/jobs/{id}/attach", "/v1/jobs/" + rid + "/attach", {},
                     R"({"rows": 50, "cols": 132})"));
    Expect(409, Root("POST", "/v1/jobs/{id}/attach", "/v1/jobs/" + id + "/attach"));
    Expect(200, Root("POST", "/v1/jobs/{id}/cancel", "/v1/jobs/" + rid + "/cancel"));

    // Hold and release a pending element, also named as queue prints it (ARRAY_INDEX);
    // one the array lacks; cancel the array, then the running job.
    Expect(200, Root("POST", "/v1/jobs/{id}/hold", "/v1/jobs/" + head + "/hold"));
    Expect(200, Root("POST", "/v1/jobs/{id}/release", "/v1/jobs/" + head + "/release"));
    Expect(200, Root("POST", "/v1/jobs/{id}/hold", "/v1/jobs/" + head + "_2/hold"));
    Expect(200, Root("POST", "/v1/jobs/{id}/release", "/v1/jobs/" + head + "_2/release"));
    Expect(404, Root("GET", "/v1/jobs/{id}", "/v1/jobs/" + head + "_9"));
    Expect(200, Root("POST", "/v1/jobs/{id}/cancel", "/v1/jobs/" + head + "/cancel"));
    Expect(200, Root("POST", "/v1/jobs/{id}/cancel", "/v1/jobs/" + id + "/cancel"));
    Expect(409, Root("POST", "/v1/jobs/{id}/cancel", "/v1/jobs/" + head + "/cancel"));
  }

  // Jobs that end, with the fields only they carry: a script job stopped past its time
  // limit, a container job (image, mounts) that fails, an allocation its command ends, and
  // a preemptible job preempted with a grace (checkpoint-done), then requeued with a start
  // estimate (the easy start rule's). The agent takes its work through the API here, so
  // the launch and stop orders of those jobs are samples too.
  void Ends() {
    // The GPU job, cancelled (Lifecycle), ends: both GPUs are free.
    Report(id_, R"("kind": "exited", "signal": 15, "cancelled": true)");
    const std::string sid = StartJob(R"({"name": "prep", "script": "#!/bin/sh\necho start\n",
                                         "command": ["prep.sh"], "workdir": "/",
                                         "request": {"gpus": 1}, "time_limit_s": 60})");
    clock_.AdvanceMicros(121'000'000);  // past its limit and the controller's grace
    if (Status s = controller_->SweepTimeLimits(); !s.ok()) Fail("SweepTimeLimits: " + s.message());
    Report(sid, R"("kind": "exited", "signal": 9, "cancelled": true)");
    Expect(200, Root("GET", "/v1/jobs/{id}", "/v1/jobs/" + sid));
    const std::string cid = StartJob(R"({"name": "eval", "image": "localhost/torch:2.4",
        "mounts": [{"source": "/data", "target": "/data", "read_only": true}],
        "command": ["python3", "eval.py"], "workdir": "/", "request": {"gpus": 1}})");
    Report(cid, R"("kind": "exited", "exit_code": 3)");
    Expect(200, Root("GET", "/v1/jobs/{id}", "/v1/jobs/" + cid));

    // gpupool alloc: its command ends with code 0, which ends the allocation.
    const std::string aid = StartJob(R"({"name": "alloc", "command": [], "workdir": "/",
                                         "interactive": "alloc", "request": {"gpus": 1}})");
    Expect(200, Root("POST", "/v1/jobs/{id}/cancel", "/v1/jobs/" + aid + "/cancel", {},
                     R"({"exit_code": 0})"));
    Report(aid, R"("kind": "exited", "signal": 15, "cancelled": true)");
    Expect(200, Root("GET", "/v1/jobs/{id}", "/v1/jobs/" + aid));

    // Preempted past its minimum runtime by a job of higher priority; it checkpoints.
    const std::string pid = StartJob(R"({"name": "pretrain", "command": ["python3", "pt.py"],
                                         "workdir": "/", "request": {"gpus": 2},
                                         "preemptible": true, "preempt_grace_s": 30})");
    clock_.AdvanceMicros(700'000'000);
    Json urgent = Expect(201, Root("POST", "/v1/jobs", "/v1/jobs", {},
                                   R"({"name": "urgent", "command": ["python3", "fix.py"],
                                       "workdir": "/", "request": {"gpus": 2}, "priority": 10,
                                       "time_limit_s": 1800})"));
    const std::string uid = IdOf(urgent);
    Pass();
    Expect(200, Root("GET", "/v1/jobs/{id}", "/v1/jobs/" + pid));
    Expect(200,
           Root("POST", "/v1/jobs/{id}/checkpoint-done", "/v1/jobs/" + pid + "/checkpoint-done"));
    Report(pid, R"("kind": "exited", "signal": 15, "cancelled": true)");
    Start(uid);
    Pass();  // the requeued job's planned start: when the urgent one's time limit ends
    Json again = Expect(200, Root("GET", "/v1/jobs/{id}", "/v1/jobs/" + pid));
    if (!again["job"].contains("start_estimate_us")) {
      Fail("the requeued job should have a start estimate: " + again.dump());
    }
  }

  // Submits `body`, places and starts the job; its id.
  std::string StartJob(const std::string& body) {
    Json job = Expect(201, Root("POST", "/v1/jobs", "/v1/jobs", {}, body));
    const std::string id = IdOf(job);
    Start(id);
    return id;
  }
  static std::string IdOf(const Json& answer) {
    return std::to_string(answer.value("job", Json::object()).value("id", int64_t{0}));
  }
  // A scheduler pass, and the agent takes its work (launch and stop orders).
  void Pass() {
    if (Status s = controller_->ScheduleOnce(); !s.ok()) Fail("ScheduleOnce: " + s.message());
    Expect(200, Root("GET", "/v1/agent/work", "/v1/agent/work", {{"node", "vm"}}));
  }
  void Start(const std::string& id) {
    Pass();
    Report(id, R"("kind": "started", "master_port": 29500)");
  }
  // The agent reports an event of job `id`'s attempt 1: `fields` besides job_id, attempt.
  void Report(const std::string& id, const std::string& fields) {
    Expect(200, Root("POST", "/v1/agent/events", "/v1/agent/events", {},
                     R"({"node": "vm", "events": [{"job_id": )" + id + R"(, "attempt": 1, )" +
                         fields + "}]}"));
  }

  // Nodes, limits, usage, identity, tokens and the dashboard's sign-in.
  void Admin() {
    // Nodes, limits, usage, identity.
    Expect(200, Root("POST", "/v1/nodes/{name}/drain", "/v1/nodes/vm/drain", {},
                     R"({"reason": "replace GPU 1"})"));
    Expect(200, Root("POST", "/v1/nodes/{name}/resume", "/v1/nodes/vm/resume"));
    Expect(200, Root("PUT", "/v1/limits", "/v1/limits", {},
                     R"({"default": {"max_gpus": 8},
                         "users": {"nobody": {"max_queued": 10, "default_project": "vision",
                                              "fair_share": 2}},
                         "projects": {"vision": {"max_running": 2, "members": ["nobody"],
                                                 "fair_share": 0.5}}})"));
    Expect(200, User("GET", "/v1/limits", "/v1/limits"));
    // Read at revision 0, before the PUT above: stale.
    Expect(409, Root("PUT", "/v1/limits", "/v1/limits", {}, R"({"default": {}, "revision": 0})"));
    clock_.AdvanceMicros(3'600'000'000);
    Expect(200, Root("GET", "/v1/usage", "/v1/usage"));
    Expect(200, Root("GET", "/v1/usage", "/v1/usage", {{"by", "project"}}));
    Expect(200, Root("GET", "/v1/whoami", "/v1/whoami"));
    Expect(200, User("GET", "/v1/whoami", "/v1/whoami"));
    Expect(200, User("GET", "/v1/controllers", "/v1/controllers"));

    // Tokens.
    Json token = Expect(201, Root("POST", "/v1/tokens", "/v1/tokens", {},
                                  R"({"user": "vm2", "kind": "node", "expires_in_s": 86400})"));
    Expect(200, Root("GET", "/v1/tokens", "/v1/tokens"));
    Expect(200, Root("DELETE", "/v1/tokens/{token_id}",
                     "/v1/tokens/" + token.value("id", std::string())));

    // The dashboard: its page and assets for anyone; sign-in with a user token.
    Tcp("GET", "/", "/");
    Tcp("GET", "/ui/{asset}", "/ui/app.js");
    Tcp("GET", "/ui/{asset}", "/ui/app.css");
    Tcp("GET", "/ui/session", "/ui/session");
    Json user_token = Expect(
        201, Root("POST", "/v1/tokens", "/v1/tokens", {}, R"({"user": "nobody", "kind": "user"})"));
    net::HttpRequest login =
        Req("POST", "/ui/login", {}, R"({"token": ")" + user_token.value("token", "") + R"("})");
    login.headers["content-type"] = "application/json";
    Expect(200, Send(login, "/ui/login"));
    login.body = "{";
    Expect(400, Send(login, "/ui/login"));
    Expect(200, Tcp("POST", "/ui/logout", "/ui/logout"));
    Expect(200, Root("GET", "/v1/jobs", "/v1/jobs", {{"limit", "1"}, {"offset", "1"}}));
  }

 public:
  const OrderedJson& samples() const { return samples_; }

 private:
  static std::string RegisterBody(const std::string& node) {
    gpu::NodeInfo n;
    n.hostname = node;
    n.nvidia = gpu::DriverInfo{"550.54.15", "12.4", {}, {}};
    for (int i = 0; i < 2; ++i) {
      gpu::GpuInfo g;
      g.vendor = gpu::Vendor::kNvidia;
      g.index = i;
      g.name = "NVIDIA H100 80GB HBM3";
      g.uuid = "GPU-" + std::to_string(1000 + i);
      g.memory_total_bytes = uint64_t{80} << 30;
      g.compute_capability = gpu::ComputeCapability{9, 0};
      n.gpus.push_back(g);
    }
    return R"({"protocol": "1.4", "node": ")" + node +
           R"(", "cpu_milli": 8000, "memory_mib": 65536, "info": )" + DumpJson(gpu::NodeToJson(n)) +
           "}";
  }

  net::HttpResponse Send(net::HttpRequest r, const std::string& pattern) {
    net::HttpResponse resp = api_->Handle(r);
    OrderedJson headers = OrderedJson::object();
    for (const auto& [k, v] : resp.headers) headers[k] = v;
    std::lock_guard lock(samples_mu_);  // a signal's request runs beside the agent's polls
    samples_.push_back({{"method", r.method},
                        {"pattern", pattern},
                        {"path", r.path},
                        {"status", resp.status},
                        {"content_type", resp.content_type},
                        {"headers", std::move(headers)},
                        {"body", resp.body}});
    return resp;
  }
  static net::HttpRequest Req(const std::string& method, const std::string& path,
                              std::map<std::string, std::string> query, std::string body) {
    net::HttpRequest r;
    r.method = method;
    r.path = path;
    r.query = std::move(query);
    r.body = std::move(body);
    return r;
  }
  net::HttpResponse Tcp(const std::string& method, const std::string& pattern,
                        const std::string& path) {
    return Send(Req(method, path, {}, ""), pattern);
  }
  net::HttpResponse AsUid(uint32_t uid, const std::string& method, const std::string& pattern,
                          const std::string& path, std::map<std::string, std::string> query,
                          std::string body) {
    net::HttpRequest r = Req(method, path, std::move(query), std::move(body));
    r.peer = net::PeerCredentials{1, uid, uid};
    return Send(std::move(r), pattern);
  }
  net::HttpResponse Root(const std::string& method, const std::string& pattern,
                         const std::string& path, std::map<std::string, std::string> query = {},
                         std::string body = "") {
    return AsUid(0, method, pattern, path, std::move(query), std::move(body));
  }
  net::HttpResponse User(const std::string& method, const std::string& pattern,
                         const std::string& path, std::map<std::string, std::string> query = {},
                         std::string body = "") {
    return AsUid(user_uid_, method, pattern, path, std::move(query), std::move(body));
  }

  // The answer's JSON body when its status is `status`; else notes the failure.
  Json Expect(int status, const net::HttpResponse& r) {
    if (r.status != status) {
      Fail("expected " + std::to_string(status) + ", got " + std::to_string(r.status) + ": " +
           r.body + " (request " + samples_.back()["method"].get<std::string>() + " " +
           samples_.back()["path"].get<std::string>() + ")");
      return Json::object();
    }
    Result<Json> j = ParseJson(r.body, "answer");
    return j.ok() ? *j : Json::object();
  }
  bool Fail(const std::string& why) {
    std::cerr << "openapi_samples: " << why << "\n";
    ok_ = false;
    return false;
  }

  ManualClock clock_{1'800'000'000'000'000};
  FixedInspector inspector_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Api> api_;
  uint32_t user_uid_ = 65534;
  OrderedJson samples_ = OrderedJson::array();
  std::mutex samples_mu_;  // guards samples_
  bool ok_ = true;
  std::string id_;    // the GPU job (Submit)
  std::string head_;  // the array (Submit)
};

}  // namespace
}  // namespace gpupool::controller

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--routes") {
    gpupool::OrderedJson routes = gpupool::OrderedJson::array();
    for (const gpupool::controller::api::Route& r : gpupool::controller::api::Table()) {
      routes.push_back({{"method", r.method},
                        {"pattern", gpupool::controller::api::DocumentedPattern(r.pattern)},
                        {"public", r.access.anyone}});
    }
    std::cout << gpupool::DumpJson(routes) << "\n";
    return 0;
  }
  spdlog::set_default_logger(spdlog::stderr_logger_mt("openapi_samples"));  // stdout: the JSON
  gpupool::controller::Scenario scenario;
  const bool ok = scenario.Run();
  std::cout << gpupool::DumpJson(scenario.samples()) << "\n";
  return ok ? 0 : 1;
}
