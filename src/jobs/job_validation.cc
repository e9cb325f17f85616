#include "jobs/job_validation.h"

#include <cctype>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/strings.h"
#include "jobs/output_pattern.h"

namespace gpupool::jobs {
namespace {

// The grammar of github.com/distribution/reference (reference.go), which podman and
// docker both use, written out by hand (std::regex is slow to build and to run, and
// GCC 12 warns inside it under the sanitizers).
bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }
bool IsWord(char c) { return IsAlnum(c) || c == '_'; }
bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// [a-z0-9]+ ((\.|_|__|-+) [a-z0-9]+)*
bool IsPathComponent(std::string_view s) {
  size_t i = 0;
  auto alnum_run = [&] {
    const size_t from = i;
    while (i < s.size() && IsLowerAlnum(s[i])) ++i;
    return i > from;
  };
  if (!alnum_run()) return false;
  while (i < s.size()) {
    if (s[i] == '.') {
      ++i;
    } else if (s[i] == '_') {
      ++i;
      if (i < s.size() && s[i] == '_') ++i;
    } else if (s[i] == '-') {
      while (i < s.size() && s[i] == '-') ++i;
    } else {
      return false;
    }
    if (!alnum_run()) return false;
  }
  return true;
}

// [a-zA-Z0-9] | [a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]
bool IsDomainComponent(std::string_view s) {
  if (s.empty() || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-') return false;
  }
  return true;
}

// component (\. component)* (:[0-9]+)?
bool IsDomain(std::string_view s) {
  if (const size_t colon = s.find(':'); colon != std::string_view::npos) {
    const std::string_view port = s.substr(colon + 1);
    if (port.empty()) return false;
    for (char c : port) {
      if (c < '0' || c > '9') return false;
    }
    s = s.substr(0, colon);
  }
  while (true) {
    const size_t dot = s.find('.');
    if (!IsDomainComponent(s.substr(0, dot))) return false;
    if (dot == std::string_view::npos) return true;
    s = s.substr(dot + 1);
  }
}

// (domain /)? path-component (/ path-component)*
bool IsName(std::string_view s) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t slash = s.find('/');
    parts.push_back(s.substr(0, slash));
    if (slash == std::string_view::npos) break;
    s = s.substr(slash + 1);
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    if (!IsPathComponent(parts[i])) return false;
  }
  return IsPathComponent(parts[0]) || (parts.size() > 1 && IsDomain(parts[0]));
}

// [\w][\w.-]{0,127}
bool IsTag(std::string_view s) {
  if (s.empty() || s.size() > 128 || !IsWord(s[0])) return false;
  for (char c : s) {
    if (!IsWord(c) && c != '.' && c != '-') return false;
  }
  return true;
}

// [A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)* : [0-9a-fA-F]{32,}
bool IsDigest(std::string_view s) {
  const size_t colon = s.find(':');
  if (colon == std::string_view::npos) return false;
  const std::string_view algorithm = s.substr(0, colon);
  const std::string_view hex = s.substr(colon + 1);
  if (hex.size() < 32) return false;
  for (char c : hex) {
    if (!IsHex(c)) return false;
  }
  bool at_start = true;  // of a component: a letter must come
  for (char c : algorithm) {
    if (at_start) {
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return false;
      at_start = false;
    } else if (c == '-' || c == '_' || c == '+' || c == '.') {
      at_start = true;
    } else if (!IsAlnum(c)) {
      return false;
    }
  }
  return !at_start;
}

// name (: tag)? (@ digest)?
bool IsImageReference(std::string_view s) {
  if (const size_t at = s.find('@'); at != std::string_view::npos) {
    if (!IsDigest(s.substr(at + 1))) return false;
    s = s.substr(0, at);
  }
  const size_t slash = s.rfind('/');
  const size_t colon = s.rfind(':');
  if (colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash)) {
    if (!IsTag(s.substr(colon + 1))) return false;
    s = s.substr(0, colon);
  }
  return IsName(s);
}

bool HasControl(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

Status CheckPath(const std::string& field, const std::string& path) {
  if (path.empty() || path.front() != '/') {
    return Status::InvalidArgument(field + ": '" + path + "' must be an absolute path");
  }
  if (HasControl(path)) {
    return Status::InvalidArgument(field + ": the path contains a control character; rename it");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateImageRef(const std::string& ref, const std::string& field) {
  const std::string fix =
      ": use a reference such as docker.io/library/ubuntu:22.04, "
      "localhost/myimage:1 or an image id";
  if (ref.empty()) return Status::InvalidArgument(field + ": empty" + fix);
  if (ref.size() > 512)
    return Status::InvalidArgument(field + ": longer than 512 characters" + fix);
  if (ref.front() == '-') {
    return Status::InvalidArgument(field + ": '" + ref +
                                   "' starts with '-', which a tool would read as an option; "
                                   "an image reference never does" +
                                   fix);
  }
  if (HasControl(ref) || !IsImageReference(ref)) {
    return Status::InvalidArgument(field + ": '" + ref + "' is not an image reference" + fix);
  }
  return Status::Ok();
}

Status ValidateEnvName(const std::string& name, const std::string& field) {
  bool ok = !name.empty() && name.size() <= 255 &&
            (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') ok = false;
  }
  if (!ok) {
    return Status::InvalidArgument(
        field + ": '" + name +
        "' is not a variable name: use letters, digits and '_', starting with a letter or '_'");
  }
  return Status::Ok();
}

Status ValidateProjectName(const std::string& project, const std::string& field) {
  // Not echoed: it may be long, or made to move the cursor of whoever reads the answer.
  // Nor anything that prints like another name: invisible or reordering characters, or
  // spaces at either end ("vision " lists as "vision").
  if (project.size() > kMaxProjectName || HasControlCharacter(project) ||
      HasInvisibleCharacter(project) || project.starts_with(' ') || project.ends_with(' ')) {
    return Status::InvalidArgument(field +
                                   ": a project name of 1..64 bytes without control or "
                                   "invisible characters or spaces at either end, e.g. vision");
  }
  if (project == "(none)") {
    return Status::InvalidArgument(field +
                                   ": '(none)' is how /metrics labels jobs without a "
                                   "project; name the project otherwise, or leave it out");
  }
  return Status::Ok();
}

// A share of one GPU is sized one way: gpu_milli (a fraction) or gpu_memory_bytes (a size
// in bytes, at least 1 MiB: a smaller one is a unit mistake, e.g. 10 meant as 10 GiB).
// Checked at submit only: a stored job from before these checks still loads.
Status ValidateGpuShare(const ResourceRequest& r) {
  if (r.gpu_memory_bytes > 0 && r.gpu_memory_bytes < kMinGpuMemoryBytes) {
    return Status::InvalidArgument(
        "request.gpu_memory_bytes: " + std::to_string(r.gpu_memory_bytes) +
        " is below 1 MiB (1048576); the field counts bytes, e.g. 21474836480 for 20 GiB");
  }
  if (r.gpu_memory_bytes > 0 && r.gpu_milli != 1000) {
    return Status::InvalidArgument(
        "request.gpu_milli, request.gpu_memory_bytes: both size a share of one GPU; give one "
        "or the other (gpu_milli for a fraction of the GPU, gpu_memory_bytes for the memory "
        "it needs)");
  }
  return Status::Ok();
}

// Checked at submit only, as ValidateGpuShare: a job stored with a longer list loads.
Status ValidateNodeChoice(const ResourceRequest& r) {
  for (const auto& [field, names, other] :
       {std::tuple{"nodelist", &r.nodelist, "exclude the few it may not use (exclude)"},
        std::tuple{"exclude", &r.exclude, "name the few it may use (nodelist)"}}) {
    if (names->size() > kMaxNodeNames) {
      return Status::InvalidArgument(
          std::string("request.") + field + ": at most " + std::to_string(kMaxNodeNames) +
          " node names (got " + std::to_string(names->size()) + "); name fewer, or " + other +
          ", or choose nodes by their GPUs (gpu_models, min_capability)");
    }
  }
  return Status::Ok();
}

// Checked at submit only, as ValidateGpuShare.
Status ValidateMemorySizes(const Job& job) {
  const uint64_t mem = job.request.memory_bytes;
  if (mem > 0 && mem < kMinMemoryBytes) {
    return Status::InvalidArgument(
        "request.memory_bytes: " + std::to_string(mem) +
        " is below 1 MiB (1048576); the field counts bytes, e.g. 17179869184 for 16 GiB (0 or "
        "absent: no explicit request)");
  }
  if (job.shm_bytes > 0 && job.shm_bytes < kMinMemoryBytes) {
    return Status::InvalidArgument(
        "shm_bytes: " + std::to_string(job.shm_bytes) +
        " is below 1 MiB (1048576); the field counts bytes, e.g. 1073741824 for 1 GiB (0 or "
        "absent: podman's 64 MiB)");
  }
  return Status::Ok();
}

Status ValidateSubmission(const Job& job) {
  GP_RETURN_IF_ERROR(ValidateProjectName(job.project));
  if (job.request.cpu_milli <= 0) {
    // No CPU asked is none counted: such jobs would pile up on a node without bound, and
    // their cgroups would have no CPU limit.
    return Status::InvalidArgument(
        "request.cpu_milli: every task asks for some CPU; give at least 1 (0.001 CPU, "
        "--cpus 0.001), or leave it out for the default of one CPU");
  }
  GP_RETURN_IF_ERROR(ValidateGpuShare(job.request));
  GP_RETURN_IF_ERROR(ValidateMemorySizes(job));
  GP_RETURN_IF_ERROR(ValidateNodeChoice(job.request));
  if (!job.image.empty()) GP_RETURN_IF_ERROR(ValidateImageRef(job.image));
  for (const auto& [k, v] : job.env) {
    GP_RETURN_IF_ERROR(ValidateEnvName(k, "env." + k));
    if (v.find('\0') != std::string::npos) {
      return Status::InvalidArgument("env." + k + ": the value contains a NUL character");
    }
  }
  for (const std::string& a : job.command) {
    if (a.find('\0') != std::string::npos) {
      return Status::InvalidArgument("command: an argument contains a NUL character");
    }
  }
  if (!job.workdir.empty()) GP_RETURN_IF_ERROR(CheckPath("workdir", job.workdir));
  if (!job.submit_key.empty()) {
    bool ok = job.submit_key.size() <= 128;
    for (char c : job.submit_key) {
      ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
                  c == ':');
    }
    if (!ok) {
      return Status::InvalidArgument(
          "submit_key: 1..128 letters, digits and - _ . : (a random id the client makes, e.g. "
          "a UUID)");
    }
  }
  if (!job.interactive.empty() && job.interactive != "run" && job.interactive != "alloc") {
    return Status::InvalidArgument("interactive: '" + job.interactive +
                                   "' is not run or alloc (gpupool run, gpupool alloc)");
  }
  if (job.pty && job.interactive != "run") {
    return Status::InvalidArgument(
        "pty: a terminal is for the command of gpupool run; with gpupool alloc, use gpupool "
        "exec --pty");
  }
  if (job.client_keepalive && job.interactive != "alloc") {
    return Status::InvalidArgument(
        "client_keepalive: only a gpupool alloc job (interactive \"alloc\") has a client that "
        "says it is alive; drop it");
  }
  if (!job.interactive.empty() && job.mpi) {
    return Status::InvalidArgument("mpi: gpupool " + job.interactive +
                                   " holds every task already; run mpirun in it without --mpi");
  }
  if (!job.interactive.empty() && !job.array.empty()) {
    return Status::InvalidArgument(
        "array: an interactive job is one job; submit arrays with "
        "gpupool submit --array");
  }
  if (!job.interactive.empty() && job.preemptible) {
    return Status::InvalidArgument("preemptible: gpupool " + job.interactive +
                                   " is interactive and is never preempted; drop --preemptible");
  }
  if (!job.preemptible && (job.min_runtime_s > 0 || job.preempt_grace_s > 0)) {
    const std::string field = job.min_runtime_s > 0 ? "min_runtime_s" : "preempt_grace_s";
    // An interactive job cannot be made preemptible: telling it to add --preemptible
    // sent the user from one refusal to the other.
    if (!job.interactive.empty()) {
      return Status::InvalidArgument(field + ": gpupool " + job.interactive +
                                     " is interactive and is never preempted; drop "
                                     "--min-runtime and --grace");
    }
    return Status::InvalidArgument(
        field + ": --min-runtime and --grace are for a preemptible job; add --preemptible");
  }
  if (job.warn_signal == 0 && (job.warn_time_s > 0 || job.warn_main_only)) {
    return Status::InvalidArgument(
        std::string(job.warn_time_s > 0 ? "warn_time_s" : "warn_main_only") +
        ": says when or to whom warn_signal is sent; give warn_signal "
        "(--signal SIG[@SECONDS])");
  }
  if (job.warn_signal != 0 && !job.interactive.empty()) {
    return Status::InvalidArgument("warn_signal: gpupool " + job.interactive +
                                   " runs its commands through gpupool exec, which --signal does "
                                   "not reach; submit a batch job (gpupool submit) for it");
  }
  if (job.warn_signal != 0 && job.time_limit_s == 0) {
    return Status::InvalidArgument(
        "warn_signal: --signal is sent a time before the time limit, and the job has none; "
        "give --time (time_limit_s)");
  }
  if (job.warn_signal != 0 && job.warn_time_s >= job.time_limit_s) {
    return Status::InvalidArgument(
        "warn_time_s: --signal's " + std::to_string(job.warn_time_s) +
        " s before the time limit is no earlier than the start (time limit " +
        std::to_string(job.time_limit_s) +
        " s), before the job could catch the signal; give fewer seconds (SIG@SECONDS, "
        "default 60) or a longer --time");
  }
  if (job.interactive == "alloc" && !job.command.empty()) {
    return Status::InvalidArgument(
        "command: gpupool alloc runs no command; enter the allocation with gpupool exec");
  }
  if (job.shm_bytes > 0 && job.image.empty() && job.environment.empty()) {
    return Status::InvalidArgument(
        "shm_bytes: --shm-size sizes a container's /dev/shm; add --image REF or --env "
        "NAME:VERSION, or drop it (a process job uses the node's /dev/shm)");
  }
  for (size_t i = 0; i < job.mounts.size(); ++i) {
    const std::string at = "mounts[" + std::to_string(i) + "]";
    GP_RETURN_IF_ERROR(CheckPath(at + ".source", job.mounts[i].source));
    GP_RETURN_IF_ERROR(CheckPath(at + ".target", job.mounts[i].target));
  }
  return ValidateBatchIo(job);
}

}  // namespace gpupool::jobs
