// BuildSubmission: submit options (as text) -> the POST /v1/jobs body. Declared in
// submit_flags.h. The server checks everything again; these checks exist so that a
// mistake is reported before any network round trip, in the user's own words.

#include <algorithm>
#include <cctype>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <random>
#include <tuple>

#include "cli/client/submit_flags.h"
#include "cli/client/submit_io.h"
#include "cli/client/units.h"
#include "common/hostlist.h"
#include "common/strings.h"
#include "jobs/job.h"
#include "jobs/job_json.h"
#include "jobs/job_validation.h"

namespace gpupool::cli {
namespace {

// -w/-x stop where the server does, so that a list it would refuse is refused here.
static_assert(kMaxHostListNames == jobs::kMaxNodeNames);

constexpr int64_t kMaxTimeLimitS = int64_t{10} * 365 * 24 * 3600;  // the server's limit

Status OptionError(std::string_view option, std::string_view value, std::string_view why) {
  return Status::InvalidArgument(std::string(option) + " " + std::string(value) + ": " +
                                 std::string(why));
}

// A whole number in [min, max], or an error naming the option.
Result<int64_t> WholeNumber(std::string_view option, const std::string& value, int64_t min,
                            int64_t max, std::string_view example) {
  auto v = ParseInt64(Trim(value));
  if (!v || *v < min || *v > max) {
    return OptionError(option, value,
                       "use a whole number from " + std::to_string(min) + " to " +
                           std::to_string(max) + ", e.g. " + std::string(example));
  }
  return *v;
}

bool IsEnvName(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

bool IsCapability(std::string_view s) {
  const size_t dot = s.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == s.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i != dot && !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// --gpus N. Slurm's typed form, --gpus=a100:2 (or --gpus-per-task), is refused saying
// how gpupool asks for a model.
Result<int64_t> GpuCount(const std::string& value) {
  const size_t colon = value.rfind(':');
  if (colon != std::string::npos && colon > 0 && ParseInt64(value.substr(colon + 1))) {
    const std::string model = Upper(value.substr(0, colon));
    return OptionError("--gpus", value,
                       "Slurm's typed form; gpupool asks for the model apart: write --gpus " +
                           value.substr(colon + 1) + " --gpu-model " + model +
                           " (`gpupool nodes` shows the models)");
  }
  return WholeNumber("--gpus", value, 0, 1024, "2");
}

// The GPU part of the request: --gpus, --gpu-share, --gpu-mem.
Status FillGpus(const SubmitFlags& f, jobs::ResourceRequest* r) {
  if (f.gpu_share && f.gpu_mem) {
    return Status::InvalidArgument(
        "--gpu-share and --gpu-mem both size a share of one GPU; give one or the other");
  }
  std::optional<int64_t> gpus;
  if (f.gpus) {
    GP_ASSIGN_OR_RETURN(gpus, GpuCount(*f.gpus));
  }
  if (f.gpu_share) {
    auto milli = ParseGpuShare(*f.gpu_share);
    if (!milli.ok()) return OptionError("--gpu-share", *f.gpu_share, milli.status().message());
    if (gpus && *gpus != 1) {
      return OptionError(
          "--gpu-share", *f.gpu_share,
          "a share is part of one GPU and needs --gpus 1 (got --gpus " + *f.gpus + ")");
    }
    gpus = 1;
    r->gpu_milli = *milli;
  }
  if (f.gpu_mem) {
    auto bytes = ParseMemorySize(*f.gpu_mem);
    if (!bytes.ok()) return OptionError("--gpu-mem", *f.gpu_mem, bytes.status().message());
    if (*bytes == 0) return OptionError("--gpu-mem", *f.gpu_mem, "must be more than 0");
    if (gpus && *gpus != 1) {
      return OptionError("--gpu-mem", *f.gpu_mem,
                         "a share sized by memory is part of one GPU and needs --gpus 1 (got "
                         "--gpus " +
                             *f.gpus + ")");
    }
    gpus = 1;
    r->gpu_memory_bytes = *bytes;
  }
  r->gpus = static_cast<int>(gpus.value_or(0));
  return Status::Ok();
}

// A value as an error quotes it: a list of thousands of names written out is cut.
std::string Shown(const std::string& value) {
  constexpr size_t kShown = 80;
  return value.size() <= kShown ? value : value.substr(0, kShown) + "...";
}

// -w/--nodelist, -x/--exclude: a Slurm hostlist, expanded. Slurm reads a value with a
// '/' as a file of names; gpupool does not, and says so rather than take it as a name.
// At most kMaxHostListNames names, the server's bound (jobs::kMaxNodeNames), counted
// before anything is expanded.
Result<std::vector<std::string>> NodeNames(std::string_view option, const std::string& value) {
  if (value.find('/') != std::string::npos) {
    return OptionError(option, Shown(value),
                       "gpupool does not read node names from a file; give the names, e.g. "
                       "node0,gpu[01-04]");
  }
  if (Result<uint64_t> n = HostListSize(Trim(value)); n.ok() && *n > kMaxHostListNames) {
    const bool only = option == "--nodelist";
    return OptionError(
        option, Shown(value),
        "at most " + std::to_string(kMaxHostListNames) + " node names (got " +
            (*n >= kHostListSizeSaturated ? "far more" : std::to_string(*n)) + "); " +
            (only ? "name fewer nodes, or exclude the few the job may not use (-x/--exclude)"
                  : "exclude fewer nodes, or name the few the job may use (-w/--nodelist)") +
            ", or choose nodes by their GPUs (--gpu-model, --min-capability)");
  }
  Result<std::vector<std::string>> names = ExpandHostList(Trim(value));
  if (!names.ok()) {
    return OptionError(
        option, Shown(value),
        names.status().message() + " (give node names or a hostlist like gpu[01-04])");
  }
  return names;
}

// The first name of `nodelist` that `exclude` has too, or nullptr. Sorted, not a search
// of one list per name of the other: thousands of names each cost no more than a sort.
const std::string* InBoth(const std::vector<std::string>& nodelist,
                          const std::vector<std::string>& exclude) {
  std::vector<std::string_view> sorted(exclude.begin(), exclude.end());
  std::sort(sorted.begin(), sorted.end());
  for (const std::string& n : nodelist) {
    if (std::binary_search(sorted.begin(), sorted.end(), std::string_view(n))) return &n;
  }
  return nullptr;
}

// Everything else of the request.
Status FillRequest(const SubmitFlags& f, jobs::ResourceRequest* r) {
  GP_RETURN_IF_ERROR(FillGpus(f, r));
  for (const std::string& m : f.gpu_models) {
    std::string model(Trim(m));
    if (model.empty()) {
      return Status::InvalidArgument(
          "--gpu-model: an empty model name; use e.g. A100 or A100,H100");
    }
    r->gpu_models.push_back(std::move(model));
  }
  if (f.min_capability) {
    if (!IsCapability(Trim(*f.min_capability))) {
      return OptionError("--min-capability", *f.min_capability, "use MAJOR.MINOR, e.g. 8.0");
    }
    r->min_capability = std::string(Trim(*f.min_capability));
  }
  if (f.vendor) {
    r->vendor = ToLower(Trim(*f.vendor));
    if (r->vendor != "nvidia" && r->vendor != "amd") {
      return OptionError("--vendor", *f.vendor, "use nvidia or amd");
    }
  }
  // Named by its option here (the server's refusal names its JSON field).
  const char* constraint = !r->gpu_models.empty()       ? "--gpu-model"
                           : !r->min_capability.empty() ? "--min-capability"
                           : !r->vendor.empty()         ? "--vendor"
                                                        : nullptr;
  if (constraint != nullptr && r->gpus == 0) {
    return Status::InvalidArgument(std::string(constraint) +
                                   ": the job asks for no GPU; add --gpus N");
  }
  if (f.cpus) {
    auto milli = ParseCpus(*f.cpus);
    if (!milli.ok()) return OptionError("--cpus", *f.cpus, milli.status().message());
    r->cpu_milli = *milli;
  }
  if (f.mem) {
    auto bytes = ParseMemorySize(*f.mem);  // 0: no explicit request
    if (!bytes.ok()) return OptionError("--mem", *f.mem, bytes.status().message());
    r->memory_bytes = *bytes;
  }
  if (f.tasks) {
    GP_ASSIGN_OR_RETURN(int64_t tasks, WholeNumber("--tasks", *f.tasks, 1, 4096, "4"));
    r->tasks = static_cast<int>(tasks);
  }
  if (f.nodelist) {
    GP_ASSIGN_OR_RETURN(r->nodelist, NodeNames("--nodelist", *f.nodelist));
  }
  if (f.exclude) {
    GP_ASSIGN_OR_RETURN(r->exclude, NodeNames("--exclude", *f.exclude));
  }
  if (const std::string* n = InBoth(r->nodelist, r->exclude); n != nullptr) {
    return Status::InvalidArgument("--nodelist " + Shown(*f.nodelist) + " and --exclude " +
                                   Shown(*f.exclude) + " both name " + *n +
                                   ": leave it out of one of them");
  }
  // The codec's own invariants, so nothing the server would refuse leaves this machine.
  return jobs::ValidateRequest(*r);
}

// --env: variables (NAME=VALUE) into body.env, and a named environment (NAME:VERSION)
// into body.environment and *environment.
Status AddEnvFlags(const SubmitFlags& f, OrderedJson* body_out, std::string* environment_out) {
  OrderedJson& body = *body_out;
  std::string& environment = *environment_out;
  OrderedJson env = OrderedJson::object();
  for (const std::string& kv : f.env) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos && kv.find(':') != std::string::npos) {
      // A named environment, NAME:VERSION (the server checks that it exists).
      if (!environment.empty() && environment != kv) {
        return OptionError("--env", kv,
                           "only one named environment per job; already given " + environment);
      }
      environment = kv;
      continue;
    }
    if (eq == std::string::npos || !IsEnvName(kv.substr(0, eq))) {
      return OptionError("--env", kv,
                         "use NAME=VALUE for a variable (e.g. --env OMP_NUM_THREADS=4) or "
                         "NAME:VERSION for a named environment (e.g. --env torch:2.4)");
    }
    env[kv.substr(0, eq)] = kv.substr(eq + 1);  // a later --env for a name wins
  }
  if (!env.empty()) body["env"] = std::move(env);
  if (!environment.empty()) {
    if (f.image) {
      return OptionError("--env", environment,
                         "a named environment already sets the image; drop --image");
    }
    body["environment"] = environment;
  }
  return Status::Ok();
}

// --mount SRC:DST[:ro] into body.mounts (a relative SRC is relative to `cwd`); only for
// container jobs (--image, or a named `environment`).
Status AddMountFlags(const SubmitFlags& f, const std::string& cwd, const std::string& environment,
                     OrderedJson* body_out) {
  OrderedJson& body = *body_out;
  OrderedJson mounts = OrderedJson::array();
  for (const std::string& m : f.mounts) {
    std::vector<std::string> parts = Split(m, ':');
    const bool ro = parts.size() == 3 && parts[2] == "ro";
    const bool rw = parts.size() == 3 && parts[2] == "rw";
    if (parts.size() < 2 || parts.size() > 3 || (parts.size() == 3 && !ro && !rw) ||
        parts[0].empty() || parts[1].empty() || parts[1].front() != '/') {
      return OptionError("--mount", m,
                         "use SRC:DST[:ro] with an absolute DST, e.g. --mount /data:/data:ro");
    }
    // A relative source is relative to the current directory, like --workdir.
    const std::string src = (std::filesystem::path(cwd) / parts[0]).lexically_normal().string();
    mounts.push_back({{"source", src}, {"target", parts[1]}, {"read_only", ro}});
  }
  if (!mounts.empty()) {
    if (!f.image && environment.empty()) {
      return OptionError("--mount", f.mounts.front(),
                         "mounts are for container jobs; add --image REF or --env NAME:VERSION");
    }
    body["mounts"] = std::move(mounts);
  }
  return Status::Ok();
}

// Slurm's --dependency value, "afterok:12:14,afterany:13", as "after-ok:12",
// "after-ok:14", "after-any:13": the types gpupool has, all to be met (a comma);
// anything else is refused naming what to use.
Result<std::vector<std::string>> ParseSlurmDependency(const std::string& spec) {
  auto bad = [&](const std::string& why) { return OptionError("--dependency", spec, why); };
  if (Trim(spec).empty()) return bad("give TYPE:ID, e.g. --dependency afterok:12");
  if (spec.find('?') != std::string::npos) {
    return bad("'?' (any one of them) is not supported: a job waits for all its dependencies");
  }
  std::vector<std::string> out;
  for (const std::string& part : Split(std::string(Trim(spec)), ',')) {
    const std::string p(Trim(part));
    const size_t colon = p.find(':');
    const std::string type = ToLower(p.substr(0, colon));
    if (type == "singleton") {  // the server adds the jobs (the body's `singleton`)
      if (colon != std::string::npos) return bad("singleton takes no job ids");
      out.push_back("singleton:");
      continue;
    }
    std::string kind;
    if (type == "afterok") kind = "after-ok";
    if (type == "afterany") kind = "after-any";
    if (type == "afternotok") kind = "after-not-ok";
    if (kind.empty()) {
      const std::string what = type.empty() ? "an empty type" : "type '" + type + "'";
      return bad(what +
                 " is not supported; use afterok, afterany or afternotok (after, aftercorr, "
                 "aftersomething+TIME and expand do not exist in gpupool)");
    }
    if (colon == std::string::npos || colon + 1 == p.size()) {
      return bad(type + " needs job ids: " + type + ":ID[:ID...], e.g. " + type + ":12");
    }
    for (const std::string& id : Split(p.substr(colon + 1), ':')) {
      if (id.find('+') != std::string::npos) {
        return bad("a delay (" + type + ":ID+MINUTES) is not supported");
      }
      out.push_back(kind + ":" + id);
    }
  }
  return out;
}

// The job id a dependency names: a job or array id as is, an element ARRAY_INDEX through
// `resolve` (the element's own id).
Result<int64_t> DependencyId(const std::string& flag, const std::string& kind,
                             const std::string& ref, const ElementResolver& resolve) {
  const std::string example = flag == "--dependency"
                                  ? "--dependency " +
                                        std::string(kind == "after-ok"    ? "afterok"
                                                    : kind == "after-any" ? "afterany"
                                                                          : "afternotok") +
                                        ":12:14"
                                  : flag + " 12,14";
  const size_t us = ref.find('_');
  const auto id = ParseInt64(ref.substr(0, us));
  std::optional<int64_t> index;
  if (us != std::string::npos) index = ParseInt64(ref.substr(us + 1));
  if (!id || *id <= 0 || (us != std::string::npos && (!index || *index < 0))) {
    return OptionError(
        flag, ref,
        "give job ids, e.g. " + example + " (ARRAY_INDEX, e.g. 12_3, for one element of an array)");
  }
  if (us == std::string::npos) return *id;
  if (!resolve) {
    return OptionError(flag, ref, "an array element needs the server to find its job id");
  }
  Result<int64_t> resolved = resolve(std::to_string(*id) + "_" + std::to_string(*index));
  if (!resolved.ok()) return resolved.status().WithContext(flag + " " + ref);
  const int64_t element = *resolved;
  if (element == *id) {
    // Its id is the array's, and a dependency on the array's id waits for every element.
    return OptionError(flag, ref,
                       "the first element of an array has the array's own id, " +
                           std::to_string(*id) +
                           ", which in a dependency waits for every element; depend on " +
                           std::to_string(*id) + " (the whole array) instead");
  }
  return element;
}

// --time's value in seconds. Slurm's spellings of no limit (0, UNLIMITED, INFINITE) are
// refused saying to leave --time out.
Result<int64_t> TimeLimitSeconds(const std::string& time) {
  const std::string no_limit = "; for no time limit leave --time out";
  const std::string word = ToLower(Trim(time));
  if (word == "unlimited" || word == "infinite") {
    return OptionError("--time", time, "gpupool has no such word" + no_limit);
  }
  auto secs = ParseDuration(time);
  if (!secs.ok()) return OptionError("--time", time, secs.status().message());
  if (*secs <= 0) return OptionError("--time", time, "a time limit must be positive" + no_limit);
  if (*secs > kMaxTimeLimitS) {
    return OptionError("--time", time, "a time limit must be at most 10 years");
  }
  return *secs;
}

// Slurm's --signal=[{R|B}:]SIG[@SECONDS] into the submission's warn_signal, warn_time_s
// and warn_main_only. SIG: a number 1-64 or a name, with or without SIG (USR1, SIGUSR1).
Status AddWarnSignal(const std::string& value, OrderedJson* body) {
  std::string text(Trim(value));
  bool main_only = false;
  if (const size_t colon = text.find(':'); colon != std::string::npos) {
    const std::string who = Upper(text.substr(0, colon));
    if (who == "R" || who == "RB" || who == "BR") {
      return OptionError("--signal", value,
                         "R: (the end of a reservation) does not apply: gpupool has no "
                         "reservations; the signal is sent before the job's time limit");
    }
    if (who != "B") {
      return OptionError("--signal", value, "write [B:]SIG[@SECONDS], e.g. B:USR1@120");
    }
    main_only = true;
    text = text.substr(colon + 1);
  }
  int64_t seconds = 60;  // Slurm's default
  if (const size_t at = text.find('@'); at != std::string::npos) {
    GP_ASSIGN_OR_RETURN(seconds, WholeNumber("--signal", text.substr(at + 1), 0, 65535, "120"));
    text.resize(at);
  }
  Result<int> sig = ParseSignalName("--signal", text, "B:USR1@120");
  if (!sig.ok()) {  // named as written, B: and @SECONDS included
    const std::string& m = sig.status().message();
    return OptionError("--signal", value, m.substr(m.find(": ") + 2));
  }
  (*body)["warn_signal"] = *sig;
  (*body)["warn_time_s"] = seconds;
  if (main_only) (*body)["warn_main_only"] = true;
  return Status::Ok();
}

// --min-runtime and --grace into body. The bounds are the server's (job_json.cc); said here
// with the flag the user typed.
Status AddPreemptDurations(const SubmitFlags& f, OrderedJson* body) {
  for (const auto& [flag, value, key, most_s, most] :
       {std::tuple{"--min-runtime", &f.min_runtime, "min_runtime_s", int64_t{365} * 86400, "365d"},
        std::tuple{"--grace", &f.grace, "preempt_grace_s", int64_t{86400}, "24h"}}) {
    if (!*value) continue;
    Result<int64_t> secs = ParseDurationWithUnit(**value);
    if (!secs.ok()) return OptionError(flag, **value, secs.status().message());
    if (*secs <= 0) return OptionError(flag, **value, "give a positive duration, e.g. 10m");
    if (*secs > most_s) return OptionError(flag, **value, std::string("at most ") + most);
    (*body)[key] = *secs;
  }
  return Status::Ok();
}

}  // namespace

Result<int> ParseSignalName(std::string_view option, const std::string& text,
                            std::string_view example) {
  std::string name = Upper(std::string(Trim(text)));
  if (name.starts_with("SIG")) name = name.substr(3);
  if (!name.empty() && std::all_of(name.begin(), name.end(), ::isdigit)) {
    GP_ASSIGN_OR_RETURN(const int64_t n, WholeNumber(option, name, 1, 64, "10"));
    return static_cast<int>(n);
  }
  static constexpr std::pair<std::string_view, int> kNames[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ABRT", SIGABRT},
      {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"PIPE", SIGPIPE},
      {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"STOP", SIGSTOP},
      {"TSTP", SIGTSTP}, {"URG", SIGURG},   {"XCPU", SIGXCPU}, {"WINCH", SIGWINCH}};
  for (const auto& [n, s] : kNames) {
    if (name == n) return s;
  }
  return OptionError(option, text,
                     "'" + text +
                         "' is no signal; give a name (USR1, USR2, TERM, ...) or a number, "
                         "e.g. " +
                         std::string(option) + " " + std::string(example));
}

Status CheckLineValues(const SubmitFlags& line) {
  if (line.gpus) GP_RETURN_IF_ERROR(GpuCount(*line.gpus).status());
  if (line.gpu_share) {
    auto milli = ParseGpuShare(*line.gpu_share);
    if (!milli.ok()) return OptionError("--gpu-share", *line.gpu_share, milli.status().message());
  }
  if (line.cpus) {
    auto milli = ParseCpus(*line.cpus);
    if (!milli.ok()) return OptionError("--cpus", *line.cpus, milli.status().message());
  }
  if (line.tasks) GP_RETURN_IF_ERROR(WholeNumber("--tasks", *line.tasks, 1, 4096, "4").status());
  if (line.priority) {
    GP_RETURN_IF_ERROR(
        WholeNumber("--priority", *line.priority, -1'000'000, 1'000'000, "10").status());
  }
  if (line.time) GP_RETURN_IF_ERROR(TimeLimitSeconds(*line.time).status());
  if (line.nodelist) GP_RETURN_IF_ERROR(NodeNames("--nodelist", *line.nodelist).status());
  if (line.exclude) GP_RETURN_IF_ERROR(NodeNames("--exclude", *line.exclude).status());
  OrderedJson scratch;
  if (line.signal) GP_RETURN_IF_ERROR(AddWarnSignal(*line.signal, &scratch));
  return AddPreemptDurations(line, &scratch);
}

Result<OrderedJson> BuildSubmission(const SubmitFlags& f, const std::vector<std::string>& command,
                                    const std::string& cwd, const ElementResolver& resolve) {
  if (command.empty() || command[0].empty()) {
    return Status::InvalidArgument(
        "nothing to run: give a SCRIPT [ARGS...] or -- COMMAND [ARGS...]");
  }
  if (f.partition) {
    return OptionError("--partition", *f.partition,
                       "gpupool has no partitions: every job may run on every node it fits. "
                       "Choose GPUs with --gpu-model (e.g. A100,H100), --vendor or "
                       "--min-capability; `gpupool nodes` shows what each node has");
  }
  jobs::ResourceRequest request;
  GP_RETURN_IF_ERROR(FillRequest(f, &request));
  if (f.nodes && (Trim(*f.nodes) != "1" || request.tasks != 1)) {
    return OptionError("--nodes", *f.nodes,
                       "gpupool places tasks, not nodes: ask for -n/--tasks N tasks (a gang, "
                       "placed on one node or several), each with its own --gpus, --cpus and "
                       "--mem; --nodes 1 is accepted for a one-task job only");
  }

  OrderedJson body;
  if (f.name) body["name"] = *f.name;
  if (f.project) body["project"] = *f.project;
  body["command"] = command;
  std::string environment;  // a named environment, NAME:VERSION
  GP_RETURN_IF_ERROR(AddEnvFlags(f, &body, &environment));
  GP_RETURN_IF_ERROR(AddMountFlags(f, cwd, environment, &body));
  std::filesystem::path workdir(cwd);
  if (f.workdir) {
    if (Trim(*f.workdir).empty()) return OptionError("--workdir", "''", "give a directory");
    workdir = std::filesystem::path(cwd) / *f.workdir;  // an absolute --workdir replaces cwd
  }
  body["workdir"] = workdir.lexically_normal().string();
  if (f.image) {
    if (Trim(*f.image).empty()) return OptionError("--image", "''", "give an image reference");
    body["image"] = *f.image;
  }
  body["request"] = jobs::RequestToJson(request);
  if (f.priority) {
    GP_ASSIGN_OR_RETURN(int64_t p,
                        WholeNumber("--priority", *f.priority, -1'000'000, 1'000'000, "10"));
    body["priority"] = p;
  }
  if (f.time) {
    GP_ASSIGN_OR_RETURN(body["time_limit_s"], TimeLimitSeconds(*f.time));
  }
  if (f.signal) GP_RETURN_IF_ERROR(AddWarnSignal(*f.signal, &body));
  if (f.requeue) body["requeue"] = *f.requeue;
  if (f.preemptible) body["preemptible"] = *f.preemptible;
  GP_RETURN_IF_ERROR(AddPreemptDurations(f, &body));
  if (f.enforce) {
    if (*f.enforce != "memory") {
      return OptionError("--enforce", *f.enforce,
                         "the one thing a job can ask to have enforced is 'memory' "
                         "(--enforce memory)");
    }
    body["enforce_memory"] = true;
  }
  if (f.mpi && *f.mpi) body["mpi"] = true;
  if (f.shm_size) {
    auto bytes = ParseMemorySize(*f.shm_size);
    if (!bytes.ok()) return OptionError("--shm-size", *f.shm_size, bytes.status().message());
    if (*bytes == 0) return OptionError("--shm-size", *f.shm_size, "must be more than 0");
    if (!f.image && environment.empty()) {
      return OptionError("--shm-size", *f.shm_size,
                         "sizes a container's /dev/shm; add --image REF or --env NAME:VERSION");
    }
    body["shm_bytes"] = *bytes;
  }
  if (f.init && !*f.init) body["init"] = false;
  if (f.array) {
    // Checked here for a quick answer; the server parses it again (one definition).
    Result<jobs::ArraySpec> spec = jobs::ParseArraySpec(Trim(*f.array));
    if (!spec.ok()) {
      std::string why = spec.status().message();
      why = why.substr(why.find(": ") + 2);
      return OptionError("--array", *f.array, why);
    }
    body["array"] = std::string(Trim(*f.array));
  }
  if (f.hold && *f.hold) body["hold"] = true;
  // Every dependency as KIND:REF, --after-ok's and then -d/--dependency's, with the
  // option to name in an error.
  std::vector<std::pair<std::string, std::string>> wanted;  // {"after-ok:12", option}
  for (const std::string& d : f.dependencies)
    wanted.emplace_back(d, "--" + d.substr(0, d.find(':')));
  for (const std::string& spec : f.slurm_dependencies) {
    GP_ASSIGN_OR_RETURN(std::vector<std::string> parsed, ParseSlurmDependency(spec));
    for (std::string& d : parsed) wanted.emplace_back(std::move(d), "--dependency");
  }
  OrderedJson deps = OrderedJson::array();
  for (const auto& [d, flag] : wanted) {
    const size_t colon = d.find(':');
    const std::string kind = d.substr(0, colon);
    if (kind == "singleton") {
      body["singleton"] = true;
      continue;
    }
    const std::string ref(Trim(d.substr(colon + 1)));
    GP_ASSIGN_OR_RETURN(int64_t id, DependencyId(flag, kind, ref, resolve));
    deps.push_back({{"job_id", id}, {"kind", kind}});
  }
  if (!deps.empty()) body["dependencies"] = std::move(deps);
  return body;
}

Result<ApiAnswer> PostSubmission(const ApiClient& api, OrderedJson* body) {
  // Checked here, after every part is added (command, --env, --export, -o/-e, workdir):
  // DumpJson would replace stray bytes, and the job would run something else.
  GP_RETURN_IF_ERROR(CheckSubmissionText(*body));
  if (!body->contains("submit_key")) (*body)["submit_key"] = NewSubmitKey();
  const std::string text = DumpJson(*body);
  return RetryDuringTakeover(
      api, [&] { return api.Post("/v1/jobs", text); }, std::cerr);
}

void PrintSubmitWarnings(const Json& answer, std::ostream& err) {
  const auto it = answer.find("warnings");
  if (it == answer.end() || !it->is_array()) return;
  for (const Json& w : *it) {
    if (w.is_string()) err << "gpupool: warning: " << w.get<std::string>() << "\n";
  }
}

std::string NewSubmitKey() {
  std::random_device rd;  // the kernel's random source
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key;
  for (int i = 0; i < 4; ++i) {
    uint32_t v = rd();
    for (int k = 0; k < 8; ++k, v >>= 4) key += kHex[v & 15];
  }
  return key;
}

}  // namespace gpupool::cli
