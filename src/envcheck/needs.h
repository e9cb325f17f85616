// The inspector's bridge to the pool: what a node offers (from discovery), what a job's
// environment needs (from an inspection report, kept in the job as jobs::EnvNeeds), the
// check of one against the other, and the inspection of podman images and directories.
//
// The checks are pure; InspectImage runs podman (`image inspect`, `image mount`, `image
// unmount`) and reads the mounted tree, so it needs rootful podman or a user namespace
// where the mount is visible. Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "envcheck/inspector.h"
#include "gpu/gpu_info.h"
#include "jobs/job.h"

namespace gpupool::envcheck {

// What `node` offers a job's environment: its NVIDIA driver and the CUDA it supports,
// the compute capabilities of its NVIDIA GPUs and the gfx targets of its AMD GPUs.
NodeOffer OfferFromNode(const gpu::NodeInfo& node, const std::string& name);

// The summary of a report that travels with a job; `source` says what was inspected.
jobs::EnvNeeds NeedsFromReport(const EnvReport& report, const std::string& source);

// OK when the node can run an environment with these needs; else FailedPrecondition with
// an actionable message (see CheckNode). Empty needs run anywhere.
Status CheckNeeds(const jobs::EnvNeeds& needs, const NodeOffer& node);

// Runs argv (no shell) and returns its standard output; Unavailable naming its last error
// line when it cannot be run, exits non-zero or outlasts timeout_ms (then it is killed).
Result<std::string> RunCapture(const std::vector<std::string>& argv, int timeout_ms = 120'000);

// An image of podman's local store, mounted read-only while this object lives.
// `podman_args` are global podman flags put before the subcommand (e.g. --root DIR).
class MountedImage {
 public:
  // `known_id`: the image's id when the caller already looked it up (saves a podman call).
  static Result<MountedImage> Mount(const std::string& ref,
                                    const std::vector<std::string>& podman_args,
                                    const std::string& known_id = "");
  MountedImage(MountedImage&& other) noexcept;
  MountedImage& operator=(MountedImage&&) = delete;
  MountedImage(const MountedImage&) = delete;
  ~MountedImage();  // NOLINT(bugprone-exception-escape): see needs.cc

  const std::string& path() const { return path_; }
  const std::string& id() const { return id_; }  // the image's full id

 private:
  MountedImage() = default;
  std::string ref_;
  std::string path_;
  std::string id_;
  std::vector<std::string> podman_args_;
};

// The image's id in podman's local store; NotFound (with how to load it) when absent.
Result<std::string> ImageId(const std::string& ref, const std::vector<std::string>& podman_args);

// Inspects an image (mounted for the time of the call) or a directory tree.
Result<jobs::EnvNeeds> InspectImageNeeds(const std::string& ref,
                                         const std::vector<std::string>& podman_args,
                                         const std::string& known_id = "");
Result<jobs::EnvNeeds> InspectDirNeeds(const std::string& dir);

}  // namespace gpupool::envcheck
