#include "cli/agent_flags.h"

#include <cstdlib>

#include "agent/mps.h"
#include "cli/client/units.h"

namespace gpupool::cli {

void AddContainerFlags(CLI::App* cmd, ContainerFlags* f) {
  cmd->add_option("--gpu-enforcement", f->gpu_enforcement,
                  "how GPU shares are held to their size: auto (MPS on NVIDIA GPUs without MIG "
                  "where nvidia-cuda-mps-control exists, else the kernel's dmem controller "
                  "where --dmem-capacity lists the GPU, else NVML's per-cgroup memory limits "
                  "where the driver has them), mps (required), dmem (required), none "
                  "(scheduled, not enforced)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "mps", "dmem", "none"}));
  cmd->add_option("--dmem-capacity", f->dmem_capacity,
                  "where the kernel lists the dmem cgroup controller's regions (cgroup v2's "
                  "root dmem.capacity)")
      ->type_name("FILE")
      ->capture_default_str();
  cmd->add_option("--gpu-mem-slack", f->gpu_mem_slack,
                  "the GPU memory watch: a share whose processes use more GPU memory than its "
                  "share plus this much (room for the CUDA context) is killed and fails, "
                  "saying so; seen in the telemetry rounds (--telemetry-interval); off: no "
                  "watch")
      ->type_name("SIZE|off")
      ->capture_default_str();
  cmd->add_option("--health-check", f->health_check,
                  "the node's health program (a path), run as root before the node takes work "
                  "and every --health-check-interval seconds: 'gpu=INDEX bad REASON' lines "
                  "cordon GPUs, a non-zero exit or 'node bad REASON' drains the node, a pass "
                  "returns them (docs/health.md)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--health-check-interval", f->health_check_interval,
                  "seconds between runs of the health program")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--health-check-timeout", f->health_check_timeout,
                  "seconds the health program may run before it is killed (and the node drained)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--disk-min-free", f->disk_min_free,
                  "the room the state directory's filesystem must keep (a size, a percentage of "
                  "it, or off); below it the node is drained until the room is back; auto: 1G "
                  "or 5%, the smaller")
      ->type_name("SIZE|PCT%|auto|off")
      ->capture_default_str();
  cmd->add_option("--disk-check-interval", f->disk_check_interval,
                  "seconds between checks of the state directory's free space (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400));
  cmd->add_option("--mps-control", f->mps_control,
                  "path of nvidia-cuda-mps-control (default: looked up on PATH, "
                  "/usr/local/nvidia/bin, /usr/bin)");
  cmd->add_option("--cdi-kind", f->cdi_kind,
                  "kind of the CDI spec the agent writes for container jobs (VENDOR/CLASS)")
      ->capture_default_str();
  cmd->add_option("--dev-root", f->dev_root,
                  "where the host's GPU device nodes live (stand-ins for fake nodes)")
      ->capture_default_str();
  cmd->add_option("--podman", f->podman, "podman binary for container jobs")->capture_default_str();
  cmd->add_option("--podman-arg", f->podman_args,
                  "global podman argument, repeatable: --podman-arg=--root --podman-arg=DIR")
      ->allow_extra_args(false);
  cmd->add_option("--fake-cpus", f->fake_cpus,
                  "CPUs the node offers jobs, e.g. 16 (default: the host's online CPUs); for "
                  "fake nodes, so that two agents on one machine look like two machines")
      ->type_name("N");
  cmd->add_option("--fake-mem", f->fake_mem,
                  "memory the node offers jobs, e.g. 64G (default: the host's)")
      ->type_name("SIZE");
  cmd->add_flag("--allow-unisolated-devices", f->allow_unisolated_devices,
                "start process jobs even when the GPUs they were not given cannot be denied "
                "(missing device nodes, no devices cgroup); by default such jobs fail");
  cmd->add_flag("--shared-dev-shm", f->shared_dev_shm,
                "process jobs share the host's /dev/shm (what they leave there outlives them "
                "and other users' jobs may read it); by default each gets its own tmpfs, "
                "charged to its memory limit and freed when it ends");
}

// --disk-min-free: a size, a percentage, auto or off (0 is off too).
Result<agent::DiskMinFree> ParseDiskMinFree(const std::string& text) {
  agent::DiskMinFree m;
  const std::string fix = " (a size such as 2G, a percentage such as 5%, auto or off)";
  if (text == "auto") return m;
  if (text == "off" || text == "0") {
    m.kind = agent::DiskMinFree::Kind::kOff;
    return m;
  }
  if (text.ends_with('%')) {
    char* end = nullptr;
    const std::string number = text.substr(0, text.size() - 1);
    const double pct = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !(pct > 0 && pct < 100)) {
      return Status::InvalidArgument("--disk-min-free " + text +
                                     ": a percentage above 0 and below 100" + fix);
    }
    m.kind = agent::DiskMinFree::Kind::kPercent;
    m.percent = pct;
    return m;
  }
  Result<uint64_t> bytes = cli::ParseMemorySize(text);
  if (!bytes.ok()) {
    return Status::InvalidArgument("--disk-min-free " + text + ": " + bytes.status().message() +
                                   fix);
  }
  m.kind = *bytes == 0 ? agent::DiskMinFree::Kind::kOff : agent::DiskMinFree::Kind::kBytes;
  m.bytes = *bytes;
  return m;
}

Status ApplyContainerFlags(const ContainerFlags& f, agent::NodeAgentOptions* o) {
  if (!f.fake_cpus.empty()) {
    Result<int64_t> milli = cli::ParseCpus(f.fake_cpus);
    if (!milli.ok() || *milli <= 0) {
      return Status::InvalidArgument("--fake-cpus " + f.fake_cpus +
                                     ": a number of CPUs above 0, e.g. 16 or 0.5");
    }
    o->cpu_milli = *milli;
  }
  if (!f.fake_mem.empty()) {
    Result<uint64_t> bytes = cli::ParseMemorySize(f.fake_mem);
    if (!bytes.ok()) {
      return Status::InvalidArgument("--fake-mem " + f.fake_mem + ": " + bytes.status().message());
    }
    if (*bytes == 0) {
      return Status::InvalidArgument("--fake-mem " + f.fake_mem +
                                     ": a size of at least 1M, e.g. 64G (binary units)");
    }
    o->memory_mib = static_cast<int64_t>(*bytes >> 20);
  }
  if (f.gpu_mem_slack == "off") {
    o->gpu_mem_slack_bytes = -1;
  } else {
    // A size as every memory flag takes it (a unit, at least 1M, or 0: no slack).
    Result<uint64_t> bytes = cli::ParseMemorySize(f.gpu_mem_slack);
    if (bytes.ok() && *bytes > (uint64_t{1} << 50)) {
      bytes = Status::InvalidArgument("more than 1P; write e.g. 1G or 512M");
    }
    if (!bytes.ok()) {
      return Status::InvalidArgument("--gpu-mem-slack " + f.gpu_mem_slack + ": " +
                                     bytes.status().message() + " (or off: no GPU memory watch)");
    }
    o->gpu_mem_slack_bytes = static_cast<int64_t>(*bytes);
  }
  // A control program given but not there, or MPS required with none found: a mistake in
  // the agent's configuration, refused before it starts (exit status 2).
  const bool mps = f.gpu_enforcement == "mps";
  if (!f.mps_control.empty() && agent::FindMpsControl(f.mps_control).empty()) {
    return Status::InvalidArgument(
        "--mps-control " + f.mps_control + ": not an executable file" +
        (mps ? ", and --gpu-enforcement mps needs it; give the path of nvidia-cuda-mps-control, "
               "or run with --gpu-enforcement none"
             : "; give the path of nvidia-cuda-mps-control, or leave it out to look it up"));
  }
  if (mps && f.mps_control.empty() && agent::FindMpsControl("").empty()) {
    return Status::InvalidArgument(
        "--gpu-enforcement mps: nvidia-cuda-mps-control is not on PATH, in "
        "/usr/local/nvidia/bin or /usr/bin; install NVIDIA's MPS (part of the driver's "
        "utilities), give --mps-control PATH, or run with --gpu-enforcement none");
  }
  Result<agent::DiskMinFree> disk = ParseDiskMinFree(f.disk_min_free);
  if (!disk.ok()) return disk.status();
  o->disk_min_free = *disk;
  o->disk_check_interval_s = f.disk_check_interval;
  o->allow_unisolated_devices = f.allow_unisolated_devices;
  o->shared_dev_shm = f.shared_dev_shm;
  o->cdi_kind = f.cdi_kind;
  o->dev_root = f.dev_root;
  o->podman = f.podman;
  o->podman_args = f.podman_args;
  o->gpu_enforcement = f.gpu_enforcement;
  o->mps_control = f.mps_control;
  o->dmem_capacity = f.dmem_capacity;
  o->health_check = f.health_check;
  o->health_check_interval_s = f.health_check_interval;
  o->health_check_timeout_s = f.health_check_timeout;
  return Status::Ok();
}

}  // namespace gpupool::cli
