#include "controller/environments.h"

#include <spdlog/spdlog.h>

#include "common/json.h"
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

class PodmanInspector final : public EnvInspector {
 public:
  PodmanInspector(std::vector<std::string> args, const Clock* clock, int64_t ttl_us)
      : args_(std::move(args)), clock_(clock), ttl_us_(ttl_us) {}

  Result<jobs::EnvNeeds> InspectImage(const std::string& ref) override {
    const int64_t now = clock_->MonotonicMicros();
    std::string id;
    {
      std::lock_guard lock(mu_);
      if (auto it = ref_ids_.find(ref); it != ref_ids_.end() && now - it->second.second < ttl_us_) {
        id = it->second.first;
      }
    }
    if (id.empty()) {
      GP_ASSIGN_OR_RETURN(id, envcheck::ImageId(ref, args_));
      std::lock_guard lock(mu_);
      ref_ids_[ref] = {id, now};
    }
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

  Result<jobs::EnvNeeds> InspectDir(const std::string& dir) override {
    return envcheck::InspectDirNeeds(dir);
  }

 private:
  const std::vector<std::string> args_;
  const Clock* clock_;
  const int64_t ttl_us_;
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

}  // namespace

std::unique_ptr<EnvInspector> NewPodmanInspector(std::vector<std::string> podman_args,
                                                 const Clock* clock, int64_t ref_ttl_us) {
  return std::make_unique<PodmanInspector>(std::move(podman_args), clock, ref_ttl_us);
}

Result<std::pair<std::string, std::string>> ParseEnvRef(const std::string& ref,
                                                        const std::string& field) {
  const auto colon = ref.rfind(':');
  const std::string name = colon == std::string::npos ? ref : ref.substr(0, colon);
  const std::string version = colon == std::string::npos ? "" : ref.substr(colon + 1);
  if (!NamePart(name) || !NamePart(version)) {
    return Status::InvalidArgument(field + ": '" + ref +
                                   "' is not NAME:VERSION (1-64 letters, digits, '.', '_' or "
                                   "'-' each), e.g. torch:2.4");
  }
  return std::pair{name, version};
}

Result<jobs::EnvNeeds> Environments::NeedsOf(const std::string& kind, const std::string& location) {
  if (kind == "image") {
    if (location.empty()) return Status::InvalidArgument("image: give an image reference");
    return inspector_->InspectImage(location);
  }
  if (kind == "dir") {
    if (location.empty() || location.front() != '/') {
      return Status::InvalidArgument("dir: '" + location + "' must be an absolute path");
    }
    return inspector_->InspectDir(location);
  }
  if (kind == "environment") {
    GP_ASSIGN_OR_RETURN(store::EnvironmentRecord e, Get(location));
    GP_ASSIGN_OR_RETURN(Json j, ParseJson(e.needs_json, "environment " + location));
    return jobs::NeedsFromJson(j, "environment " + location);
  }
  return Status::InvalidArgument("kind: '" + kind + "' is not image, dir or environment");
}

Result<store::EnvironmentRecord> Environments::Add(const std::string& ref, const std::string& kind,
                                                   const std::string& location,
                                                   const std::string& owner) {
  GP_ASSIGN_OR_RETURN(auto parts, ParseEnvRef(ref, "name"));
  if (kind != "image" && kind != "dir") {
    return Status::InvalidArgument("give exactly one of image (--image REF) or dir (--dir PATH)");
  }
  GP_ASSIGN_OR_RETURN(std::optional<store::EnvironmentRecord> existing,
                      store_->FindEnvironment(parts.first, parts.second));
  if (existing) {
    return Status::AlreadyExists("environment " + ref +
                                 " already exists; environments are immutable, add a new "
                                 "version instead");
  }
  Result<jobs::EnvNeeds> needs = NeedsOf(kind, location);
  if (!needs.ok())
    return needs.status().WithContext("cannot inspect " + kind + " '" + location + "'");
  store::EnvironmentRecord rec;
  rec.name = parts.first;
  rec.version = parts.second;
  rec.kind = kind;
  rec.location = location;
  rec.needs_json = DumpJson(jobs::NeedsToJson(*needs));
  rec.owner = owner;
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
      job->image = e.location;
    } else {
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
