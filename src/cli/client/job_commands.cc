// `gpupool queue`, `gpupool show ID`, `gpupool cancel ID...`, `gpupool hold|release ID...`.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "cli/client/client_common.h"
#include "cli/client/json_view.h"
#include "cli/client/render.h"
#include "cli/client/submit_flags.h"
#include "common/strings.h"
#include "jobs/job.h"
#include "jobs/job_sort.h"

namespace gpupool::cli {
namespace {

// Which jobs: `queue` and `cancel` take the same filters.
struct JobSelection {
  bool all = false;
  std::string user;
  std::vector<std::string> states;
  std::vector<std::string> names;
  bool user_given = false;  // -u was given: an empty value is refused, not "no filter"
};

// An empty value is refused, never read as "no filter": `cancel -n "$NAME"` with NAME unset
// cancelled every job of the caller.
Status CheckSelection(const JobSelection& s) {
  constexpr std::string_view kUnset = " (an unset shell variable?)";
  if (s.user_given && Trim(s.user).empty()) {
    return Status::InvalidArgument("--user: the user name is empty" + std::string(kUnset) +
                                   "; give a user name");
  }
  const auto any_empty = [](const std::vector<std::string>& v) {
    return std::any_of(v.begin(), v.end(), [](const std::string& x) { return Trim(x).empty(); });
  };
  if (any_empty(s.states)) {
    return Status::InvalidArgument("--state: a state is empty" + std::string(kUnset) +
                                   "; give states as PENDING,RUNNING");
  }
  if (any_empty(s.names)) {
    return Status::InvalidArgument("--name: a job name is empty" + std::string(kUnset) +
                                   "; give job names as train,eval");
  }
  return Status::Ok();
}

// Slurm's state names and squeue's abbreviations (-t COMPLETED, -t PD) that have one
// state here; Slurm's others (COMPLETING, PREEMPTED, SUSPENDED, ...) have none.
constexpr std::pair<std::string_view, std::string_view> kSlurmStates[] = {
    {"PD", "PENDING"},          {"R", "RUNNING"}, {"CD", "SUCCEEDED"},
    {"COMPLETED", "SUCCEEDED"}, {"F", "FAILED"},  {"CA", "CANCELLED"},
    {"TO", "TIMEOUT"},          {"NF", "LOST"},   {"NODE_FAIL", "LOST"}};

// A state as --state gives it (any case, or Slurm's name) as the API spells it;
// kInvalidArgument naming it and the states there are.
Result<std::string> StateName(const std::string& raw) {
  std::string upper(Trim(raw));
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& [slurm, ours] : kSlurmStates) {
    if (upper == slurm) return std::string(ours);
  }
  if (!jobs::ParseJobState(upper)) {
    return Status::InvalidArgument(
        "--state " + raw +
        ": unknown state; use PENDING, ASSIGNED, RUNNING, SUCCEEDED, FAILED, CANCELLED, "
        "TIMEOUT or LOST (or Slurm's PD, R, CD/COMPLETED, F, CA, TO, NF/NODE_FAIL)");
  }
  return upper;
}

// The GET /v1/jobs path for a selection: without --state, the jobs still to run or
// running; kInvalidArgument naming a state that is none, or an empty value.
Result<std::string> JobListPath(const JobSelection& s) {
  GP_RETURN_IF_ERROR(CheckSelection(s));
  std::vector<std::string> query;
  std::string states;
  for (const std::string& raw : s.states) {
    GP_ASSIGN_OR_RETURN(std::string name, StateName(raw));
    states += (states.empty() ? "" : ",") + name;
  }
  query.push_back(states.empty() ? "active=1" : "state=" + net::UrlEncode(states));
  if (s.all) query.push_back("all=1");
  if (!s.user.empty()) query.push_back("user=" + net::UrlEncode(s.user));
  std::string names;
  for (const std::string& n : s.names) names += (names.empty() ? "" : ",") + n;
  if (!names.empty()) query.push_back("name=" + net::UrlEncode(names));
  std::string path = "/v1/jobs";
  for (size_t i = 0; i < query.size(); ++i) path += (i == 0 ? "?" : "&") + query[i];
  return path;
}

struct QueueState {
  ConnectionFlags conn;
  JobSelection select;
  std::string format;
  std::string sort;
  bool start = false;
  bool json = false;
};

Status RunQueue(const ClientRuntime& rt, const QueueState& s) {
  JobSelection select = s.select;
  // --start: the pending jobs and when they are planned to start (squeue --start).
  if (s.start && select.states.empty()) select.states = {"PENDING"};
  std::vector<std::string> fields = s.start ? StartQueueFields() : DefaultQueueFields();
  if (!s.format.empty()) {
    GP_ASSIGN_OR_RETURN(fields, ParseQueueFields(s.format));
  }
  GP_ASSIGN_OR_RETURN(std::string path, JobListPath(select));
  if (!s.sort.empty()) {  // the server sorts the whole list (squeue --sort)
    GP_ASSIGN_OR_RETURN(std::vector<jobs::JobSortKey> keys,
                        jobs::ParseJobSort(s.sort, false, "--sort"));
    path += "&sort=" + net::UrlEncode(jobs::JobSortText(keys));
  }
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.conn));
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Get(path));
  if (s.json) {
    PrintRaw(rt, answer.body);
  } else {
    Print(rt, RenderQueue(answer.json, rt.env.now_us(), fields));
  }
  if (GetBool(answer.json, "all_refused")) {
    *rt.env.err << "gpupool: --all lists everyone's jobs for admins only; these are your own\n";
  }
  return Status::Ok();
}

struct ShowState {
  ConnectionFlags conn;
  std::string id;
  bool json = false;
  bool script = false;  // --script: the copy of its script the job runs
};

Status RunShow(const ClientRuntime& rt, const ShowState& s) {
  GP_ASSIGN_OR_RETURN(std::string id, ParseJobRef(s.id));
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.conn));
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Get("/v1/jobs/" + id));
  if (s.script) {
    const Json& job = GetObject(answer.json, "job");
    const std::string script = GetString(job, "script");
    if (script.empty()) {
      return Status::NotFound("job " + s.id +
                              " has no script: it was submitted as a command (gpupool submit -- "
                              "CMD) or before scripts were copied");
    }
    Print(rt, script);
  } else if (s.json) {
    PrintRaw(rt, answer.body);
  } else {
    Print(rt, RenderJob(GetObject(answer.json, "job"), rt.env.now_us()));
  }
  return Status::Ok();
}

struct IdsState {
  ConnectionFlags conn;
  std::vector<std::string> ids;
};

struct CancelState {
  ConnectionFlags conn;
  std::vector<std::string> ids;
  JobSelection select;  // --user, --state, --name: instead of ids (scancel -u/-t/-n)
  // -s/--signal SIG: send it instead of cancelling (scancel --signal); -b/--batch: to the
  // main process of task 0 only; -f/--full: to every process (the default here).
  std::optional<std::string> signal;
  bool batch = false;
  bool full = false;
};

// The references of `ids` (ParseJobRefs: an array's range is one per element), in order,
// each once (`cancel 5_5 5_5` is one cancel, as scancel); kInvalidArgument for the first
// that is none.
Result<std::vector<std::string>> JobRefs(const std::vector<std::string>& ids) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& text : ids) {
    GP_ASSIGN_OR_RETURN(std::vector<std::string> refs, ParseJobRefs(text));
    for (std::string& ref : refs) {
      if (seen.insert(ref).second) out.push_back(std::move(ref));
    }
  }
  return out;
}

// Whether `message` names job `name` itself ("job 3 has already ended", "no job 3",
// "array 3 has already ended: ..."), not merely a job whose id starts the same (3_1, 31).
bool NamesJob(std::string_view message, const std::string& name) {
  for (const std::string_view word : {"job ", "array "}) {
    const std::string named = std::string(word) + name;
    for (size_t at = message.find(named); at != std::string_view::npos;
         at = message.find(named, at + 1)) {
      const size_t end = at + named.size();
      const bool word_start = at == 0 || message[at - 1] == ' ';
      const bool word_end =
          end == message.size() || (!std::isdigit(static_cast<unsigned char>(message[end])) &&
                                    message[end] != '_' && message[end] != '[');
      if (word_start && word_end) return true;
    }
  }
  return false;
}

// A failure of one of several jobs' requests, said once per job: the server's answers
// name the job already ("job 3: job 3 has already ended" said it twice); other failures
// (no server, a refused body) get "job NAME: " in front, to tell which of them failed.
Status ForJob(const Status& s, const std::string& name) {
  return NamesJob(s.message(), name) ? s : s.WithContext("job " + name);
}

// The server's "array 1 has no element 8 (it was submitted with --array 0-7)", once per
// element a range names that the array lacks (`release 1_[5-99]` of an array 0-7): kept
// and said once per array, the indices as a range ("no elements 8-99").
class MissingElements {
 public:
  // Whether `s` is such an answer (then kept).
  bool Take(const Status& s) {
    static constexpr std::string_view kHas = " has no element ";
    static constexpr std::string_view kSubmitted = " (it was submitted with --array ";
    const std::string& m = s.message();
    const size_t has = m.find(kHas);
    const size_t submitted = m.find(kSubmitted);
    if (s.code() != StatusCode::kNotFound || !m.starts_with("array ") || has == std::string::npos ||
        submitted == std::string::npos || submitted < has) {
      return false;
    }
    const size_t at = has + kHas.size();
    const std::optional<int64_t> index = ParseInt64(m.substr(at, submitted - at));
    if (!index) return false;
    indices_[{m.substr(0, has), m.substr(submitted)}].push_back(*index);
    return true;
  }
  // Says what was kept, once per array; whether there was any.
  bool Report(const ClientRuntime& rt) const {
    for (auto [array, indices] : indices_) {
      std::sort(indices.begin(), indices.end());
      std::string ranges;
      for (size_t i = 0; i < indices.size();) {
        size_t j = i;
        while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
        ranges += (ranges.empty() ? "" : ",") + std::to_string(indices[i]) +
                  (j == i ? "" : "-" + std::to_string(indices[j]));
        i = j + 1;
      }
      cli::Report(rt, Status::NotFound(array.first + " has no element" +
                                       (indices.size() == 1 ? " " : "s ") + ranges + array.second));
    }
    return !indices_.empty();
  }

 private:
  // (the message before " has no element", the one after the index) -> the indices
  std::map<std::pair<std::string, std::string>, std::vector<int64_t>> indices_;
};

// What cancelling a whole array did, from the server's answer.
std::string ArrayCancelledText(const std::string& name, const Json& answer) {
  const Json& a = GetObject(answer, "array");
  if (a.empty()) {  // a server older than the "array" field
    const int64_t n = GetInt(answer, "array_cancelled");
    return "Cancelled array " + name + " (" + std::to_string(n) + " element" + (n == 1 ? "" : "s") +
           " still queued or running)\n";
  }
  const int64_t queued = GetInt(a, "queued");
  const int64_t running = GetInt(a, "running");
  const int64_t stopping = GetInt(a, "stopping");  // by an earlier cancel
  const int64_t ended = GetInt(a, "elements") - queued - running - stopping;
  if (queued + running == 0 && stopping > 0) {  // a repeated cancel: nothing new (scancel)
    return "Array " + name + " is already cancelled: " + std::to_string(stopping) +
           " running element" + (stopping == 1 ? " is" : "s are") + " being stopped" +
           (ended > 0 ? " (" + std::to_string(ended) + " had already ended)" : "") + "\n";
  }
  std::string notes;
  if (running > 0) notes = "the running ones are being stopped";
  if (stopping > 0) {
    notes +=
        (notes.empty() ? "" : "; ") + std::to_string(stopping) + " more were already being stopped";
  }
  if (ended > 0) {
    notes += (notes.empty() ? "" : "; ") + std::to_string(ended) + " had already ended";
  }
  return "Cancelled array " + name + ": " + std::to_string(queued) + " queued and " +
         std::to_string(running) + " running element" + (queued + running == 1 ? "" : "s") +
         (notes.empty() ? "" : " (" + notes + ")") + "\n";
}

// The server's refusal of another user's jobs to a user who is no admin (GET /v1/jobs).
constexpr std::string_view kOthersJobsListRefused = "only admins may list other users' jobs";

// The jobs a cancel by --user/--state/--name names: those the server lists for the
// selection (the caller's own without --user; another user's for admins only, which the
// server enforces), each as a reference that cancels that job alone (an array's element
// as ARRAY_INDEX: its first element's id would be the whole array).
Result<std::vector<std::string>> SelectedRefs(const ApiClient& api, const JobSelection& select) {
  GP_RETURN_IF_ERROR(CheckSelection(select));
  for (const std::string& state : select.states) {
    GP_ASSIGN_OR_RETURN(std::string name, StateName(state));
    if (auto st = jobs::ParseJobState(name); st && jobs::IsTerminal(*st)) {
      return Status::InvalidArgument("--state " + state +
                                     ": ended jobs cannot be cancelled; use PENDING, ASSIGNED "
                                     "or RUNNING");
    }
  }
  GP_ASSIGN_OR_RETURN(std::string path, JobListPath(select));
  Result<ApiAnswer> listed = api.Get(path);
  if (!listed.ok() && listed.status().code() == StatusCode::kPermissionDenied &&
      listed.status().message() == kOthersJobsListRefused) {
    // The server refuses the list; the user asked to cancel, and is told so.
    return Status::PermissionDenied("cancel --user " + select.user +
                                    ": only admins may cancel other users' jobs");
  }
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, std::move(listed));
  std::vector<std::string> refs;
  for (const Json& job : GetArray(answer.json, "jobs")) {
    const int64_t array = GetInt(job, "array_id");
    refs.push_back(array != 0
                       ? std::to_string(array) + "_" + std::to_string(GetInt(job, "array_index"))
                       : std::to_string(GetInt(job, "id")));
  }
  return refs;
}

// What to cancel: the ids given, else the jobs the filters select.
Result<std::vector<std::string>> CancelRefs(const ApiClient& api, const CancelState& s) {
  const bool filtered = s.select.user_given || !s.select.states.empty() || !s.select.names.empty();
  if (filtered && !s.ids.empty()) {
    return Status::InvalidArgument("cancel: give job ids or --user/--state/--name, not both");
  }
  if (!filtered && s.ids.empty()) {
    return Status::InvalidArgument(
        "cancel: give job ids, or --user, --state or --name to cancel the jobs they select");
  }
  if (filtered) return SelectedRefs(api, s.select);
  return JobRefs(s.ids);
}

// Whether a cancel's answer says the job was cancelled already: after a try whose answer
// was lost in a takeover, that try did it.
bool CancelledBefore(const Status& status) {
  return status.code() == StatusCode::kFailedPrecondition &&
         status.message().find(" has already ended (CANCELLED") != std::string::npos;
}

// Cancels each job in turn; one failure does not stop the others. The exit code is the
// first failure's. "12" is a job, or for an array's id the whole array; "12_5" is element
// 5 of array 12, "12_[5-7]" elements 5, 6 and 7.
void RunCancel(const ClientRuntime& rt, const CancelState& s) {
  if (Status bad = CheckSelection(s.select); !bad.ok()) return Report(rt, bad);
  auto api = Connect(rt, s.conn);
  if (!api.ok()) return Report(rt, api.status());
  auto refs = CancelRefs(*api, s);
  if (!refs.ok()) return Report(rt, refs.status());
  if (refs->empty()) {
    *rt.env.err << "gpupool: no job still to run or running matches; nothing was cancelled\n";
    return;
  }
  int first_failure = kExitOk;
  MissingElements missing;
  for (const std::string& name : *refs) {
    bool retried = false;
    auto answer = RetryDuringTakeover(
        *api, [&] { return api->Post("/v1/jobs/" + name + "/cancel", ""); }, *rt.env.err, &retried);
    if (!answer.ok() && missing.Take(answer.status())) continue;
    if (!answer.ok() && retried && CancelledBefore(answer.status())) {
      Print(rt, "Cancelled job " + name + "\n");  // by a try whose answer was lost
      continue;
    }
    if (!answer.ok()) {
      Report(rt, ForJob(answer.status(), name));
      if (first_failure == kExitOk) first_failure = rt.ctx->exit_code;
      continue;
    }
    if (GetInt(answer->json, "array_cancelled") > 0) {
      Print(rt, ArrayCancelledText(name, answer->json));
      continue;
    }
    const std::string state = GetString(GetObject(answer->json, "job"), "state");
    Print(rt, state == "CANCELLED" || state.empty()
                  ? "Cancelled job " + name + "\n"
                  : "Cancelling job " + name + " (" + state + "; it is being stopped)\n");
  }
  if (missing.Report(rt) && first_failure == kExitOk) first_failure = rt.ctx->exit_code;
  rt.ctx->exit_code = first_failure;
}

// "USR1" for 10; the number when the C library has no name for it.
std::string SignalWord(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? abbrev : std::to_string(sig);
}

// "Signal USR1 sent to job 12 (2 tasks)", or to an array's running elements.
std::string SignalSentText(const std::string& name, const std::string& sig, const Json& a) {
  const int64_t tasks = GetInt(a, "tasks");
  const int64_t jobs = GetInt(a, "jobs");
  const std::string what = std::to_string(tasks) + (tasks == 1 ? " task" : " tasks");
  if (GetBool(a, "array")) {
    return "Signal " + sig + " sent to array " + name + ": " + std::to_string(jobs) + " running " +
           (jobs == 1 ? "element" : "elements") + " (" + what + ")\n";
  }
  return "Signal " + sig + " sent to job " + name + " (" + what + ")\n";
}

// gpupool cancel --signal SIG ID...: the signal to each job in turn, which goes on
// running; one failure does not stop the others, and the exit code is the first's. Not
// retried across a takeover: a signal is sent at most once.
void RunSignal(const ClientRuntime& rt, const CancelState& s) {
  Result<int> sig = ParseSignalName("--signal", *s.signal, "USR1");
  if (!sig.ok()) return Report(rt, sig.status());
  if (s.batch && s.full) {
    return Report(rt, Status::InvalidArgument(
                          "cancel --batch --full: give one: --batch signals the main process "
                          "of task 0 only, --full (the default) every process of the job"));
  }
  if (s.select.user_given || !s.select.states.empty() || !s.select.names.empty()) {
    return Report(rt, Status::InvalidArgument(
                          "cancel --signal: give job ids; --user, --state and --name select "
                          "jobs to cancel only"));
  }
  if (s.ids.empty()) {
    return Report(rt, Status::InvalidArgument(
                          "cancel --signal: give the ids of running jobs, e.g. gpupool cancel "
                          "--signal USR1 12"));
  }
  auto refs = JobRefs(s.ids);
  if (!refs.ok()) return Report(rt, refs.status());
  auto api = Connect(rt, s.conn);
  if (!api.ok()) return Report(rt, api.status());
  const std::string body = OrderedJson{{"signal", *sig}, {"batch", s.batch}}.dump();
  const std::string word = SignalWord(*sig);
  int first_failure = kExitOk;
  MissingElements missing;
  for (const std::string& name : *refs) {
    auto answer = api->Post("/v1/jobs/" + name + "/signal", body);
    if (!answer.ok() && missing.Take(answer.status())) continue;
    if (!answer.ok()) {
      Report(rt, ForJob(answer.status(), name));
      if (first_failure == kExitOk) first_failure = rt.ctx->exit_code;
      continue;
    }
    Print(rt, SignalSentText(name, word, answer->json));
    // Some tasks were reached, these not (or not for sure): said, and an error exit.
    for (const char* field : {"missed", "unconfirmed"}) {
      const std::string what =
          std::string(field) == "missed" ? " not sent to " : " not confirmed by ";
      for (const Json& m : GetArray(answer->json, field)) {
        Report(rt, Status::FailedPrecondition("signal " + word + what +
                                              (m.is_string() ? m.get<std::string>() : m.dump())));
        if (first_failure == kExitOk) first_failure = rt.ctx->exit_code;
      }
    }
  }
  if (missing.Report(rt) && first_failure == kExitOk) first_failure = rt.ctx->exit_code;
  rt.ctx->exit_code = first_failure;
}

// "PENDING, held by alice" for a held job's answer.
std::string HeldByText(const Json& job) {
  std::string text = GetString(job, "state");
  if (const std::string by = GetString(job, "held_by"); !by.empty()) text += ", held by " + by;
  return text;
}

// Holds or releases each job in turn, like RunCancel.
void RunHold(const ClientRuntime& rt, const IdsState& s, bool hold) {
  auto refs = JobRefs(s.ids);
  if (!refs.ok()) return Report(rt, refs.status());
  auto api = Connect(rt, s.conn);
  if (!api.ok()) return Report(rt, api.status());
  int first_failure = kExitOk;
  MissingElements missing;
  for (const std::string& name : *refs) {
    auto answer = RetryDuringTakeover(
        *api, [&] { return api->Post("/v1/jobs/" + name + (hold ? "/hold" : "/release"), ""); },
        *rt.env.err);
    if (!answer.ok() && missing.Take(answer.status())) continue;
    if (!answer.ok()) {
      Report(rt, ForJob(answer.status(), name));
      if (first_failure == kExitOk) first_failure = rt.ctx->exit_code;
      continue;
    }
    // Nothing to do (held already, or not held): said plainly, on stderr; a no-op exits 0.
    if (!GetBool(answer->json, "changed", true)) {
      const Json& job = GetObject(answer->json, "job");
      *rt.env.err << "gpupool: job " << name
                  << (hold
                          ? " is held already (" + HeldByText(job) + "); nothing to hold\n"
                          : " is not held (" + GetString(job, "state") + "); nothing to release\n");
      continue;
    }
    Print(rt, std::string(hold ? "Held" : "Released") + " job " + name + "\n");
  }
  if (missing.Report(rt) && first_failure == kExitOk) first_failure = rt.ctx->exit_code;
  rt.ctx->exit_code = first_failure;
}

struct CheckpointDoneState {
  ConnectionFlags conn;
  std::vector<std::string> ids;
  std::optional<int> task;  // --task
};

// The task that says checkpoint-done: --task, else, inside a task of the job named
// (GPUPOOL_JOB_ID is it), GPUPOOL_TASK_INDEX; nullopt: the whole job (said from outside).
Result<std::optional<int>> CheckpointDoneTask(const ClientRuntime& rt, const CheckpointDoneState& s,
                                              const std::string& id) {
  if (s.task) return s.task;
  if (rt.env.getenv("GPUPOOL_JOB_ID") != id) return std::optional<int>();
  const std::string index = rt.env.getenv("GPUPOOL_TASK_INDEX");
  if (index.empty()) return std::optional<int>();
  const std::optional<int64_t> t = ParseInt64(index);
  if (!t || *t < 0 || *t > 4095) {
    return Status::InvalidArgument("checkpoint-done: GPUPOOL_TASK_INDEX=" + index +
                                   " is not a task index: give --task N");
  }
  return std::optional<int>(static_cast<int>(*t));
}

// `gpupool checkpoint-done [ID] [--task N]`: the preempted job (ID, else $GPUPOOL_JOB_ID
// inside a job) has checkpointed. Run inside a task of a job of several (or with --task),
// only that task's grace ends, as its exit would end it; else the whole job's
// (docs/preemption.md).
void RunCheckpointDone(const ClientRuntime& rt, const CheckpointDoneState& s) {
  std::string id = s.ids.empty() ? rt.env.getenv("GPUPOOL_JOB_ID") : s.ids[0];
  if (id.empty()) {
    return Report(rt, Status::InvalidArgument(
                          "checkpoint-done: give the job ID (GPUPOOL_JOB_ID is not set: this "
                          "is not inside a job)"));
  }
  Result<std::optional<int>> task = CheckpointDoneTask(rt, s, id);
  if (!task.ok()) return Report(rt, task.status());
  const std::string body = *task ? DumpJson(Json{{"task", **task}}) : "";
  auto api = Connect(rt, s.conn);
  if (!api.ok()) return Report(rt, api.status());
  auto answer = RetryDuringTakeover(
      *api, [&] { return api->Post("/v1/jobs/" + id + "/checkpoint-done", body); }, *rt.env.err);
  if (!answer.ok()) return Report(rt, ForJob(answer.status(), id));
  // The answer says whose grace ended: the job's (said without a task, in a job of one
  // task, or by the last of its tasks) or the task's alone.
  if (!*task || GetBool(GetObject(answer->json, "job"), "checkpoint_done")) {
    return Print(rt,
                 "Job " + id + " has checkpointed: it is stopped now and goes back to the queue\n");
  }
  Print(rt, "Task " + std::to_string(**task) + " of job " + id +
                " has checkpointed: it is stopped now; the job's other tasks keep their grace\n");
}

}  // namespace

void RegisterJobCommands(CLI::App& app, const RuntimePtr& rt) {
  auto q = std::make_shared<QueueState>();
  CLI::App* queue = app.add_subcommand("queue", "List jobs waiting or running");
  queue->add_flag("-a,--all", q->select.all, "everyone's jobs (admins)");
  queue->add_option("-u,--user", q->select.user, "only this user's jobs (admins)");
  queue
      ->add_option("-t,--state", q->select.states,
                   "only jobs in these states, e.g. PENDING,RUNNING")
      ->delimiter(',')
      ->allow_extra_args(false);
  queue->add_option("-n,--name", q->select.names, "only jobs of these names, e.g. train,eval")
      ->delimiter(',')
      ->allow_extra_args(false);
  queue
      ->add_option("-o,--format", q->format,
                   "the columns, a comma list of these fields:\n" + QueueFieldsHelp())
      ->type_name("FIELDS");
  queue
      ->add_option("-S,--sort", q->sort,
                   "the order, a comma list of fields, -FIELD for descending (squeue --sort), "
                   "e.g. state,-priority; fields: " +
                       jobs::JobSortFieldList())
      ->type_name("FIELD[,-FIELD]");
  queue->add_flag(
      "--start", q->start,
      "pending jobs and when the scheduler plans to start them (N/A: no plan, and why)");
  queue->add_flag("--json", q->json, "print the server's JSON");
  AddConnectionOptions(*queue, &q->conn);
  queue->callback([rt, q, queue] {
    q->select.user_given = queue->count("--user") > 0;
    Report(*rt, RunQueue(*rt, *q));
  });

  auto sh = std::make_shared<ShowState>();
  CLI::App* show = app.add_subcommand("show", "Show everything about one job");
  show->add_option("id", sh->id, "job id, or ARRAY_INDEX for an array's element")->required();
  show->add_flag("--json", sh->json, "print the server's JSON");
  show->add_flag("--script", sh->script,
                 "print the script the job runs: the copy taken at submit (as scontrol write "
                 "batch_script)");
  AddConnectionOptions(*show, &sh->conn);
  show->callback([rt, sh] { Report(*rt, RunShow(*rt, *sh)); });

  auto c = std::make_shared<CancelState>();
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel jobs");
  cancel->add_option(
      "ids", c->ids,
      "job ids; an array's id cancels all its elements, ARRAY_INDEX or ARRAY_[INDICES] some");
  cancel->add_option("-u,--user", c->select.user,
                     "instead of ids: this user's jobs (your own; another's: admins)");
  cancel->add_option("-t,--state", c->select.states, "instead of ids: jobs in these states")
      ->delimiter(',')
      ->allow_extra_args(false);
  cancel->add_option("-n,--name", c->select.names, "instead of ids: jobs of these names")
      ->delimiter(',')
      ->allow_extra_args(false);
  cancel->add_option("-s,--signal", c->signal,
                     "send this signal (USR1, SIGUSR1, 10, ...) to the running jobs instead of "
                     "cancelling them; they go on running (scancel --signal)");
  cancel->add_flag("-b,--batch", c->batch,
                   "with --signal: to the main process of task 0 only (the batch script's shell)");
  cancel->add_flag("-f,--full", c->full,
                   "with --signal: to every process of the job (the default; scancel --full)");
  AddConnectionOptions(*cancel, &c->conn);
  cancel->callback([rt, c, cancel] {
    c->select.user_given = cancel->count("--user") > 0;
    if (c->signal) return RunSignal(*rt, *c);
    if (c->batch || c->full) {
      const std::string flag = c->batch ? "--batch" : "--full";
      return Report(*rt, Status::InvalidArgument(flag +
                                                 ": only with --signal SIG (gpupool cancel "
                                                 "--signal USR1 " +
                                                 flag +
                                                 " ID); a cancel stops every process of "
                                                 "the job"));
    }
    RunCancel(*rt, *c);
  });

  auto h = std::make_shared<IdsState>();
  CLI::App* hold = app.add_subcommand(
      "hold", "Keep pending jobs from starting until `gpupool release` (like scontrol hold)");
  hold->add_option("ids", h->ids, "job ids, ARRAY_INDEX or ARRAY_[INDICES]")->required();
  AddConnectionOptions(*hold, &h->conn);
  hold->callback([rt, h] { RunHold(*rt, *h, true); });
  auto rl = std::make_shared<IdsState>();
  CLI::App* release = app.add_subcommand("release", "Let held jobs start again");
  release->add_option("ids", rl->ids, "job ids, ARRAY_INDEX or ARRAY_[INDICES]")->required();
  AddConnectionOptions(*release, &rl->conn);
  release->callback([rt, rl] { RunHold(*rt, *rl, false); });
  auto cd = std::make_shared<CheckpointDoneState>();
  CLI::App* done = app.add_subcommand(
      "checkpoint-done",
      "Inside a preempted job: it has checkpointed, end its grace period now (SIGKILL); "
      "inside one task of several, that task's alone");
  done->add_option("id", cd->ids, "job id (default: $GPUPOOL_JOB_ID)")->expected(0, 1);
  done->add_option("--task", cd->task,
                   "only this task's grace ends (default inside a task of the job: "
                   "$GPUPOOL_TASK_INDEX; outside: the whole job's)")
      ->check(TaskIndexCheck());
  AddConnectionOptions(*done, &cd->conn);
  done->callback([rt, cd] { RunCheckpointDone(*rt, *cd); });
}

}  // namespace gpupool::cli
