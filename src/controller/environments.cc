#include "controller/environments.h"

#include <grp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "common/json.h"
#include "common/subprocess.h"
#include "envcheck/dir_walk.h"
#include "envcheck/needs.h"
#include "jobs/job_json.h"

namespace gpupool::controller {
namespace {

bool NamePart(const std::string& s) {
  if (s.empty() || s.size() > 64 || !std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

// The supplementary groups of `user` with primary group `gid` (just `gid` when the
// group database does not know the user).
std::vector<gid_t> GroupsOf(const std::string& user, gid_t gid) {
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (::getgrouplist(user.c_str(), gid, groups.data(), &n) < 0) {
    if (n <= 64) return {gid};
    groups.resize(static_cast<size_t>(n));
    if (::getgrouplist(user.c_str(), gid, groups.data(), &n) < 0) return {gid};
  }
  groups.resize(static_cast<size_t>(std::max(n, 0)));
  return groups;
}

class PodmanInspector final : public EnvInspector {
 public:
  PodmanInspector(std::vector<std::string> args, const Clock* clock, int64_t ttl_us,
                  DirInspectLimits limits)
      : args_(std::move(args)), clock_(clock), ttl_us_(ttl_us), limits_(std::move(limits)) {}

  Result<std::string> ImageId(const std::string& ref) override {
    const int64_t now = clock_->MonotonicMicros();
    {
      std::lock_guard lock(mu_);
      if (auto it = ref_ids_.find(ref); it != ref_ids_.end() && now - it->second.second < ttl_us_) {
        return it->second.first;
      }
    }
    GP_ASSIGN_OR_RETURN(std::string id, envcheck::ImageId(ref, args_));
    std::lock_guard lock(mu_);
    ref_ids_[ref] = {id, now};
    return id;
  }

  Result<jobs::EnvNeeds> InspectImage(const std::string& ref) override {
    GP_ASSIGN_OR_RETURN(std::string id, ImageId(ref));
    {
      std::lock_guard lock(mu_);
      if (auto it = by_id_.find(id); it != by_id_.end()) {
        jobs::EnvNeeds n = it->second;
        n.source = "image " + ref + " (" + id.substr(0, 12) + ")";
        return n;
      }
    }
    GP_ASSIGN_OR_RETURN(jobs::EnvNeeds needs, envcheck::InspectImageNeeds(ref, args_, id));
    std::lock_guard lock(mu_);
    by_id_[id] = needs;
    return needs;
  }

  Result<DirInspection> InspectDir(const std::string& dir, const DirReader& reader) override {
    std::optional<SpawnOptions::RunAs> run_as;
    std::string who = "user " + reader.user;
    if (reader.as_root) {
      who = "the server (running as uid " + std::to_string(::geteuid()) + ")";
    } else if (::geteuid() == 0) {
      run_as = SpawnOptions::RunAs{reader.uid, reader.gid, GroupsOf(reader.user, reader.gid)};
    }  // else: a server that is not root has no other permissions to lend (see header)
    GP_ASSIGN_OR_RETURN(envcheck::DirWalkAnswer a, Walk(dir, who, run_as, false));
    return DirInspection{std::move(a.needs), std::move(a.digest)};
  }

  Result<std::string> DigestDir(const std::string& dir) override {
    GP_ASSIGN_OR_RETURN(envcheck::DirWalkAnswer a, Walk(dir, "the server", std::nullopt, true));
    return a.digest;
  }

  void Stop() override { stopping_ = true; }

 private:
  Result<envcheck::DirWalkAnswer> Walk(const std::string& dir, const std::string& who,
                                       const std::optional<SpawnOptions::RunAs>& run_as,
                                       bool digest_only) {
    if (stopping_) return Status::Unavailable("the server is shutting down: try again later");
    envcheck::DirWalkRequest req;
    req.dir = dir;
    req.who = who;
    req.max_files = limits_.max_files;
    req.max_file_bytes = limits_.max_file_bytes;
    req.max_total_bytes = limits_.max_total_bytes;
    req.timeout_ms = limits_.timeout_ms;
    req.digest_only = digest_only;
    return envcheck::WalkDirInChild(limits_.self_exe, req, run_as,
                                    [this] { return stopping_.load(); });
  }

  const std::vector<std::string> args_;
  const Clock* clock_;
  const int64_t ttl_us_;
  const DirInspectLimits limits_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::map<std::string, std::pair<std::string, int64_t>> ref_ids_;  // ref -> (id, when)
  std::map<std::string, jobs::EnvNeeds> by_id_;
};

Status CheckMounts(const jobs::Job& job) {
  if (!job.mounts.empty() && job.image.empty()) {
    return Status::InvalidArgument(
        "mounts: only container jobs take mounts; give --image REF or an image environment, "
        "or drop --mount (process jobs see the host's files directly)");
  }
  for (size_t i = 0; i < job.mounts.size(); ++i) {
    const jobs::Mount& m = job.mounts[i];
    const std::string where = "mounts[" + std::to_string(i) + "]";
    for (const auto& [field, path] : {std::pair{"source", &m.source}, {"target", &m.target}}) {
      if (path->empty() || path->front() != '/') {
        return Status::InvalidArgument(where + "." + field + ": '" + *path +
                                       "' must be an absolute path");
      }
      if (path->find("/../") != std::string::npos || path->ends_with("/..") ||
          path->find(':') != std::string::npos || path->find(',') != std::string::npos) {
        return Status::InvalidArgument(where + "." + field + ": '" + *path +
                                       "' may not contain '..', ':' or ','");
      }
    }
    if (m.target == "/") {
      return Status::InvalidArgument(where + ".target: cannot mount over the container's /");
    }
  }
  return Status::Ok();
}

// FailedPrecondition unless the directory of environment `e` is as it was registered.
Status CheckDirUnchanged(const store::EnvironmentRecord& e, EnvInspector* inspector) {
  const std::string ref = e.name + ":" + e.version;
  if (e.dir_digest.empty()) {
    return Status::FailedPrecondition("environment " + ref +
                                      " was registered before directory environments were pinned, "
                                      "so a change to its directory " +
                                      e.location + " could not be told: ask its owner (" + e.owner +
                                      ") to register it again as a new version");
  }
  Result<std::string> now = inspector->DigestDir(e.location);
  if (!now.ok()) {
    if (now.status().code() == StatusCode::kUnavailable) return now.status();
    return Status::FailedPrecondition("environment " + ref + " cannot be checked (" +
                                      now.status().message() + "): ask its owner (" + e.owner +
                                      ") to register a new version");
  }
  if (*now != e.dir_digest) {
    return Status::FailedPrecondition(
        "environment " + ref + " changed since it was registered (its directory " + e.location +
        " differs): ask its owner (" + e.owner + ") to register a new version");
  }
  return Status::Ok();
}

}  // namespace

std::unique_ptr<EnvInspector> NewPodmanInspector(std::vector<std::string> podman_args,
                                                 const Clock* clock, int64_t ref_ttl_us,
                                                 DirInspectLimits limits) {
  return std::make_unique<PodmanInspector>(std::move(podman_args), clock, ref_ttl_us,
                                           std::move(limits));
}

Result<std::pair<std::string, std::string>> ParseEnvRef(const std::string& ref,
                                                        const std::string& field) {
  const auto colon = ref.rfind(':');
  const std::string name = colon == std::string::npos ? ref : ref.substr(0, colon);
  const std::string version = colon == std::string::npos ? "" : ref.substr(colon + 1);
  const auto slash = name.find('/');
  const bool name_ok = slash == std::string::npos
                           ? NamePart(name)
                           : NamePart(name.substr(0, slash)) && NamePart(name.substr(slash + 1));
  if (!name_ok || !NamePart(version)) {
    return Status::InvalidArgument(field + ": '" + ref +
                                   "' is not NAME:VERSION (1-64 letters, digits, '.', '_' or "
                                   "'-' each, the name with an optional PREFIX/), e.g. "
                                   "torch:2.4 or site/torch:2.4");
  }
  return std::pair{name, version};
}

Result<jobs::EnvNeeds> Environments::NeedsOf(const std::string& kind, const std::string& location,
                                             const Caller& caller) {
  if (kind == "image") {
    if (location.empty()) return Status::InvalidArgument("image: give an image reference");
    return inspector_->InspectImage(location);
  }
  if (kind == "dir") {
    if (location.empty() || location.front() != '/') {
      return Status::InvalidArgument("dir: '" + location + "' must be an absolute path");
    }
    GP_ASSIGN_OR_RETURN(DirInspection d, inspector_->InspectDir(location, DirReader::For(caller)));
    return std::move(d.needs);
  }
  if (kind == "environment") {
    GP_ASSIGN_OR_RETURN(store::EnvironmentRecord e, Get(location));
    GP_ASSIGN_OR_RETURN(Json j, ParseJson(e.needs_json, "environment " + location));
    return jobs::NeedsFromJson(j, "environment " + location);
  }
  return Status::InvalidArgument("kind: '" + kind + "' is not image, dir or environment");
}

Status Environments::CheckNameOwner(const std::string& name, const std::string& ref,
                                    const Caller& caller) {
  if (name.find('/') != std::string::npos) {
    if (caller.admin) return Status::Ok();
    return Status::PermissionDenied(
        "name: " + ref +
        " is a protected site name (it has a '/'); only admins register "
        "those: pick a name without '/', e.g. " +
        name.substr(name.find('/') + 1) + ref.substr(name.size()));
  }
  GP_ASSIGN_OR_RETURN(std::vector<store::EnvironmentRecord> all, store_->ListEnvironments());
  const store::EnvironmentRecord* first = nullptr;
  for (const store::EnvironmentRecord& e : all) {
    if (e.name == name && (first == nullptr || e.created_us < first->created_us)) first = &e;
  }
  if (first == nullptr || first->owner == caller.user) return Status::Ok();
  return Status::PermissionDenied("name: environment name " + name + " belongs to " + first->owner +
                                  " (who added " + name + ":" + first->version +
                                  "); only they add versions of it: ask them, or pick another "
                                  "name, e.g. " +
                                  caller.user + "-" + ref);
}

Result<store::EnvironmentRecord> Environments::Add(const std::string& ref, const std::string& kind,
                                                   const std::string& location,
                                                   const Caller& caller) {
  GP_ASSIGN_OR_RETURN(auto parts, ParseEnvRef(ref, "name"));
  if (kind != "image" && kind != "dir") {
    return Status::InvalidArgument("give exactly one of image (--image REF) or dir (--dir PATH)");
  }
  GP_RETURN_IF_ERROR(CheckNameOwner(parts.first, ref, caller));
  GP_ASSIGN_OR_RETURN(std::optional<store::EnvironmentRecord> existing,
                      store_->FindEnvironment(parts.first, parts.second));
  if (existing) {
    return Status::AlreadyExists("environment " + ref +
                                 " already exists; environments are immutable, add a new "
                                 "version instead");
  }
  store::EnvironmentRecord rec;
  rec.name = parts.first;
  rec.version = parts.second;
  rec.kind = kind;
  rec.location = location;
  rec.owner = caller.user;
  const std::string what = "cannot inspect " + kind + " '" + location + "'";
  if (kind == "image") {
    // The id first: the needs are then those of the image the environment will run.
    Result<std::string> id = inspector_->ImageId(location);
    if (!id.ok()) return id.status().WithContext(what);
    rec.image_id = *id;
    Result<jobs::EnvNeeds> needs = inspector_->InspectImage(location);
    if (!needs.ok()) return needs.status().WithContext(what);
    Result<std::string> again = inspector_->ImageId(location);
    if (!again.ok() || *again != rec.image_id) {
      return Status::FailedPrecondition("image '" + location +
                                        "' was re-tagged while it was inspected: try again");
    }
    rec.needs_json = DumpJson(jobs::NeedsToJson(*needs));
  } else {
    if (location.empty() || location.front() != '/') {
      return Status::InvalidArgument("dir: '" + location + "' must be an absolute path");
    }
    Result<DirInspection> d = inspector_->InspectDir(location, DirReader::For(caller));
    if (!d.ok()) return d.status().WithContext(what);
    rec.needs_json = DumpJson(jobs::NeedsToJson(d->needs));
    rec.dir_digest = d->digest;
  }
  std::lock_guard lock(add_mu_);  // no one took the name while we inspected
  GP_RETURN_IF_ERROR(CheckNameOwner(parts.first, ref, caller));
  rec.created_us = clock_->NowMicros();
  GP_RETURN_IF_ERROR(store_->PutEnvironment(rec));
  return rec;
}

Result<std::vector<store::EnvironmentRecord>> Environments::List() {
  return store_->ListEnvironments();
}

Result<store::EnvironmentRecord> Environments::Get(const std::string& ref) {
  GP_ASSIGN_OR_RETURN(auto parts, ParseEnvRef(ref, "environment"));
  GP_ASSIGN_OR_RETURN(std::optional<store::EnvironmentRecord> e,
                      store_->FindEnvironment(parts.first, parts.second));
  if (!e) {
    return Status::NotFound("environment " + ref +
                            " is not registered; `gpupool env list` shows those that are, "
                            "`gpupool env add` registers one");
  }
  return *e;
}

Status Environments::Remove(const std::string& ref, const std::string& user, bool admin,
                            const InUseFn& in_use) {
  GP_ASSIGN_OR_RETURN(store::EnvironmentRecord e, Get(ref));
  if (!admin && e.owner != user) {
    return Status::PermissionDenied("environment " + ref + " was added by " + e.owner +
                                    "; only they or an admin may remove it");
  }
  const std::vector<int64_t> jobs = in_use(e.name + ":" + e.version);
  if (!jobs.empty()) {
    std::string ids;
    for (size_t i = 0; i < jobs.size() && i < 10; ++i) {
      ids += (ids.empty() ? "" : ", ") + std::to_string(jobs[i]);
    }
    if (jobs.size() > 10) ids += ", ...";
    return Status::FailedPrecondition("environment " + ref + " is used by " +
                                      std::to_string(jobs.size()) + " queued or running job" +
                                      (jobs.size() == 1 ? "" : "s") + " (" + ids +
                                      "); remove it once they have ended");
  }
  return store_->DeleteEnvironment(e.name, e.version);
}

Status Environments::Resolve(jobs::Job* job) {
  if (!job->environment.empty()) {
    if (!job->image.empty()) {
      return Status::InvalidArgument(
          "image: give either --image REF or --env NAME:VERSION (a named environment), not both");
    }
    GP_ASSIGN_OR_RETURN(store::EnvironmentRecord e, Get(job->environment));  // parses the ref
    job->environment = e.name + ":" + e.version;
    if (e.kind == "image") {
      // The id recorded at registration: re-tagging the reference changes nothing.
      // Records from before ids were recorded run the reference, as they always did.
      job->image = e.image_id.empty() ? e.location : e.image_id;
    } else {
      GP_RETURN_IF_ERROR(CheckDirUnchanged(e, inspector_));
      job->env_dir = e.location;
    }
    GP_ASSIGN_OR_RETURN(Json j, ParseJson(e.needs_json, "environment " + job->environment));
    GP_ASSIGN_OR_RETURN(job->needs, jobs::NeedsFromJson(j, "environment " + job->environment));
    job->needs.source = "environment " + job->environment + " (" + job->needs.source + ")";
  } else if (!job->image.empty()) {
    Result<jobs::EnvNeeds> needs = inspector_->InspectImage(job->image);
    if (needs.ok()) {
      job->needs = std::move(*needs);
    } else {
      // Not inspectable here (e.g. only the nodes have it): the agent checks before launch.
      spdlog::info("image {} not inspected at submit: {}", job->image, needs.status().message());
    }
  }
  return CheckMounts(*job);
}

}  // namespace gpupool::controller
