// Jobs: submission, the queue, one job, cancel (of a job or a whole array), hold and
// release, and logs (read from the node that ran the task, log_relay.h).
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "common/strings.h"
#include "controller/api/handlers.h"
#include "controller/environments.h"
#include "controller/job_lifecycle.h"
#include "controller/telemetry_service.h"
#include "jobs/job_json.h"
#include "jobs/job_sort.h"
#include "jobs/job_validation.h"

namespace gpupool::controller::api {
namespace {

constexpr size_t kMaxLogChunk = 1 << 20;

struct LogRead {
  std::string data;
  int64_t size = 0;    // the file's size when read
  std::string source;  // "node NAME" or "local"
  bool read = false;   // the file was there and read: `size` is its size
};

// Bytes from `offset` of a log file on this machine's disk. The path came from an agent:
// only a regular file (no symbolic link) that belongs to the job's user is read, so a
// compromised node cannot make the controller read its host's files (/etc/shadow) as root.
LogRead ReadLocalLog(const std::string& path, int64_t offset, uint32_t owner_uid) {
  LogRead out;
  out.source = "local";
  if (path.empty() || path.front() != '/') return out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return out;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (owner_uid != 0 && st.st_uid != owner_uid)) {
    ::close(fd);
    return out;
  }
  out.size = st.st_size;
  out.read = true;
  if (out.size > offset) {
    out.data.resize(static_cast<size_t>(std::min<int64_t>(out.size - offset, kMaxLogChunk)));
    const ssize_t n = ::pread(fd, out.data.data(), out.data.size(), offset);
    out.data.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  ::close(fd);
  return out;
}

// The node that ran the task (`node`) has its log files: while that node's agent polls,
// it sends the bytes (log_relay.h). A node that is gone, or that does not answer, leaves
// this machine's disk, which is where they are in a single-machine pool. When neither has
// the file the answer is an error, never "no more bytes": the log of an ended job would
// look complete when it was not (issue 25).
Result<LogRead> ReadJobLog(Controller* controller, const jobs::Job& job, const std::string& path,
                           int64_t offset, const std::string& node) {
  if (path.empty()) return ReadLocalLog(path, offset, job.uid);  // no log (not started)
  std::string why = node.empty() ? std::string() : "node " + node + " is down";
  bool gone = false;  // the node says the file is not there: no retry will find it
  if (!node.empty() && controller->NodeUp(node)) {
    Result<LogChunk> chunk =
        controller->log_relay().Fetch(node, path, offset, kMaxRelayedChunk, kRelayTimeout);
    if (chunk.ok()) return LogRead{std::move(chunk->data), chunk->size, "node " + node, true};
    spdlog::debug("log of job {} from node {}: {}", job.id, node, chunk.status().message());
    why = chunk.status().message();
    // Before RUNNING the node may not have made the file yet.
    gone = chunk.status().code() == StatusCode::kNotFound &&
           (job.state == jobs::JobState::kRunning || jobs::IsTerminal(job.state));
  }
  LogRead local = ReadLocalLog(path, offset, job.uid);
  if (local.read || node.empty()) return local;
  if (gone) {
    return Status::NotFound("cannot read the log '" + path + "': " + why + " (node " + node +
                            "), and this machine has no copy: it was deleted or moved");
  }
  return Status::Unavailable("cannot read the log '" + path + "' from byte " +
                             std::to_string(offset) + ": " + why +
                             ", and this machine has no copy; try again");
}

const char* const kServerSetFields[] = {"id",
                                        "user",
                                        "uid",
                                        "gid",
                                        "state",
                                        "submit_time_us",
                                        "placed_time_us",
                                        "launch_failures",
                                        "start_time_us",
                                        "end_time_us",
                                        "exit_code",
                                        "signal",
                                        "placement",
                                        "tasks",
                                        "master_port",
                                        "pending_reason",
                                        "reason",
                                        "attempt",
                                        "cancel_requested",
                                        "held_by",
                                        "array_id",
                                        "array_index",
                                        "array_max_running",
                                        "held_by_admin",
                                        "command_ended",
                                        "command_exit_code",
                                        "command_signal",
                                        "stdout_path",
                                        "stderr_path",
                                        "needs",
                                        "env_dir",
                                        "preempted_by",
                                        "preempted_by_name",
                                        "preempt_deadline_s",
                                        "checkpoint_done",
                                        "preemptions",
                                        "preempted_gpu_hours",
                                        "preempted_attempts",
                                        "earlier_attempts",
                                        "fence_node",
                                        "fence_until_us",
                                        "fences"};

// The scheduler's start plan as readers attach it (Controller::StartEstimates, StartNotes).
struct StartPlanView {
  std::map<int64_t, int64_t> estimates;
  std::map<int64_t, std::string> notes;
  explicit StartPlanView(Controller* c) : estimates(c->StartEstimates()), notes(c->StartNotes()) {}
};

// Each of `job`'s dependencies named as its user names it (`job_name`): an array's element
// other than its first as ARRAY_INDEX (12_3); the first's id is the array's, so names the
// array, and a job the store no longer has keeps its id.
void AddDependencyNames(const ApiContext& ctx, const jobs::Job& job, OrderedJson& j) {
  OrderedJson& deps = j["dependencies"];
  for (size_t i = 0; i < job.dependencies.size() && i < deps.size(); ++i) {
    const int64_t id = job.dependencies[i].job_id;
    Result<jobs::Job> d = ctx.store->GetJob(id);
    const bool element = d.ok() && d->array_id != 0 && d->array_id != id;
    deps[i]["job_name"] = element ? lifecycle::UserJobId(*d) : std::to_string(id);
  }
}

// A job as the API shows it: jobs::JobToJson (its dependencies named), for a pending job the
// scheduler's planned start when it has one, else why not, and once sampled its gpu_util.
OrderedJson JobJson(const ApiContext& ctx, const jobs::Job& job, const StartPlanView& plan) {
  const TelemetryHub& hub = ctx.telemetry->hub();
  OrderedJson j = jobs::JobToJson(job);
  if (!job.dependencies.empty()) AddDependencyNames(ctx, job, j);
  if (job.state == jobs::JobState::kPending) {
    if (auto e = plan.estimates.find(job.id); e != plan.estimates.end()) {
      j["start_estimate_us"] = e->second;
    } else if (auto n = plan.notes.find(job.id); n != plan.notes.end()) {
      j["start_estimate_note"] = n->second;
    } else {
      j["start_estimate_note"] = "not in the plan, which covers the first " +
                                 std::to_string(kStartPlanJobs) + " pending jobs that may start";
    }
  }
  std::optional<JobGpuUtil> u = hub.Job(job.id);
  if (!u) return j;
  const bool idle = u->idle && job.state == jobs::JobState::kRunning;
  OrderedJson g = {{"mean_pct", u->mean_pct},
                   {"peak_pct", u->peak_pct},
                   {"peak_mem_mib", u->peak_mem_mib},
                   {"used_gpu_hours", u->used_gpu_hours},
                   {"idle", idle}};
  if (idle) {
    g["idle_since_ms"] = u->idle_since_ms;
    if (hub.options().idle_action == "warn") {
      g["warning"] = "the GPUs of this job sit idle (below " + ctx.telemetry->IdleThreshold() +
                     "); the pool's idle policy warns about such jobs";
    }
  }
  j["gpu_util"] = std::move(g);
  return j;
}

// Slurm's singleton: an after-any dependency on each job of the caller's that is still
// queued or running and has the job's name (the default name when it gives none).
Status AddSingletonDependencies(const ApiContext& ctx, const Caller& caller, jobs::Job* job) {
  const std::string name = job->name.empty() ? jobs::DefaultJobName(*job) : job->name;
  store::JobFilter f;
  f.user = caller.user;
  f.active_only = true;
  GP_ASSIGN_OR_RETURN(std::vector<jobs::Job> active, ctx.controller->List(f, caller));
  for (const jobs::Job& other : active) {
    if (other.name != name) continue;
    const jobs::Dependency d{other.id, jobs::Dependency::Kind::kAfterAny};
    if (std::find(job->dependencies.begin(), job->dependencies.end(), d) ==
        job->dependencies.end()) {
      job->dependencies.push_back(d);
    }
  }
  if (job->dependencies.size() > jobs::kMaxDependencies) {
    return Status::InvalidArgument(
        "singleton: " + std::to_string(job->dependencies.size()) +
        " dependencies with the jobs named '" + name + "' still queued or running, over " +
        std::to_string(jobs::kMaxDependencies) + "; wait for some of them to end");
  }
  return Status::Ok();
}

// sort=FIELD[,-FIELD] and order=asc|desc (jobs/job_sort.h): the order of the whole list,
// which limit and offset then page through. order alone sorts by id; neither: the
// listing's own order (limited lists newest first, others oldest first).
Result<std::vector<jobs::JobSortKey>> ListOrder(const net::HttpRequest& r) {
  const std::string order = r.Query("order");
  if (!order.empty() && order != "asc" && order != "desc") {
    return Status::InvalidArgument("order: unknown order '" + order + "'; use asc or desc");
  }
  std::string text = r.Query("sort");
  if (text.empty() && r.query.contains("sort")) {
    return Status::InvalidArgument("sort: give a field, one of " + jobs::JobSortFieldList());
  }
  if (text.empty() && !order.empty()) text = "id";
  if (text.empty()) return std::vector<jobs::JobSortKey>{};
  return jobs::ParseJobSort(text, order == "desc", "sort");
}

// Names of --nodelist / --exclude that no node has: accepted (a node may join later, and
// a list kept for several pools stays usable; a --nodelist naming no node at all was
// refused by Submit), but said, as each may be a typo. The first few are named, then how
// many more: a list of thousands of names is not printed back whole.
std::vector<std::string> UnknownNodeWarnings(const ApiContext& ctx,
                                             const jobs::ResourceRequest& r) {
  constexpr size_t kNamed = 8;
  std::vector<std::string> out;
  if (r.nodelist.empty() && r.exclude.empty()) return out;
  std::set<std::string> known;
  for (const NodeView& n : ctx.controller->Nodes()) known.insert(n.name);
  size_t count = 0;
  auto unknown = [&](const std::vector<std::string>& names) {
    std::string text;
    count = 0;
    for (const std::string& n : names) {
      if (known.contains(n)) continue;
      if (++count <= kNamed) text += (text.empty() ? "" : ", ") + n;
    }
    if (count > kNamed) text += " and " + std::to_string(count - kNamed) + " more";
    return text;
  };
  if (std::string names = unknown(r.nodelist); !names.empty()) {
    out.push_back("--nodelist " + names +
                  ": no such node in this pool (`gpupool nodes`); the job runs on the others "
                  "listed");
  }
  if (std::string names = unknown(r.exclude); !names.empty()) {
    out.push_back("--exclude " + names + ": no such node in this pool (`gpupool nodes`); " +
                  (count == 1 ? "it excludes" : "they exclude") + " nothing");
  }
  return out;
}

}  // namespace

net::HttpResponse SubmitJob(const ApiContext& ctx, const Call& c) {
  const net::HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  Result<Json> body = BodyJson(r, MaxRequestBodyBytes(ctx.controller->options()), 32);
  if (!body.ok()) return ErrorResponse(body.status());
  if (!body->is_object()) {
    return ErrorResponse(Status::InvalidArgument("request body: expected a JSON object"));
  }
  for (const char* f : kServerSetFields) {
    if (body->contains(f)) {
      return ErrorResponse(Status::InvalidArgument(
          std::string(f) + ": this field is set by the server; leave it out"));
    }
  }
  // `hold`: the job is stored held by its submitter (gpupool submit --hold), in the same
  // insert as the job, so no scheduling pass can start it first. A request field only:
  // the job records who holds it (held_by).
  bool hold = false;
  if (auto it = body->find("hold"); it != body->end()) {
    if (!it->is_boolean()) {
      return ErrorResponse(Status::InvalidArgument("hold: expected true or false"));
    }
    hold = it->get<bool>();
    body->erase(it);
  }
  // `singleton` (sbatch -d singleton): the job waits for every job of its user and name
  // still queued or running (an after-any dependency on each, added here).
  bool singleton = false;
  if (auto it = body->find("singleton"); it != body->end()) {
    if (!it->is_boolean()) {
      return ErrorResponse(Status::InvalidArgument("singleton: expected true or false"));
    }
    singleton = it->get<bool>();
    body->erase(it);
  }
  Result<jobs::Job> job = jobs::JobFromJson(*body, "job");
  if (!job.ok()) return ErrorResponse(job.status());
  if (hold) job->held_by = caller.user;  // the owner's own hold: the owner releases it
  if (singleton) {
    if (Status s = AddSingletonDependencies(ctx, caller, &*job); !s.ok()) return ErrorResponse(s);
  }
  // Before anything runs a tool on the job's values (podman inspects its image).
  if (Status s = jobs::ValidateSubmission(*job); !s.ok()) return ErrorResponse(s);
  // Over max-submission-bytes: 413 (ResourceExhausted), before its image is inspected,
  // and again once a named environment has added its image or directory.
  if (Status s = ctx.controller->CheckSubmissionSize(*job); !s.ok()) return ErrorResponse(s);
  // An unknown environment is 404 (the client exits 3, "not found"), not a usage error.
  if (Status s = ctx.environments->Resolve(&*job); !s.ok()) return ErrorResponse(s);
  if (Status s = ctx.controller->CheckSubmissionSize(*job); !s.ok()) return ErrorResponse(s);
  bool duplicate = false;
  Result<jobs::Job> submitted = ctx.controller->Submit(std::move(*job), caller, &duplicate);
  // Over a bound on the queue: 429, try again once jobs have started.
  if (!submitted.ok()) return ErrorOrTooMany(submitted.status());
  // A retried submission (its submit_key was used): 200 with the job it made.
  if (duplicate)
    return JsonResponse(200, {{"job", jobs::JobToJson(*submitted)}, {"duplicate", true}});
  OrderedJson answer = {{"job", jobs::JobToJson(*submitted)}};
  if (std::vector<std::string> w = UnknownNodeWarnings(ctx, submitted->request); !w.empty()) {
    answer["warnings"] = w;
  }
  return JsonResponse(201, answer);
}

net::HttpResponse ListJobs(const ApiContext& ctx, const Call& c) {
  const net::HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  store::JobFilter f;
  const bool all = r.Query("all") == "1";
  if (!r.Query("user").empty()) {
    f.user = r.Query("user");
  } else if (!all || !caller.admin) {
    f.user = caller.user;
  }
  if (f.user && *f.user != caller.user && !caller.admin) {
    return ErrorResponse(Status::PermissionDenied("only admins may list other users' jobs"));
  }
  f.active_only = r.Query("active") == "1";
  if (const std::string states = r.Query("state"); !states.empty()) {
    for (const std::string& s : Split(states, ',')) {
      std::string upper = s;
      for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      auto st = jobs::ParseJobState(upper);
      if (!st) {
        return ErrorResponse(Status::InvalidArgument(
            "state: unknown state '" + s +
            "'; use PENDING, ASSIGNED, RUNNING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT or LOST"));
      }
      f.states.push_back(*st);
    }
  }
  Result<std::vector<jobs::JobSortKey>> sort = ListOrder(r);
  if (!sort.ok()) return ErrorResponse(sort.status());
  f.sort = std::move(*sort);
  const bool sorted = !f.sort.empty();
  Result<int64_t> limit = QueryInt(r, "limit", 0, 0, 100000);
  if (!limit.ok()) return ErrorResponse(limit.status());
  // offset=N skips the newest N of those that match (a page of the dashboard's queue).
  Result<int64_t> offset = QueryInt(r, "offset", 0, 0, 1'000'000);
  if (!offset.ok()) return ErrorResponse(offset.status());
  // name=A,B: only jobs of these names (squeue -n); the store knows no names, so the
  // list is cut to `limit` once they are picked.
  std::set<std::string> names;
  for (const std::string& n : Split(r.Query("name"), ',')) {
    if (!n.empty()) names.insert(n);
  }
  // `name=` with no name is no "any name": a client that sent an unset variable would
  // list (and `cancel -n` cancel) every job.
  if (r.query.contains("name") && names.empty()) {
    return ErrorResponse(
        Status::InvalidArgument("name: no job name given; leave name out to list every name"));
  }
  f.limit = *limit > 0 && names.empty() ? static_cast<size_t>(*limit + *offset) : 0;
  Result<std::vector<jobs::Job>> jobs = ctx.controller->List(f, caller);
  if (!jobs.ok()) return ErrorResponse(jobs.status());
  if (!names.empty()) {
    std::erase_if(*jobs, [&](const jobs::Job& j) { return !names.contains(j.name); });
    if (*limit > 0 && !sorted) {  // as the store answers a limited list: newest first
      std::reverse(jobs->begin(), jobs->end());
      jobs->resize(std::min(jobs->size(), static_cast<size_t>(*limit + *offset)));
    }
  }
  if (sorted) {  // the whole list in its order: skip `offset`, keep `limit`
    jobs->erase(jobs->begin(),
                jobs->begin() + std::min(jobs->size(), static_cast<size_t>(*offset)));
    if (*limit > 0) jobs->resize(std::min(jobs->size(), static_cast<size_t>(*limit)));
  } else if (*offset > 0) {
    if (*limit == 0) {  // unlimited lists come oldest first: the newest N go
      jobs->resize(jobs->size() > static_cast<size_t>(*offset)
                       ? jobs->size() - static_cast<size_t>(*offset)
                       : 0);
    } else {
      jobs->erase(jobs->begin(),
                  jobs->begin() + std::min(jobs->size(), static_cast<size_t>(*offset)));
    }
  }
  const StartPlanView plan(ctx.controller);
  OrderedJson list = OrderedJson::array();
  for (const jobs::Job& j : *jobs) {
    // A list leaves out each job's bulk, its environment and script (an exported shell
    // environment is kilobytes a job): GET /v1/jobs/ID has them.
    OrderedJson one = JobJson(ctx, j, plan);
    one.erase("env");
    one.erase("script");
    list.push_back(std::move(one));
  }
  OrderedJson answer;
  answer["jobs"] = std::move(list);
  // all=1 from a user who is no admin lists their own jobs; the answer says so, so the
  // client can tell them instead of passing their jobs off as everyone's.
  if (all && !caller.admin) answer["all_refused"] = true;
  return JsonResponse(200, answer);
}

net::HttpResponse GetJob(const ApiContext& ctx, const Call& c) {
  Result<jobs::Job> j = ctx.controller->Get(c.id, c.caller);
  if (!j.ok()) return ErrorResponse(j.status());
  OrderedJson job = JobJson(ctx, *j, StartPlanView(ctx.controller));
  if (std::string mode = ctx.controller->GpuEnforcement(*j); !mode.empty()) {
    job["gpu_enforcement"] = std::move(mode);
  }
  return JsonResponse(200, {{"job", std::move(job)}});
}

// The body of a cancel: empty, `{}`, or from `gpupool alloc` the end of its command
// (`{"exit_code": N}` or `{"signal": N}`).
struct CancelBody {
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool allocation_ended() const { return exit_code || signal; }
};

Result<CancelBody> ParseCancelBody(const net::HttpRequest& r) {
  CancelBody out;
  GP_ASSIGN_OR_RETURN(Json body, BodyJson(r, 1 << 12, 4, /*empty_is_object=*/true));
  if (!body.is_object()) {
    return Status::InvalidArgument("request body: expected a JSON object, e.g. {}");
  }
  JsonFields f(body, "");
  f.Optional("exit_code", &out.exit_code, 0, 255);
  f.Optional("signal", &out.signal, 1, 64);
  GP_RETURN_IF_ERROR(f.Finish());
  if (out.exit_code && out.signal) {
    return Status::InvalidArgument("exit_code, signal: give one, how the command ended");
  }
  return out;
}

// POST /v1/jobs/ID/cancel: one job. The id of an array (its first element's) cancels
// every element still queued or running; ARRAY_INDEX (or ?element=INDEX, from older
// clients) one element. From `gpupool alloc`, a body with the exit code (or signal) of
// its command ends the allocation as the command ended (Controller::EndAllocation).
net::HttpResponse CancelJobOrArray(const ApiContext& ctx, const Call& c) {
  const net::HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  Result<CancelBody> body = ParseCancelBody(r);
  if (!body.ok()) return ErrorResponse(body.status());
  int64_t id = c.id;
  bool element = c.element >= 0;
  if (!element && !r.Query("element").empty()) {
    Result<int64_t> index = QueryInt(r, "element", 0, 0, jobs::kMaxArrayIndex);
    if (!index.ok()) return ErrorResponse(index.status());
    Result<int64_t> e = ctx.controller->ArrayElementId(id, static_cast<int>(*index), caller);
    if (!e.ok()) return ErrorResponse(e.status());
    id = *e;
    element = true;
  }
  if (body->allocation_ended()) {
    Result<jobs::Job> j = ctx.controller->EndAllocation(id, caller, body->exit_code, body->signal);
    if (!j.ok()) return ErrorResponse(j.status());
    return JsonResponse(200, {{"job", jobs::JobToJson(*j)}});
  }
  if (!element) {
    Result<jobs::Job> j = ctx.controller->Get(id, caller);
    if (!j.ok()) return ErrorResponse(j.status());
    if (j->array_id == id) {
      Result<ArrayCancelled> a = ctx.controller->CancelArray(id, caller);
      if (!a.ok()) return ErrorResponse(a.status());
      return JsonResponse(200, {{"job", jobs::JobToJson(a->head)},
                                {"array_cancelled", a->queued + a->running + a->stopping},
                                {"array",
                                 {{"id", id},
                                  {"elements", a->elements},
                                  {"queued", a->queued},
                                  {"running", a->running},
                                  {"stopping", a->stopping}}}});
    }
  }
  Result<jobs::Job> j = ctx.controller->Cancel(id, caller);
  if (!j.ok()) return ErrorResponse(j.status());
  return JsonResponse(200, {{"job", jobs::JobToJson(*j)}});
}

// POST /v1/jobs/ID/signal {"signal": N, "batch": B}: gpupool cancel --signal. The id of
// an array (its first element's) signals every running element; ARRAY_INDEX one element.
net::HttpResponse SignalJob(const ApiContext& ctx, const Call& c) {
  Result<Json> body = BodyJson(c.r, 1 << 12, 4, /*empty_is_object=*/true);
  if (!body.ok()) return ErrorResponse(body.status());
  if (!body->is_object()) {
    return ErrorResponse(
        Status::InvalidArgument(R"(request body: expected a JSON object, e.g. {"signal": 10})"));
  }
  int sig = 0;
  bool batch = false;
  JsonFields f(*body, "");
  f.Required("signal", &sig, 1, 64);
  f.Optional("batch", &batch);
  if (Status st = f.Finish(); !st.ok()) return ErrorResponse(st);
  Result<SignalSent> sent =
      ctx.controller->SignalJob(c.id, c.caller, sig, batch, /*whole_array=*/c.element < 0);
  if (!sent.ok()) return ErrorResponse(sent.status());
  return JsonResponse(200, {{"signal", sig},
                            {"batch", batch},
                            {"array", sent->array},
                            {"jobs", sent->jobs},
                            {"tasks", sent->tasks},
                            {"missed", sent->missed},
                            {"unconfirmed", sent->unconfirmed}});
}

namespace {

// `changed`: false when the job was held already (hold) or not held (release): the
// client says so instead of "Released".
net::HttpResponse HoldOrRelease(const ApiContext& ctx, const Call& c, bool hold) {
  bool changed = true;
  Result<jobs::Job> j = ctx.controller->Hold(c.id, c.caller, hold, &changed);
  if (!j.ok()) return ErrorResponse(j.status());
  return JsonResponse(200, {{"job", jobs::JobToJson(*j)}, {"changed", changed}});
}

}  // namespace

net::HttpResponse HoldJob(const ApiContext& ctx, const Call& c) {
  return HoldOrRelease(ctx, c, /*hold=*/true);
}

net::HttpResponse ReleaseJob(const ApiContext& ctx, const Call& c) {
  return HoldOrRelease(ctx, c, /*hold=*/false);
}

// POST /v1/jobs/ID/checkpoint-done: the body's optional `task` is the task that says it (the
// client run inside it); without one, the whole job (docs/preemption.md).
net::HttpResponse CheckpointDone(const ApiContext& ctx, const Call& c) {
  std::optional<int> task;
  {
    Result<Json> body = BodyJson(c.r, 1 << 12, 4, /*empty_is_object=*/true);
    if (!body.ok()) return ErrorResponse(body.status());
    if (!body->is_object()) {
      return ErrorResponse(
          Status::InvalidArgument("request body: expected a JSON object, e.g. {\"task\": 1}"));
    }
    JsonFields f(*body, "");
    f.Optional("task", &task);
    if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  }
  Result<jobs::Job> j = ctx.controller->CheckpointDone(c.id, c.caller, task);
  if (!j.ok()) return ErrorResponse(j.status());
  return JsonResponse(200, {{"job", jobs::JobToJson(*j)}});
}

net::HttpResponse AllocAlive(const ApiContext& ctx, const Call& c) {
  Result<int64_t> timeout_s = ctx.controller->AllocAlive(c.id, c.caller);
  if (!timeout_s.ok()) return ErrorResponse(timeout_s.status());
  // The pool's stop grace: `gpupool alloc` gives its revoked COMMAND as long after the
  // hangup as the allocation's tasks had after their SIGTERM.
  return JsonResponse(200, {{"job_id", c.id},
                            {"client_timeout_s", *timeout_s},
                            {"kill_wait_s", ctx.controller->options().kill_wait_s}});
}

net::HttpResponse ReadJobLogs(const ApiContext& ctx, const Call& c) {
  const net::HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  const int64_t id = c.id;
  const std::string stream = r.Query("stream", "stdout");
  if (stream != "stdout" && stream != "stderr") {
    return ErrorResponse(Status::InvalidArgument("stream: use stdout or stderr"));
  }
  Result<int64_t> offset = QueryInt(r, "offset", 0, 0, INT64_MAX);
  Result<int64_t> wait_ms = QueryInt(r, "wait_ms", 0, 0, 60'000);
  Result<int64_t> task = QueryInt(r, "task", 0, 0, 4095);
  if (!offset.ok()) return ErrorResponse(offset.status());
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  if (!task.ok()) return ErrorResponse(task.status());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(*wait_ms);
  while (true) {
    Result<jobs::Job> job = ctx.controller->Get(id, caller);
    if (!job.ok()) return ErrorResponse(job.status());
    const auto t = static_cast<size_t>(*task);
    if (t > 0 && t >= static_cast<size_t>(job->request.tasks)) {
      return ErrorResponse(Status::InvalidArgument("task: job " + lifecycle::UserJobId(*job) +
                                                   " has tasks 0.." +
                                                   std::to_string(job->request.tasks - 1)));
    }
    std::string path = stream == "stdout" ? job->stdout_path : job->stderr_path;
    std::string node;
    if (t < job->tasks.size()) {
      path = stream == "stdout" ? job->tasks[t].stdout_path : job->tasks[t].stderr_path;
    } else if (t > 0) {
      path.clear();  // not placed, or placed before per-task records
    }
    if (t < job->placement.size()) node = job->placement[t].node;
    if (path == "/dev/null") {
      // Nothing was kept: no node has it, and waiting would never find it (issue: "try again").
      const bool own = stream == "stderr" && !job->error.empty();
      return ErrorResponse(Status::FailedPrecondition(
          "job " + lifecycle::UserJobId(*job) + "'s " + stream + " goes to /dev/null (" +
          (own ? "-e" : "-o") + " /dev/null): nothing was kept, so there is nothing to show or " +
          "follow"));
    }
    const bool ended = jobs::IsTerminal(job->state);
    Result<LogRead> got = ReadJobLog(ctx.controller, *job, path, *offset, node);
    if (!got.ok() && (ended || *wait_ms == 0 || ctx.stopping->load())) {
      // Bytes that could not be read now (a busy node, a node that is down): the caller
      // hears why, never that the log ends here.
      return ErrorResponse(got.status());
    }
    // A follower of a running job waits on, as for bytes not written yet.
    LogRead read = got.ok() ? std::move(*got) : LogRead{"", *offset, "unavailable", false};
    const int64_t next = *offset + static_cast<int64_t>(read.data.size());
    const bool eof = ended && next >= read.size;
    if (!read.data.empty() || eof || std::chrono::steady_clock::now() >= deadline) {
      net::HttpResponse resp;
      resp.content_type = "text/plain; charset=utf-8";
      resp.body = std::move(read.data);
      resp.headers["X-Gpupool-Next-Offset"] = std::to_string(next);
      resp.headers["X-Gpupool-Eof"] = eof ? "1" : "0";
      resp.headers["X-Gpupool-Log-Source"] = read.source;
      return resp;
    }
    if (ctx.stopping->load()) {
      return ErrorResponse(Status::Unavailable("the server is shutting down: follow again"));
    }
    // A relayed read costs the node a round trip: poll it less often than the disk.
    std::this_thread::sleep_for(std::chrono::milliseconds(read.source == "local" ? 50 : 250));
  }
}

}  // namespace gpupool::controller::api
