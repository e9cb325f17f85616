#include "envcheck/needs.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/strings.h"
#include "common/subprocess.h"

namespace gpupool::envcheck {
namespace {

std::string TrimEnd(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::vector<std::string> PodmanArgv(const std::vector<std::string>& global,
                                    std::initializer_list<std::string> rest) {
  std::vector<std::string> argv = {"podman"};
  argv.insert(argv.end(), global.begin(), global.end());
  argv.insert(argv.end(), rest.begin(), rest.end());
  return argv;
}

}  // namespace

NodeOffer OfferFromNode(const gpu::NodeInfo& node, const std::string& name) {
  NodeOffer o;
  o.name = name.empty() ? node.hostname : name;
  if (node.nvidia) {
    o.driver_version = node.nvidia->version;
    o.cuda_driver_version = node.nvidia->runtime_version;
  }
  for (const gpu::GpuInfo& g : node.gpus) {
    if (g.vendor == gpu::Vendor::kNvidia && g.compute_capability) {
      std::pair<int, int> cap{g.compute_capability->major, g.compute_capability->minor};
      if (std::find(o.capabilities.begin(), o.capabilities.end(), cap) == o.capabilities.end()) {
        o.capabilities.push_back(cap);
      }
    }
    if (!g.gfx_target.empty() && std::find(o.gfx_targets.begin(), o.gfx_targets.end(),
                                           g.gfx_target) == o.gfx_targets.end()) {
      o.gfx_targets.push_back(g.gfx_target);
    }
  }
  return o;
}

jobs::EnvNeeds NeedsFromReport(const EnvReport& r, const std::string& source) {
  jobs::EnvNeeds n;
  n.source = source;
  n.cuda = r.cuda_version;
  n.min_driver = r.min_driver;
  n.min_driver_minor_compat = r.min_driver_minor_compat;
  n.sass = r.sass;
  n.ptx = r.ptx;
  n.gfx_targets = r.gfx_targets;
  return n;
}

Status CheckNeeds(const jobs::EnvNeeds& needs, const NodeOffer& node) {
  if (needs.empty()) return Status::Ok();
  EnvReport r;
  r.cuda_version = needs.cuda;
  r.min_driver = needs.min_driver;
  r.min_driver_minor_compat = needs.min_driver_minor_compat;
  r.sass = needs.sass;
  r.ptx = needs.ptx;
  r.gfx_targets = needs.gfx_targets;
  return CheckNode(r, node);
}

Result<std::string> RunCapture(const std::vector<std::string>& argv, int timeout_ms) {
  GP_ASSIGN_OR_RETURN(CommandResult r, RunCommandCapture(argv, timeout_ms));
  if (!r.Succeeded()) return Status::Unavailable(r.Failure(argv, timeout_ms));
  return std::move(r.out);
}

Result<std::string> ImageId(const std::string& ref, const std::vector<std::string>& podman_args) {
  Result<std::string> id =
      RunCapture(PodmanArgv(podman_args, {"image", "inspect", "--format", "{{.Id}}", "--", ref}));
  if (!id.ok()) {
    return Status::NotFound("image '" + ref + "' is not in podman's local store on this node (" +
                            id.status().message() +
                            "): pull it, or load it with `podman load` / `podman import`");
  }
  std::string text = TrimEnd(*id);
  if (text.empty()) return Status::NotFound("podman reports no id for image '" + ref + "'");
  return text;
}

Result<MountedImage> MountedImage::Mount(const std::string& ref,
                                         const std::vector<std::string>& podman_args,
                                         const std::string& known_id) {
  MountedImage m;
  if (known_id.empty()) {
    GP_ASSIGN_OR_RETURN(m.id_, ImageId(ref, podman_args));
  } else {
    m.id_ = known_id;
  }
  Result<std::string> path = RunCapture(PodmanArgv(podman_args, {"image", "mount", m.id_}));
  if (!path.ok()) {
    return Status::Unavailable("cannot mount image '" + ref + "' to read it (" +
                               path.status().message() +
                               "); image inspection needs rootful podman");
  }
  m.path_ = TrimEnd(*path);
  m.ref_ = ref;
  m.podman_args_ = podman_args;
  return m;
}

MountedImage::MountedImage(MountedImage&& o) noexcept
    : ref_(std::move(o.ref_)),
      path_(std::move(o.path_)),
      id_(std::move(o.id_)),
      podman_args_(std::move(o.podman_args_)) {
  o.path_.clear();
}

// Only allocation can throw here, and terminating then is right.
MountedImage::~MountedImage() {  // NOLINT(bugprone-exception-escape)
  if (!path_.empty()) (void)RunCapture(PodmanArgv(podman_args_, {"image", "unmount", id_}));
}

Result<jobs::EnvNeeds> InspectImageNeeds(const std::string& ref,
                                         const std::vector<std::string>& podman_args,
                                         const std::string& known_id) {
  GP_ASSIGN_OR_RETURN(MountedImage m, MountedImage::Mount(ref, podman_args, known_id));
  GP_ASSIGN_OR_RETURN(EnvReport r, InspectTree(m.path()));
  const std::string short_id = m.id().substr(0, 12);
  return NeedsFromReport(r, "image " + ref + " (" + short_id + ")");
}

Result<jobs::EnvNeeds> InspectDirNeeds(const std::string& dir) {
  GP_ASSIGN_OR_RETURN(EnvReport r, InspectTree(dir));
  return NeedsFromReport(r, "directory " + dir);
}

}  // namespace gpupool::envcheck
