#include "protocol/agent_protocol.h"

#include <algorithm>
#include <cstdlib>

#include "common/strings.h"
#include "gpu/node_json.h"
#include "jobs/job_json.h"
#include "protocol/cancel_order.h"
#include "protocol/hardware_health_json.h"
#include "protocol/terminal_env.h"

namespace gpupool::protocol {
namespace {

constexpr bool kLenient = false;  // JsonFields' reject_unknown: readers ignore new fields
constexpr int kMaxTasks = 4096;
constexpr size_t kMaxArgs = 4096;

std::string Index(std::string_view base, size_t i) {
  return std::string(base) + "[" + std::to_string(i) + "]";
}

Status CheckIntArray(JsonFields& f, std::string_view key, const Json* a, int min, int max,
                     std::vector<int>* out) {
  if (a == nullptr) return Status::Ok();
  for (const Json& e : *a) {
    if (!e.is_number_integer() || e.get<int64_t>() < min || e.get<int64_t>() > max) {
      f.Fail(key, "expected integers in " + std::to_string(min) + ".." + std::to_string(max));
      return f.Finish();
    }
    out->push_back(static_cast<int>(e.get<int64_t>()));
  }
  return Status::Ok();
}

}  // namespace

OrderedJson EncodeGpuGrant(const GpuGrant& g) {
  return {{"vendor", g.vendor},
          {"index", g.index},
          {"uuid", g.uuid},
          {"device_nodes", g.device_nodes},
          {"gpu_milli", g.gpu_milli}};
}

Result<GpuGrant> DecodeGpuGrant(const Json& j, const std::string& path) {
  GpuGrant g;
  JsonFields f(j, path, kLenient);
  f.Required("vendor", &g.vendor);
  f.Required("index", &g.index, -1, 1 << 20);
  f.Optional("uuid", &g.uuid);
  f.Optional("device_nodes", &g.device_nodes);
  f.Optional("gpu_milli", &g.gpu_milli, 1, 1000);
  GP_RETURN_IF_ERROR(f.Finish());
  return g;
}

namespace {

OrderedJson EncodeRendezvous(const Rendezvous& r) {
  return {{"task_index", r.task_index},
          {"num_tasks", r.num_tasks},
          {"hosts", r.hosts},
          {"slots", r.slots},
          {"master_port", r.master_port}};
}

Result<Rendezvous> DecodeRendezvous(const Json& j, const std::string& path) {
  Rendezvous r;
  JsonFields f(j, path, kLenient);
  f.Required("task_index", &r.task_index, 0, kMaxTasks - 1);
  f.Required("num_tasks", &r.num_tasks, 1, kMaxTasks);
  f.Optional("hosts", &r.hosts);
  GP_RETURN_IF_ERROR(CheckIntArray(f, "slots", f.Array("slots"), 1, 1 << 20, &r.slots));
  f.Optional("master_port", &r.master_port, 0, 65535);
  GP_RETURN_IF_ERROR(f.Finish());
  if (r.task_index >= r.num_tasks) {
    return Status::InvalidArgument(path + ".task_index: " + std::to_string(r.task_index) +
                                   " is not below num_tasks " + std::to_string(r.num_tasks));
  }
  if (r.hosts.size() != static_cast<size_t>(r.num_tasks) ||
      r.slots.size() != static_cast<size_t>(r.num_tasks)) {
    return Status::InvalidArgument(path + ": hosts and slots need one entry per task (" +
                                   std::to_string(r.num_tasks) + ")");
  }
  return r;
}

OrderedJson EncodeEvent(const Event& e) {
  OrderedJson j;
  j["job_id"] = e.job_id;
  j["attempt"] = e.attempt;
  j["task_index"] = e.task_index;
  j["kind"] = EventKindName(e.kind);
  j["time_us"] = e.time_us;
  if (e.exit_code) j["exit_code"] = *e.exit_code;
  if (e.signal) j["signal"] = *e.signal;
  j["timed_out"] = e.timed_out;
  j["cancelled"] = e.cancelled;
  j["reason"] = e.reason;
  if (e.kill_cause) j["kill_cause"] = KillCauseName(*e.kill_cause);
  if (!e.kill_detail.empty()) j["kill_detail"] = e.kill_detail;
  if (!e.stdout_path.empty()) j["stdout_path"] = e.stdout_path;
  if (!e.stderr_path.empty()) j["stderr_path"] = e.stderr_path;
  if (e.master_port != 0) j["master_port"] = e.master_port;
  if (e.not_started) j["not_started"] = true;
  return j;
}

Result<Event> DecodeEvent(const Json& j, const std::string& path) {
  Event e;
  std::string kind;
  JsonFields f(j, path, kLenient);
  f.Required("job_id", &e.job_id, 1);
  f.Optional("attempt", &e.attempt, 0);
  f.Optional("task_index", &e.task_index, 0, kMaxTasks - 1);
  f.Required("kind", &kind);
  f.Optional("time_us", &e.time_us, 0);
  f.Optional("exit_code", &e.exit_code);
  f.Optional("signal", &e.signal, 0, 128);
  f.Optional("timed_out", &e.timed_out);
  f.Optional("cancelled", &e.cancelled);
  f.Optional("reason", &e.reason);
  const bool has_cause = f.Member("kill_cause") != nullptr;
  std::string cause;
  f.Optional("kill_cause", &cause);
  f.Optional("kill_detail", &e.kill_detail);
  f.Optional("stdout_path", &e.stdout_path);
  f.Optional("stderr_path", &e.stderr_path);
  f.Optional("master_port", &e.master_port, 0, 65535);
  f.Optional("not_started", &e.not_started);
  GP_RETURN_IF_ERROR(f.Finish());
  // A name this build does not know (a newer agent's, or garbage) is kept as kUnknown:
  // the end still counts, and the controller logs it and reads `reason` instead.
  if (has_cause) e.kill_cause = ParseKillCause(cause).value_or(KillCause::kUnknown);
  if (kind == "started") {
    e.kind = EventKind::kStarted;
  } else if (kind == "exited") {
    e.kind = EventKind::kExited;
  } else if (kind == "lost") {
    e.kind = EventKind::kLost;
  } else {
    return Status::InvalidArgument(path + ".kind: '" + kind + "' is not started, exited or lost");
  }
  return e;
}

// A base64 field of `j` (absent or null: nothing), at most `max_bytes` once decoded; `fix`
// ends the message of one that is longer.
Status DecodeBytes(const Json& j, std::string_view key, const std::string& path, size_t max_bytes,
                   std::string_view fix, std::string* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  const std::string where = path + "." + std::string(key);
  if (!it->is_string()) return Status::InvalidArgument(where + ": expected a base64 string");
  const std::string& text = it->get_ref<const std::string&>();
  if (text.size() > (max_bytes + 2) / 3 * 4) {
    return Status::InvalidArgument(where + ": more than " + std::to_string(max_bytes) + " bytes" +
                                   std::string(fix));
  }
  std::optional<std::string> bytes = Base64Decode(text);
  if (!bytes) return Status::InvalidArgument(where + ": not valid base64");
  *out = std::move(*bytes);
  return Status::Ok();
}

OrderedJson EncodeExecReport(const ExecReport& r) {
  OrderedJson j;
  j["id"] = r.id;
  j["started"] = r.started;
  j["ended"] = r.ended;
  if (r.exit_code) j["exit_code"] = *r.exit_code;
  if (r.signal) j["signal"] = *r.signal;
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.stdout_path.empty()) j["stdout_path"] = r.stdout_path;
  if (!r.stderr_path.empty()) j["stderr_path"] = r.stderr_path;
  if (r.output_complete) {
    j["output_complete"] = true;
    if (!r.stdout_data.empty()) j["stdout"] = Base64Encode(r.stdout_data);
    if (!r.stderr_data.empty()) j["stderr"] = Base64Encode(r.stderr_data);
  }
  return j;
}

Result<ExecReport> DecodeExecReport(const Json& j, const std::string& path) {
  ExecReport r;
  JsonFields f(j, path, kLenient);
  f.Required("id", &r.id, 1);
  f.Optional("started", &r.started);
  f.Optional("ended", &r.ended);
  f.Optional("exit_code", &r.exit_code);
  f.Optional("signal", &r.signal, 0, 128);
  f.Optional("error", &r.error);
  f.Optional("stdout_path", &r.stdout_path);
  f.Optional("stderr_path", &r.stderr_path);
  f.Optional("output_complete", &r.output_complete);
  GP_RETURN_IF_ERROR(f.Finish());
  if (r.output_complete) {
    GP_RETURN_IF_ERROR(
        DecodeBytes(j, "stdout", path, kMaxInlineExecOutput, " inline", &r.stdout_data));
    GP_RETURN_IF_ERROR(
        DecodeBytes(j, "stderr", path, kMaxInlineExecOutput, " inline", &r.stderr_data));
    if (r.stdout_data.size() + r.stderr_data.size() > kMaxInlineExecOutput) {
      return Status::InvalidArgument(path + ": more than " + std::to_string(kMaxInlineExecOutput) +
                                     " bytes of output inline");
    }
  }
  return r;
}

// What can be told about an unreadable launch order, so that the agent can report it.
Rejected RejectLaunch(const Json& j, std::string what, const Status& s) {
  Rejected r;
  r.what = std::move(what);
  r.error = s.message();
  if (j.is_object()) {
    if (const auto job = j.find("job"); job != j.end() && job->is_object()) {
      if (const auto id = job->find("id"); id != job->end() && id->is_number_integer())
        r.job_id = id->get<int64_t>();
      if (const auto a = job->find("attempt"); a != job->end() && a->is_number_integer())
        r.attempt = static_cast<int>(std::clamp<int64_t>(a->get<int64_t>(), 0, INT32_MAX));
      if (const auto q = job->find("request"); q != job->end() && q->is_object()) {
        if (const auto n = q->find("tasks"); n != q->end() && n->is_number_integer())
          r.num_tasks = static_cast<int>(std::clamp<int64_t>(n->get<int64_t>(), 1, kMaxTasks));
      }
    }
    if (const auto t = j.find("task_index"); t != j.end() && t->is_number_integer()) {
      const int64_t v = t->get<int64_t>();
      r.task_index = v >= 0 && v < kMaxTasks ? static_cast<int>(v) : 0;
    }
  }
  if (r.job_id < 0) r.job_id = 0;
  return r;
}

}  // namespace

std::string VersionString(Version v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor);
}

Result<Version> ParseVersion(std::string_view text) {
  const auto dot = text.find('.');
  std::optional<int64_t> major =
      dot == std::string_view::npos ? std::nullopt : ParseInt64(text.substr(0, dot));
  std::optional<int64_t> minor =
      dot == std::string_view::npos ? std::nullopt : ParseInt64(text.substr(dot + 1));
  if (!major || !minor || *major < 0 || *minor < 0 || *major > 1000 || *minor > 1000) {
    return Status::InvalidArgument("protocol: '" + std::string(text) +
                                   "' is not a version MAJOR.MINOR, e.g. " +
                                   VersionString(kVersion));
  }
  return Version{static_cast<int>(*major), static_cast<int>(*minor)};
}

Status CheckCompatible(Version ours, Version theirs, std::string_view peer, std::string_view self) {
  if (ours.major == theirs.major && std::abs(ours.minor - theirs.minor) <= 1) return Status::Ok();
  const bool peer_older =
      theirs.major < ours.major || (theirs.major == ours.major && theirs.minor < ours.minor);
  return Status::FailedPrecondition(
      std::string(peer) + " speaks agent protocol " + VersionString(theirs) + " and " +
      std::string(self) + " " + VersionString(ours) +
      "; they are too far apart (the same major and minors at most one apart work together): "
      "upgrade gpupool on " +
      std::string(peer_older ? peer : self));
}

bool SupportsExec(Version v) { return v.major > 1 || (v.major == 1 && v.minor >= 1); }
bool SupportsInteractiveExec(Version v) { return v.major > 1 || (v.major == 1 && v.minor >= 2); }
bool SupportsTelemetry(Version v) { return v.major > 1 || (v.major == 1 && v.minor >= 3); }

bool SupportsSignal(Version v) { return v.major > 1 || (v.major == 1 && v.minor >= 4); }

std::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kStarted:
      return "started";
    case EventKind::kExited:
      return "exited";
    case EventKind::kLost:
      return "lost";
  }
  return "lost";
}

OrderedJson EncodeRegistrationReply(const RegistrationReply& r) {
  OrderedJson j = {{"ok", true}, {"protocol", VersionString(r.version)}, {"address", r.address}};
  if (r.node_lease_ms > 0) j["node_lease_ms"] = r.node_lease_ms;
  if (r.kill_wait_s > 0) j["kill_wait_s"] = r.kill_wait_s;
  return j;
}

Result<RegistrationReply> DecodeRegistrationReply(const Json& j) {
  RegistrationReply r;
  std::string version;
  JsonFields f(j, "", kLenient);
  f.Optional("protocol", &version);
  f.Optional("address", &r.address);
  f.Optional("node_lease_ms", &r.node_lease_ms, 0, int64_t{7} * 24 * 3600 * 1000);
  f.Optional("kill_wait_s", &r.kill_wait_s, 0, kMaxKillWaitS);
  GP_RETURN_IF_ERROR(f.Finish());
  if (version.empty()) {
    return Status::FailedPrecondition(
        "protocol: the controller did not say its protocol version; it predates " +
        VersionString(kVersion) + ": upgrade gpupool on the controller");
  }
  GP_ASSIGN_OR_RETURN(r.version, ParseVersion(version));
  return r;
}

OrderedJson EncodeRegistrationRefusal(Version controller, const std::string& why) {
  OrderedJson j;
  j["error"] = why;
  j["protocol"] = VersionString(controller);
  return j;
}

std::optional<Version> DecodeRegistrationRefusal(const Json& j) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find("protocol");
  if (it == j.end() || !it->is_string()) return std::nullopt;
  Result<Version> v = ParseVersion(it->get<std::string>());
  if (!v.ok()) return std::nullopt;
  return *v;
}

OrderedJson EncodeLaunchOrder(const LaunchOrder& o) {
  OrderedJson j;
  j["job"] = jobs::JobToJson(o.job);
  j["task_index"] = o.task_index;
  OrderedJson gpus = OrderedJson::array();
  for (const GpuGrant& g : o.gpus) gpus.push_back(EncodeGpuGrant(g));
  j["gpus"] = std::move(gpus);
  j["denied_device_nodes"] = o.denied_device_nodes;
  j["rendezvous"] = EncodeRendezvous(o.rendezvous);
  if (o.node_tasks.size() > 1) j["node_tasks"] = o.node_tasks;
  return j;
}

Result<LaunchOrder> DecodeLaunchOrder(const Json& j, std::string_view path_view) {
  const std::string path(path_view);
  LaunchOrder o;
  JsonFields f(j, path, kLenient);
  const Json* job = f.Member("job");
  f.Required("task_index", &o.task_index, 0, kMaxTasks - 1);
  const Json* gpus = f.Array("gpus");
  f.Optional("denied_device_nodes", &o.denied_device_nodes);
  const Json* rdzv = f.Member("rendezvous");
  GP_RETURN_IF_ERROR(
      CheckIntArray(f, "node_tasks", f.Array("node_tasks"), 0, kMaxTasks - 1, &o.node_tasks));
  GP_RETURN_IF_ERROR(f.Finish());
  if (job == nullptr) return Status::InvalidArgument(path + ".job: required");
  GP_ASSIGN_OR_RETURN(o.job, jobs::JobFromJson(*job, path + ".job", /*reject_unknown=*/false));
  if (o.job.id <= 0) return Status::InvalidArgument(path + ".job.id: required");
  if (gpus != nullptr) {
    for (size_t i = 0; i < gpus->size(); ++i) {
      GP_ASSIGN_OR_RETURN(GpuGrant g, DecodeGpuGrant((*gpus)[i], Index(path + ".gpus", i)));
      o.gpus.push_back(std::move(g));
    }
  }
  // Every controller sends it (it came with the protocol). Made up here, it was a gang of
  // task_index + 1 tasks without hosts, which the encoder writes back as an order that
  // no decoder accepts.
  if (rdzv == nullptr) {
    return Status::InvalidArgument(path + ".rendezvous: required (the task's peers)");
  }
  GP_ASSIGN_OR_RETURN(o.rendezvous, DecodeRendezvous(*rdzv, path + ".rendezvous"));
  if (o.rendezvous.task_index != o.task_index) {
    return Status::InvalidArgument(path + ".rendezvous.task_index: differs from task_index");
  }
  if (!o.node_tasks.empty()) {
    // This task first, then other tasks of the job, each once.
    std::vector<int> seen = o.node_tasks;
    std::sort(seen.begin(), seen.end());
    if (o.node_tasks.front() != o.task_index ||
        std::adjacent_find(seen.begin(), seen.end()) != seen.end() ||
        seen.back() >= o.rendezvous.num_tasks) {
      return Status::InvalidArgument(
          path +
          ".node_tasks: expected this task's index first, then distinct task indices below " +
          std::to_string(o.rendezvous.num_tasks));
    }
  }
  return o;
}

OrderedJson EncodeWork(const Work& w, Version peer) {
  OrderedJson j;
  OrderedJson launch = OrderedJson::array();
  for (const LaunchOrder& o : w.launch) launch.push_back(EncodeLaunchOrder(o));
  j["launch"] = std::move(launch);
  OrderedJson cancel = OrderedJson::array();
  for (const CancelOrder& c : w.cancel) cancel.push_back(EncodeCancelOrder(c));
  j["cancel"] = std::move(cancel);
  OrderedJson logs = OrderedJson::array();
  for (const LogRequest& l : w.logs) {
    logs.push_back(
        {{"id", l.id}, {"path", l.path}, {"offset", l.offset}, {"max_bytes", l.max_bytes}});
  }
  j["logs"] = std::move(logs);
  if (SupportsExec(peer)) {
    OrderedJson exec = OrderedJson::array();
    for (const ExecRequest& e : w.exec) {
      OrderedJson x = {{"id", e.id},           {"job_id", e.job_id},
                       {"attempt", e.attempt}, {"task_index", e.task_index},
                       {"argv", e.argv},       {"master_port", e.master_port}};
      if (e.tty) x["tty"] = true;
      if (e.stdin_open) x["stdin"] = true;
      if (e.rows > 0) x["rows"] = e.rows;
      if (e.cols > 0) x["cols"] = e.cols;
      if (!e.env.empty()) x["env"] = e.env;
      exec.push_back(std::move(x));
    }
    j["exec"] = std::move(exec);
  }
  if (SupportsSignal(peer) && !w.signal.empty()) {
    OrderedJson signal = OrderedJson::array();
    for (const SignalOrder& s : w.signal) signal.push_back(EncodeSignalOrder(s));
    j["signal"] = std::move(signal);
  }
  return j;
}

Result<Work> DecodeWork(const Json& j) {
  Work w;
  JsonFields f(j, "work", kLenient);
  const Json* launch = f.Array("launch");
  const Json* cancel = f.Array("cancel");
  const Json* logs = f.Array("logs");
  const Json* exec = f.Array("exec");
  const Json* signal = f.Array("signal");
  GP_RETURN_IF_ERROR(f.Finish());
  if (signal != nullptr) {
    for (size_t i = 0; i < signal->size(); ++i) {
      Result<SignalOrder> s = DecodeSignalOrder((*signal)[i], Index("signal", i));
      if (!s.ok()) {
        w.rejected.push_back({Index("signal", i), 0, 0, 1, 0, s.status().message()});
        continue;
      }
      w.signal.push_back(*s);
    }
  }
  if (launch != nullptr) {
    for (size_t i = 0; i < launch->size(); ++i) {
      const std::string what = Index("launch", i);
      Result<LaunchOrder> o = DecodeLaunchOrder((*launch)[i], what);
      if (o.ok()) {
        w.launch.push_back(std::move(*o));
      } else {
        w.rejected.push_back(RejectLaunch((*launch)[i], what, o.status()));
      }
    }
  }
  if (cancel != nullptr) {
    for (size_t i = 0; i < cancel->size(); ++i) {
      Result<CancelOrder> c = DecodeCancelOrder((*cancel)[i], Index("cancel", i));
      if (!c.ok()) {
        w.rejected.push_back({Index("cancel", i), 0, 0, 1, 0, c.status().message()});
        continue;
      }
      w.cancel.push_back(*c);
    }
  }
  if (logs != nullptr) {
    for (size_t i = 0; i < logs->size(); ++i) {
      LogRequest l;
      JsonFields lf((*logs)[i], Index("logs", i), kLenient);
      lf.Required("id", &l.id, 1);
      lf.Required("path", &l.path);
      lf.Optional("offset", &l.offset, 0);
      lf.Optional("max_bytes", &l.max_bytes, 0, 1 << 20);
      if (Status s = lf.Finish(); !s.ok()) {
        w.rejected.push_back({Index("logs", i), 0, 0, 1, 0, s.message()});
        continue;
      }
      w.logs.push_back(std::move(l));
    }
  }
  if (exec != nullptr) {
    for (size_t i = 0; i < exec->size(); ++i) {
      ExecRequest e;
      JsonFields ef((*exec)[i], Index("exec", i), kLenient);
      ef.Required("id", &e.id, 1);
      ef.Required("job_id", &e.job_id, 1);
      ef.Optional("attempt", &e.attempt, 0);
      ef.Optional("task_index", &e.task_index, 0, kMaxTasks - 1);
      ef.Optional("argv", &e.argv);
      ef.Optional("master_port", &e.master_port, 0, 65535);
      ef.Optional("tty", &e.tty);
      ef.Optional("stdin", &e.stdin_open);
      ef.Optional("rows", &e.rows, 0, 10000);
      ef.Optional("cols", &e.cols, 0, 10000);
      Result<std::map<std::string, std::string>> env =
          TerminalEnvFromJson(ef.Member("env"), Index("exec", i) + ".env");
      if (env.ok()) e.env = std::move(*env);
      Status s = env.ok() ? ef.Finish() : env.status();
      if (s.ok() && (e.argv.empty() || e.argv.size() > kMaxArgs)) {
        s = Status::InvalidArgument(Index("exec", i) + ".argv: 1.." + std::to_string(kMaxArgs) +
                                    " arguments");
      }
      if (!s.ok()) {
        w.rejected.push_back({Index("exec", i), e.job_id, e.task_index, 1, e.attempt, s.message()});
        continue;
      }
      w.exec.push_back(std::move(e));
    }
  }
  return w;
}

OrderedJson EncodeEventBatch(const EventBatch& b) {
  OrderedJson j;
  j["node"] = b.node;
  OrderedJson events = OrderedJson::array();
  for (const Event& e : b.events) events.push_back(EncodeEvent(e));
  j["events"] = std::move(events);
  if (!b.exec.empty()) {
    OrderedJson exec = OrderedJson::array();
    for (const ExecReport& r : b.exec) exec.push_back(EncodeExecReport(r));
    j["exec"] = std::move(exec);
  }
  return j;
}

Result<EventBatch> DecodeEventBatch(const Json& j) {
  EventBatch b;
  JsonFields f(j, "", kLenient);
  f.Optional("node", &b.node);
  const Json* events = f.Array("events");
  const Json* exec = f.Array("exec");
  GP_RETURN_IF_ERROR(f.Finish());
  if (events != nullptr) {
    for (size_t i = 0; i < events->size(); ++i) {
      GP_ASSIGN_OR_RETURN(Event e, DecodeEvent((*events)[i], Index("events", i)));
      b.events.push_back(std::move(e));
    }
  }
  if (exec != nullptr) {
    for (size_t i = 0; i < exec->size(); ++i) {
      GP_ASSIGN_OR_RETURN(ExecReport r, DecodeExecReport((*exec)[i], Index("exec", i)));
      b.exec.push_back(std::move(r));
    }
  }
  return b;
}

OrderedJson EncodeExecInputItem(const ExecInputItem& item) {
  OrderedJson j;
  j["seq"] = item.seq;
  if (!item.data.empty()) j["data"] = Base64Encode(item.data);
  if (item.eof) j["eof"] = true;
  if (item.rows > 0 && item.cols > 0) {
    j["rows"] = item.rows;
    j["cols"] = item.cols;
  }
  if (item.signal > 0) j["signal"] = item.signal;
  return j;
}

Result<ExecInputItem> DecodeExecInputItem(const Json& j, const std::string& path) {
  ExecInputItem item;
  JsonFields f(j, path, kLenient);
  f.Required("seq", &item.seq, 1);
  f.Optional("eof", &item.eof);
  f.Optional("rows", &item.rows, 0, 10000);
  f.Optional("cols", &item.cols, 0, 10000);
  f.Optional("signal", &item.signal, 0, 64);
  GP_RETURN_IF_ERROR(f.Finish());
  GP_RETURN_IF_ERROR(DecodeBytes(j, "data", path, kMaxExecChunk, "; send it in parts", &item.data));
  if ((item.rows > 0) != (item.cols > 0)) {
    return Status::InvalidArgument(path + ": give rows and cols together (the terminal size)");
  }
  return item;
}

OrderedJson EncodeExecInput(const ExecInput& in) {
  OrderedJson items = OrderedJson::array();
  for (const ExecInputItem& i : in.items) items.push_back(EncodeExecInputItem(i));
  OrderedJson j;
  j["items"] = std::move(items);
  j["hangup"] = in.hangup;
  return j;
}

Result<ExecInput> DecodeExecInput(const Json& j) {
  ExecInput in;
  JsonFields f(j, "input", kLenient);
  const Json* items = f.Array("items");
  f.Optional("hangup", &in.hangup);
  GP_RETURN_IF_ERROR(f.Finish());
  if (items != nullptr) {
    for (size_t i = 0; i < items->size(); ++i) {
      GP_ASSIGN_OR_RETURN(ExecInputItem item, DecodeExecInputItem((*items)[i], Index("items", i)));
      in.items.push_back(std::move(item));
    }
  }
  return in;
}

OrderedJson EncodeExecOutput(const ExecOutput& out) {
  OrderedJson j;
  j["stdout_offset"] = out.stdout_offset;
  if (!out.stdout_data.empty()) j["stdout"] = Base64Encode(out.stdout_data);
  j["stderr_offset"] = out.stderr_offset;
  if (!out.stderr_data.empty()) j["stderr"] = Base64Encode(out.stderr_data);
  if (out.eof) j["eof"] = true;
  return j;
}

Result<ExecOutput> DecodeExecOutput(const Json& j) {
  ExecOutput out;
  JsonFields f(j, "output", kLenient);
  f.Optional("stdout_offset", &out.stdout_offset, 0);
  f.Optional("stderr_offset", &out.stderr_offset, 0);
  f.Optional("eof", &out.eof);
  GP_RETURN_IF_ERROR(f.Finish());
  GP_RETURN_IF_ERROR(
      DecodeBytes(j, "stdout", "output", kMaxExecChunk, "; send it in parts", &out.stdout_data));
  GP_RETURN_IF_ERROR(
      DecodeBytes(j, "stderr", "output", kMaxExecChunk, "; send it in parts", &out.stderr_data));
  return out;
}

OrderedJson EncodeExecOutputAck(const ExecOutputAck& ack) {
  return {{"stdout_end", ack.stdout_end},
          {"stderr_end", ack.stderr_end},
          {"full", ack.full},
          {"hangup", ack.hangup}};
}

Result<ExecOutputAck> DecodeExecOutputAck(const Json& j) {
  ExecOutputAck ack;
  JsonFields f(j, "output answer", kLenient);
  f.Optional("stdout_end", &ack.stdout_end, 0);
  f.Optional("stderr_end", &ack.stderr_end, 0);
  f.Optional("full", &ack.full);
  f.Optional("hangup", &ack.hangup);
  GP_RETURN_IF_ERROR(f.Finish());
  return ack;
}

namespace {

constexpr size_t kMaxTelemetryJobs = 64;
constexpr size_t kMaxTelemetryProcesses = 1024;
constexpr int64_t kMaxMib = int64_t{1} << 40;  // an exbibyte of GPU memory

// An optional integer: left unset when absent or null.
void OptionalInt64(JsonFields& f, const Json& j, std::string_view key, std::optional<int64_t>* out,
                   int64_t min, int64_t max) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    f.Member(key);  // known, and absent
    return;
  }
  int64_t v = 0;
  f.Optional(key, &v, min, max);
  if (f.ok()) *out = v;
}

// An optional number in [min, max].
void OptionalNumber(JsonFields& f, std::string_view key, std::optional<double>* out, double min,
                    double max) {
  std::optional<double> v;
  f.Optional(key, &v);
  if (!f.ok() || !v) return;
  if (!(*v >= min && *v <= max)) {
    f.Fail(key, "expected a number in " + StrFormat("%g..%g", min, max));
    return;
  }
  *out = v;
}

template <typename T>
void PutOptional(OrderedJson& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

Result<GpuTelemetry> DecodeGpuTelemetry(const Json& j, const std::string& path) {
  if (!j.is_object()) {
    return Status::InvalidArgument(path + ": expected an object, found " +
                                   std::string(JsonTypeName(j)));
  }
  GpuTelemetry g;
  JsonFields f(j, path, kLenient);
  f.Required("index", &g.index, 0, 1 << 20);
  f.Optional("uuid", &g.uuid);
  f.Required("at_ms", &g.at_ms, 0);
  OptionalNumber(f, "util_pct", &g.util_pct, 0, 100);
  OptionalInt64(f, j, "mem_used_mib", &g.mem_used_mib, 0, kMaxMib);
  OptionalInt64(f, j, "mem_total_mib", &g.mem_total_mib, 0, kMaxMib);
  OptionalNumber(f, "power_w", &g.power_w, 0, 1e5);
  OptionalNumber(f, "temp_c", &g.temp_c, -273, 1000);
  OptionalInt64(f, j, "xid_errors", &g.xid_errors, 0, INT64_MAX);
  OptionalInt64(f, j, "xid_count", &g.xid_count, 0, INT64_MAX);
  OptionalInt64(f, j, "ecc_uncorrected", &g.ecc_uncorrected, 0, INT64_MAX);
  const Json* jobs = f.Array("jobs");
  const Json* procs = f.Array("processes");
  GP_RETURN_IF_ERROR(f.Finish());
  GP_RETURN_IF_ERROR(DecodeHardwareHealth(j, path, &g.hw));
  if (jobs != nullptr) {
    if (jobs->size() > kMaxTelemetryJobs) {
      return Status::InvalidArgument(path + ".jobs: more than " +
                                     std::to_string(kMaxTelemetryJobs) + " entries");
    }
    for (size_t i = 0; i < jobs->size(); ++i) {
      const std::string p = Index(path + ".jobs", i);
      if (!(*jobs)[i].is_object()) return Status::InvalidArgument(p + ": expected an object");
      TelemetryJob t;
      JsonFields jf((*jobs)[i], p, kLenient);
      jf.Required("job_id", &t.job_id, 1);
      jf.Optional("gpu_milli", &t.gpu_milli, 1, 1000);
      GP_RETURN_IF_ERROR(jf.Finish());
      g.jobs.push_back(t);
    }
  }
  if (procs != nullptr) {
    if (procs->size() > kMaxTelemetryProcesses) {
      return Status::InvalidArgument(path + ".processes: more than " +
                                     std::to_string(kMaxTelemetryProcesses) + " entries");
    }
    for (size_t i = 0; i < procs->size(); ++i) {
      const std::string p = Index(path + ".processes", i);
      const Json& pj = (*procs)[i];
      if (!pj.is_object()) return Status::InvalidArgument(p + ": expected an object");
      TelemetryProcess t;
      JsonFields pf(pj, p, kLenient);
      pf.Required("pid", &t.pid, 1, INT32_MAX);
      pf.Optional("job_id", &t.job_id, 0);
      OptionalInt64(pf, pj, "used_mib", &t.used_mib, 0, kMaxMib);
      OptionalNumber(pf, "util_pct", &t.util_pct, 0, 100);
      GP_RETURN_IF_ERROR(pf.Finish());
      g.processes.push_back(t);
    }
  }
  return g;
}

}  // namespace

OrderedJson EncodeTelemetryBatch(const TelemetryBatch& b) {
  OrderedJson samples = OrderedJson::array();
  for (const GpuTelemetry& g : b.samples) {
    OrderedJson j;
    j["index"] = g.index;
    if (!g.uuid.empty()) j["uuid"] = g.uuid;
    j["at_ms"] = g.at_ms;
    PutOptional(j, "util_pct", g.util_pct);
    PutOptional(j, "mem_used_mib", g.mem_used_mib);
    PutOptional(j, "mem_total_mib", g.mem_total_mib);
    PutOptional(j, "power_w", g.power_w);
    PutOptional(j, "temp_c", g.temp_c);
    PutOptional(j, "xid_errors", g.xid_errors);
    PutOptional(j, "xid_count", g.xid_count);
    PutOptional(j, "ecc_uncorrected", g.ecc_uncorrected);
    EncodeHardwareHealth(g.hw, &j);
    if (!g.jobs.empty()) {
      OrderedJson jobs = OrderedJson::array();
      for (const TelemetryJob& t : g.jobs) {
        jobs.push_back({{"job_id", t.job_id}, {"gpu_milli", t.gpu_milli}});
      }
      j["jobs"] = std::move(jobs);
    }
    if (!g.processes.empty()) {
      OrderedJson procs = OrderedJson::array();
      for (const TelemetryProcess& p : g.processes) {
        OrderedJson pj = {{"pid", p.pid}};
        if (p.job_id != 0) pj["job_id"] = p.job_id;
        PutOptional(pj, "used_mib", p.used_mib);
        PutOptional(pj, "util_pct", p.util_pct);
        procs.push_back(std::move(pj));
      }
      j["processes"] = std::move(procs);
    }
    samples.push_back(std::move(j));
  }
  OrderedJson out = {{"node", b.node}, {"samples", std::move(samples)}};
  if (b.health) {
    const HealthReport& h = *b.health;
    OrderedJson gpus = OrderedJson::array();
    for (const HealthReportGpu& g : h.gpus)
      gpus.push_back({{"index", g.index}, {"reason", g.reason}});
    out["health"] = {{"at_ms", h.at_ms},
                     {"passed", h.passed},
                     {"node_reason", h.node_reason},
                     {"gpus", std::move(gpus)},
                     {"output", h.output}};
  }
  if (b.disk) out["disk"] = EncodeDiskReport(*b.disk);
  return out;
}

namespace {

// Bounds on what a health verdict may carry: a node has few GPUs, and the output is for
// people (the agent keeps its end).
constexpr size_t kMaxHealthGpus = 1024;
constexpr size_t kMaxHealthText = 8192;

Result<HealthReport> DecodeHealthReport(const Json& j) {
  if (!j.is_object()) {
    return Status::InvalidArgument("health: expected an object, found " +
                                   std::string(JsonTypeName(j)));
  }
  HealthReport h;
  JsonFields f(j, "health", kLenient);
  f.Optional("at_ms", &h.at_ms);
  f.Optional("passed", &h.passed);
  f.Optional("node_reason", &h.node_reason);
  f.Optional("output", &h.output);
  const Json* gpus = f.Array("gpus");
  GP_RETURN_IF_ERROR(f.Finish());
  if (h.node_reason.size() > kMaxHealthText || h.output.size() > kMaxHealthText) {
    return Status::InvalidArgument("health: node_reason and output hold at most " +
                                   std::to_string(kMaxHealthText) + " bytes each");
  }
  if (gpus == nullptr) return h;
  if (gpus->size() > kMaxHealthGpus) {
    return Status::InvalidArgument("health.gpus: more than " + std::to_string(kMaxHealthGpus));
  }
  for (size_t i = 0; i < gpus->size(); ++i) {
    HealthReportGpu g;
    JsonFields gf((*gpus)[i], Index("health.gpus", i), kLenient);
    gf.Required("index", &g.index, 0, 4095);
    gf.Optional("reason", &g.reason);
    GP_RETURN_IF_ERROR(gf.Finish());
    if (g.reason.size() > kMaxHealthText) {
      return Status::InvalidArgument(Index("health.gpus", i) + ".reason: too long");
    }
    h.gpus.push_back(std::move(g));
  }
  return h;
}

}  // namespace

Result<TelemetryBatch> DecodeTelemetryBatch(const Json& j) {
  if (!j.is_object()) {
    return Status::InvalidArgument("expected a JSON object (a telemetry batch), found " +
                                   std::string(JsonTypeName(j)));
  }
  TelemetryBatch b;
  JsonFields f(j, "", kLenient);
  f.Optional("node", &b.node);
  const Json* samples = f.Array("samples");
  const Json* health = f.Member("health");
  const Json* disk = f.Member("disk");
  GP_RETURN_IF_ERROR(f.Finish());
  if (health != nullptr && !health->is_null()) {
    GP_ASSIGN_OR_RETURN(HealthReport h, DecodeHealthReport(*health));
    b.health = std::move(h);
  }
  if (disk != nullptr && !disk->is_null()) {
    GP_ASSIGN_OR_RETURN(DiskReport d, DecodeDiskReport(*disk));
    b.disk = std::move(d);
  }
  if (samples == nullptr) return b;
  if (samples->size() > kMaxTelemetrySamples) {
    return Status::InvalidArgument("samples: more than " + std::to_string(kMaxTelemetrySamples) +
                                   " in one batch; send them in several");
  }
  for (size_t i = 0; i < samples->size(); ++i) {
    GP_ASSIGN_OR_RETURN(GpuTelemetry g, DecodeGpuTelemetry((*samples)[i], Index("samples", i)));
    b.samples.push_back(std::move(g));
  }
  return b;
}

}  // namespace gpupool::protocol
