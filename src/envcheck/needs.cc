#include "envcheck/needs.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "common/strings.h"

extern char** environ;

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

Result<std::string> RunCapture(const std::vector<std::string>& argv) {
  if (argv.empty()) return Status::InvalidArgument("no command to run");
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    return Status::Unavailable("pipe: " + std::string(std::strerror(errno)));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return Status::Unavailable("pipe: " + std::string(std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    ::close(err[0]);
    return Status::Unavailable("cannot run " + argv[0] + ": " + std::strerror(rc));
  }
  std::string stdout_text;
  std::string stderr_text;
  std::array<pollfd, 2> fds = {pollfd{out[0], POLLIN, 0}, pollfd{err[0], POLLIN, 0}};
  int open_fds = 2;
  std::array<char, 4096> buf{};
  while (open_fds > 0) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (pollfd& p : fds) {
      if (p.fd < 0 || p.revents == 0) continue;
      const ssize_t n = ::read(p.fd, buf.data(), buf.size());
      if (n > 0) {
        std::string& dst = p.fd == out[0] ? stdout_text : stderr_text;
        if (dst.size() < (size_t{16} << 20)) dst.append(buf.data(), static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(p.fd);
        p.fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string what = TrimEnd(stderr_text.empty() ? stdout_text : stderr_text);
    return Status::Unavailable(argv[0] + " " + (argv.size() > 1 ? argv[1] : "") + " failed" +
                               (what.empty() ? "" : ": " + what));
  }
  return stdout_text;
}

Result<std::string> ImageId(const std::string& ref, const std::vector<std::string>& podman_args) {
  Result<std::string> id =
      RunCapture(PodmanArgv(podman_args, {"image", "inspect", "--format", "{{.Id}}", ref}));
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
                                         const std::vector<std::string>& podman_args) {
  MountedImage m;
  GP_ASSIGN_OR_RETURN(m.id_, ImageId(ref, podman_args));
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

MountedImage::~MountedImage() {
  if (!path_.empty()) (void)RunCapture(PodmanArgv(podman_args_, {"image", "unmount", id_}));
}

Result<jobs::EnvNeeds> InspectImageNeeds(const std::string& ref,
                                         const std::vector<std::string>& podman_args) {
  GP_ASSIGN_OR_RETURN(MountedImage m, MountedImage::Mount(ref, podman_args));
  GP_ASSIGN_OR_RETURN(EnvReport r, InspectTree(m.path()));
  const std::string short_id = m.id().substr(0, 12);
  return NeedsFromReport(r, "image " + ref + " (" + short_id + ")");
}

Result<jobs::EnvNeeds> InspectDirNeeds(const std::string& dir) {
  GP_ASSIGN_OR_RETURN(EnvReport r, InspectTree(dir));
  return NeedsFromReport(r, "directory " + dir);
}

}  // namespace gpupool::envcheck
