#include "daemon/agent_loop.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "agent/job_files.h"
#include "envcheck/needs.h"
#include "gpu/export/exporters.h"
#include "gpu/node_json.h"
#include "jobs/job_json.h"

namespace gpupool::daemon {
namespace {

constexpr int64_t kGangKeyBase = int64_t{1} << 50;
constexpr int kMaxTasks = 4096;

std::string KindName(agent::JobEvent::Kind k) {
  switch (k) {
    case agent::JobEvent::Kind::kStarted:
      return "started";
    case agent::JobEvent::Kind::kExited:
    case agent::JobEvent::Kind::kFailed:
      return "exited";
    case agent::JobEvent::Kind::kLost:
      return "lost";
  }
  return "lost";
}

bool IsFinal(agent::JobEvent::Kind k) { return k != agent::JobEvent::Kind::kStarted; }

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Every host path a CDI spec's device nodes point at.
void CollectHostPaths(const Json& edits, std::vector<std::string>* out) {
  if (!edits.is_object() || !edits.contains("deviceNodes")) return;
  for (const Json& n : edits["deviceNodes"]) {
    if (n.is_object() && n.contains("hostPath") && n["hostPath"].is_string()) {
      out->push_back(n["hostPath"].get<std::string>());
    }
  }
}

}  // namespace

std::string CdiSpecPath(const std::string& cdi_dir, const std::string& kind) {
  std::string name;
  for (char c : kind) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    name += ok ? c : '_';
  }
  return cdi_dir + "/gpupool-" + name + ".json";
}

Result<std::string> WriteCdiSpec(const gpu::NodeInfo& node, const std::string& kind,
                                 const std::string& dev_root, const std::string& cdi_dir) {
  gpu::CdiOptions o;
  o.kind = kind;
  o.host_dev_root = dev_root.empty() ? "/dev" : dev_root;
  GP_ASSIGN_OR_RETURN(std::string text, gpu::ExportCdi(node, o));
  GP_ASSIGN_OR_RETURN(Json spec, ParseJson(text, "CDI spec"));
  std::vector<std::string> host_paths;
  CollectHostPaths(spec.value("containerEdits", Json::object()), &host_paths);
  for (const Json& d : spec.value("devices", Json::array())) {
    CollectHostPaths(d.value("containerEdits", Json::object()), &host_paths);
  }
  for (const std::string& p : host_paths) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) {
      return Status::FailedPrecondition("device node '" + p +
                                        "' does not exist, and podman refuses a spec naming it; " +
                                        "a fake node needs stand-in device nodes under --dev-root");
    }
  }
  if (::mkdir(cdi_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Unavailable("cannot create '" + cdi_dir + "': " + std::strerror(errno) +
                               " (writing CDI specs needs root)");
  }
  const std::string path = CdiSpecPath(cdi_dir, kind);
  GP_RETURN_IF_ERROR(agent::WriteFileDurably(path, text, 0644, /*sync=*/false));
  return path;
}

int64_t LauncherKey(int64_t job_id, int task_index, int tasks) {
  if (tasks <= 1) return job_id;
  return kGangKeyBase + job_id * kMaxTasks + task_index;
}

std::pair<int64_t, int> FromLauncherKey(int64_t key) {
  if (key < kGangKeyBase) return {key, 0};
  key -= kGangKeyBase;
  return {key / kMaxTasks, static_cast<int>(key % kMaxTasks)};
}

AgentLoop::AgentLoop(AgentLoopOptions options, net::HttpClient client, agent::Launcher* launcher)
    : options_(std::move(options)), client_(std::move(client)), launcher_(launcher) {
  if (options_.cpu_milli <= 0) options_.cpu_milli = sysconf(_SC_NPROCESSORS_ONLN) * 1000;
  if (options_.memory_mib <= 0) {
    options_.memory_mib =
        static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / int64_t{1 << 20};
  }
}

Result<Json> AgentLoop::Call(const std::string& method, const std::string& path,
                             const std::string& body, int timeout_ms) {
  GP_ASSIGN_OR_RETURN(net::HttpResponse r, client_.Send(method, path, body, timeout_ms));
  Result<Json> j = ParseJson(r.body.empty() ? "{}" : r.body, "controller answer");
  if (r.status / 100 != 2) {
    std::string msg = j.ok() && j->is_object() && j->contains("error") && (*j)["error"].is_string()
                          ? (*j)["error"].get<std::string>()
                          : r.body;
    return Status(r.status == 404 ? StatusCode::kNotFound : StatusCode::kUnavailable,
                  "controller answered " + std::to_string(r.status) + ": " + msg);
  }
  return j;
}

Status AgentLoop::Register() {
  // Jobs this node already runs (from before an agent restart) are reported back.
  GP_ASSIGN_OR_RETURN(std::vector<agent::JobEvent> adopted, launcher_->Adopt());
  OrderedJson running = OrderedJson::array();
  {
    std::lock_guard lock(mu_);
    for (agent::JobEvent& ev : adopted) {
      launched_.insert({ev.job_id, ev.attempt});
      unsent_.push_back(ev);
    }
    for (const auto& [key, attempt] : launched_) {
      auto [job, task] = FromLauncherKey(key);
      (void)task;
      running.push_back({{"job_id", job}, {"attempt", attempt}});
    }
  }
  OrderedJson body;
  body["node"] = options_.node_name;
  body["info"] = gpu::NodeToJson(options_.node);
  body["cpu_milli"] = options_.cpu_milli;
  body["memory_mib"] = options_.memory_mib;
  body["running"] = std::move(running);
  GP_RETURN_IF_ERROR(Call("POST", "/v1/agent/register", DumpJson(body), 10'000).status());
  registered_ = true;
  spdlog::info("agent: node {} registered with {} GPUs ({} jobs adopted)", options_.node_name,
               options_.node.gpus.size(), adopted.size());
  return Status::Ok();
}

Status AgentLoop::Launch(const Json& order) {
  GP_ASSIGN_OR_RETURN(jobs::Job job, [&]() -> Result<jobs::Job> {
    Json copy = order;
    for (const char* k : {"task_index", "gpus", "denied_device_nodes"}) copy.erase(k);
    return jobs::JobFromJson(copy, "launch order");
  }());
  const int task_index = order.value("task_index", 0);
  const int64_t key = LauncherKey(job.id, task_index, job.request.tasks);
  {
    std::lock_guard lock(mu_);
    if (!launched_.insert({key, job.attempt}).second) return Status::Ok();  // resent order
  }
  agent::LaunchSpec spec;
  spec.job_id = key;
  spec.attempt = job.attempt;
  spec.user = job.user;
  spec.uid = job.uid;
  spec.gid = job.gid;
  spec.argv = job.command;
  spec.env = job.env;
  spec.workdir = job.workdir;
  spec.cpu_milli = job.request.cpu_milli;
  spec.memory_bytes = job.request.memory_bytes;
  spec.time_limit_s = job.time_limit_s;
  spec.grace_s = options_.cancel_grace_s;
  spec.image = job.image;
  for (const jobs::Mount& m : job.mounts) spec.mounts.push_back({m.source, m.target, m.read_only});
  spec.env_dir = job.env_dir;
  if (order.contains("gpus") && order["gpus"].is_array()) {
    for (const Json& g : order["gpus"]) {
      agent::GpuGrant grant;
      grant.vendor = g.value("vendor", "");
      grant.index = g.value("index", -1);
      grant.uuid = g.value("uuid", "");
      grant.gpu_milli = g.value("gpu_milli", 1000);
      if (g.contains("device_nodes") && g["device_nodes"].is_array()) {
        for (const Json& d : g["device_nodes"]) {
          if (d.is_string()) grant.device_nodes.push_back(d.get<std::string>());
        }
      }
      spec.gpus.push_back(std::move(grant));
    }
  }
  if (order.contains("denied_device_nodes") && order["denied_device_nodes"].is_array()) {
    for (const Json& d : order["denied_device_nodes"]) {
      if (d.is_string()) spec.denied_device_nodes.push_back(d.get<std::string>());
    }
  }
  spec.require_device_isolation = !spec.denied_device_nodes.empty() &&
                                  !options_.allow_unisolated_devices && !options_.fake_node;
  if (!spec.image.empty() || !spec.gpus.empty()) {
    if (Status pre = PrepareContainerJob(job, &spec); !pre.ok()) {
      FailLaunch(key, job.attempt, pre.message());
      return Status::Ok();
    }
  }
  Status s = launcher_->Launch(spec);
  if (!s.ok()) FailLaunch(key, job.attempt, "could not launch: " + s.message());
  return Status::Ok();
}

void AgentLoop::FailLaunch(int64_t key, int attempt, const std::string& reason) {
  // Nothing was started: report the failure as the job's end.
  agent::JobEvent ev;
  ev.job_id = key;
  ev.attempt = attempt;
  ev.kind = agent::JobEvent::Kind::kFailed;
  ev.time_us = NowMicros();
  ev.reason = reason;
  spdlog::info("agent: job {} attempt {} not launched: {}", FromLauncherKey(key).first, attempt,
               reason);
  std::lock_guard lock(mu_);
  unsent_.push_back(std::move(ev));
}

Result<jobs::EnvNeeds> AgentLoop::NeedsOf(const jobs::Job& job) {
  if (!job.needs.empty() || job.image.empty()) return job.needs;
  GP_ASSIGN_OR_RETURN(std::string id, envcheck::ImageId(job.image, options_.container.global_args));
  {
    std::lock_guard lock(mu_);
    if (auto it = needs_by_image_id_.find(id); it != needs_by_image_id_.end()) return it->second;
  }
  GP_ASSIGN_OR_RETURN(jobs::EnvNeeds needs,
                      envcheck::InspectImageNeeds(job.image, options_.container.global_args, id));
  std::lock_guard lock(mu_);
  needs_by_image_id_[id] = needs;
  return needs;
}

Status AgentLoop::PrepareContainerJob(const jobs::Job& job, agent::LaunchSpec* spec) {
  const std::string& node = options_.node_name;
  if (!spec->image.empty() && !options_.container.unavailable.empty()) {
    return Status::FailedPrecondition("podman is not installed on node " + node + ": " +
                                      options_.container.unavailable);
  }
  if (!spec->image.empty() && !spec->gpus.empty()) {
    if (!options_.cdi_error.empty() || options_.cdi_kind.empty()) {
      return Status::FailedPrecondition(
          "node " + node + " cannot give GPUs to containers: the agent wrote no CDI spec (" +
          (options_.cdi_error.empty() ? std::string("no CDI kind configured")
                                      : options_.cdi_error) +
          ")");
    }
    for (const agent::GpuGrant& g : spec->gpus) {
      spec->cdi_devices.push_back(options_.cdi_kind + "=" +
                                  (g.uuid.empty() ? std::to_string(g.index) : g.uuid));
    }
  }
  // The environment's needs matter only to jobs that use the node's GPUs.
  if (spec->gpus.empty()) return Status::Ok();
  Result<jobs::EnvNeeds> needs = NeedsOf(job);
  if (!needs.ok()) {
    // Not fatal: the image may be pulled at run time, and podman then says what is wrong.
    spdlog::warn("agent: job {}: cannot inspect image '{}' to check its needs: {}", job.id,
                 job.image, needs.status().message());
    return Status::Ok();
  }
  return envcheck::CheckNeeds(*needs, envcheck::OfferFromNode(options_.node, node));
}

// Log reads the controller relays for `gpupool logs` (the files are on this node). Each
// answer is posted at once; a controller that gave up on one ignores it.
void AgentLoop::AnswerLogReads(const Json& reads) {
  for (const Json& read : reads) {
    if (!read.is_object()) continue;
    int64_t id = 0;
    int64_t offset = 0;
    int64_t max_bytes = 0;
    std::string path;
    JsonFields f(read, "log read", /*reject_unknown=*/false);
    f.Required("id", &id, 1);
    f.Required("path", &path);
    f.Optional("offset", &offset, 0);
    f.Optional("max_bytes", &max_bytes, 0, 1 << 20);
    if (Status s = f.Finish(); !s.ok()) {
      spdlog::warn("agent: bad log read: {}", s.message());
      continue;
    }
    Result<agent::LogSlice> slice =
        agent::ReadJobLogSlice(options_.state_dir, path, offset, max_bytes);
    std::string query =
        "/v1/agent/logs?node=" + net::UrlEncode(options_.node_name) + "&id=" + std::to_string(id);
    std::string body;
    if (slice.ok()) {
      query += "&size=" + std::to_string(slice->size);
      body = std::move(slice->data);
    } else {
      const StatusCode c = slice.status().code();
      query += c == StatusCode::kNotFound           ? "&error=not_found"
               : c == StatusCode::kPermissionDenied ? "&error=refused"
                                                    : "&error=io";
      body = slice.status().message();
      if (c == StatusCode::kPermissionDenied) spdlog::warn("agent: log read refused: {}", body);
    }
    if (Result<Json> r = Call("POST", query, body, 10'000); !r.ok()) {
      spdlog::warn("agent: answering log read {}: {}", id, r.status().message());
    }
  }
}

Status AgentLoop::PollOnce() {
  Result<Json> work = Call("GET",
                           "/v1/agent/work?node=" + net::UrlEncode(options_.node_name) +
                               "&wait_ms=" + std::to_string(options_.poll_wait_ms),
                           "", options_.poll_wait_ms + 15'000);
  if (!work.ok()) {
    if (work.status().code() == StatusCode::kNotFound) registered_ = false;
    return work.status();
  }
  if (work->contains("cancel") && (*work)["cancel"].is_array()) {
    for (const Json& id : (*work)["cancel"]) {
      if (!id.is_number_integer()) continue;
      const int64_t job = id.get<int64_t>();
      // Every task of the job that runs here (gang tasks have keys of their own).
      for (int64_t key : launcher_->Running()) {
        if (FromLauncherKey(key).first == job) {
          if (Status s = launcher_->Cancel(key); !s.ok()) {
            spdlog::warn("agent: cancel job {}: {}", job, s.message());
          }
        }
      }
    }
  }
  if (work->contains("logs") && (*work)["logs"].is_array()) AnswerLogReads((*work)["logs"]);
  if (work->contains("launch") && (*work)["launch"].is_array()) {
    std::lock_guard lock(mu_);
    for (const Json& order : (*work)["launch"]) launch_queue_.push_back(order);
    launch_cv_.notify_all();
  }
  return Status::Ok();
}

void AgentLoop::LaunchWorker() {
  while (true) {
    Json order;
    {
      std::unique_lock lock(mu_);
      launch_cv_.wait_for(lock, std::chrono::milliseconds(200),
                          [this] { return stopping_ || !launch_queue_.empty(); });
      if (stopping_) return;
      if (launch_queue_.empty()) continue;
      order = std::move(launch_queue_.front());
      launch_queue_.pop_front();
    }
    if (Status s = Launch(order); !s.ok())
      spdlog::error("agent: bad launch order: {}", s.message());
  }
}

void AgentLoop::ReportEvents() {
  int backoff_ms = 100;
  while (!stopping_) {
    std::vector<agent::JobEvent> fresh = launcher_->Wait(200);
    std::vector<agent::JobEvent> batch;
    {
      std::lock_guard lock(mu_);
      for (auto& e : fresh) unsent_.push_back(std::move(e));
      batch = unsent_;
    }
    if (batch.empty() || !registered_) continue;
    OrderedJson events = OrderedJson::array();
    for (const agent::JobEvent& ev : batch) {
      auto [job, task] = FromLauncherKey(ev.job_id);
      OrderedJson e;
      e["job_id"] = job;
      e["attempt"] = ev.attempt;
      e["task_index"] = task;
      e["kind"] = KindName(ev.kind);
      e["time_us"] = ev.time_us;
      if (ev.exit_code) e["exit_code"] = *ev.exit_code;
      if (ev.signal) e["signal"] = *ev.signal;
      e["timed_out"] = ev.timed_out;
      e["cancelled"] = ev.cancelled;
      e["reason"] = ev.reason;
      if (ev.kind != agent::JobEvent::Kind::kLost) {
        const std::string dir = agent::JobDir(options_.state_dir, ev.job_id);
        e["stdout_path"] = dir + "/stdout.log";
        e["stderr_path"] = dir + "/stderr.log";
      }
      events.push_back(std::move(e));
    }
    OrderedJson body;
    body["node"] = options_.node_name;
    body["events"] = std::move(events);
    Result<Json> ack = Call("POST", "/v1/agent/events", DumpJson(body), 10'000);
    if (!ack.ok()) {
      spdlog::warn("agent: cannot report {} events yet: {}", batch.size(), ack.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min(backoff_ms * 2, 5000);
      continue;
    }
    backoff_ms = 100;
    std::lock_guard lock(mu_);
    unsent_.erase(unsent_.begin(), unsent_.begin() + static_cast<std::ptrdiff_t>(batch.size()));
    for (const agent::JobEvent& ev : batch) {
      if (!IsFinal(ev.kind)) continue;
      if (Status s = launcher_->Forget(ev.job_id); !s.ok() && s.code() != StatusCode::kNotFound) {
        spdlog::warn("agent: forget job {}: {}", ev.job_id, s.message());
      }
    }
  }
}

void AgentLoop::Run() {
  std::thread reporter([this] { ReportEvents(); });
  std::vector<std::thread> launchers;
  for (int i = 0; i < std::max(1, options_.launch_workers); ++i) {
    launchers.emplace_back([this] { LaunchWorker(); });
  }
  int backoff_ms = 200;
  while (!stopping_) {
    Status s = registered_ ? PollOnce() : Register();
    if (s.ok()) {
      backoff_ms = 200;
      continue;
    }
    spdlog::warn("agent: {} (retrying in {} ms)", s.message(), backoff_ms);
    for (int slept = 0; slept < backoff_ms && !stopping_; slept += 50) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    backoff_ms = std::min(backoff_ms * 2, 5000);
  }
  launch_cv_.notify_all();
  for (std::thread& t : launchers) t.join();
  reporter.join();
}

}  // namespace gpupool::daemon
