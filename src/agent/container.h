// Container jobs: how the shim turns a LaunchSpec with an image into a `podman run`, how
// podman's exit status is read back, and how the node's podman is probed once per agent.
//
// The shim runs podman as root (rootful podman: CDI devices, --user for any uid), with
// the job's log files as its standard output and error. The container runs as the job's
// uid:gid with its supplementary groups, no capabilities and no-new-privileges, so a
// setuid binary in a user's image cannot turn the root-run podman into root access to
// the bind mounts. Every mount source (and the workdir) is opened as the job's user
// before launch and podman is given what was opened (mount_source.h): podman must not
// become a way to read what the user cannot.
//
// The argv builder, the exit mapping and the adjustment rules are pure and unit-tested;
// the probe and the podman runners touch the machine. Thread-safe (no shared state).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/launcher.h"
#include "common/status.h"

namespace gpupool::agent {

// "gpupool-job-<job_id>-<attempt>": the container's name, known before it exists, so
// stop/kill/rm can reach it even when podman's own client is gone.
std::string ContainerName(const LaunchSpec& spec);

// podman [global args] SUBCOMMAND...: the prefix of every podman call.
std::vector<std::string> PodmanArgv(const ContainerOptions& options,
                                    const std::vector<std::string>& rest);

// The full `podman run` argv for an image job: --rm --name, --runtime/--ulimit from the
// detected adjustments, --user UID:GID, --group-add per supplementary group (other than
// the primary), --workdir W and a bind mount W:W (when the spec has a workdir), a
// --mount per BindMount (ro where asked), --device per CDI name, the job's variables
// (BuildContainerEnvironment), --cpus/--memory from the request, --network, then IMAGE
// and the command. InvalidArgument for paths podman would misparse (relative, or
// containing ',' or a line break).
//
// Variables: with `env_file` empty, one --env K=V each. With a path, `--env-file PATH`
// instead, for every variable EnvFileCan() hold (the caller writes ContainerEnvFile() to
// PATH, readable by root only): a command line is readable by every user of the node
// through /proc, a job's variables may hold secrets.
//
// `cgroup_parent` (a cgroup path under the hierarchy's root, "/gpupool/job-..."): the
// container's cgroups are made below it (`--cgroup-manager cgroupfs --cgroup-parent`), so
// limits set there, as a dmem share's dmem.max, hold everything the container runs.
Result<std::vector<std::string>> BuildPodmanRunArgv(const LaunchSpec& spec,
                                                    const ContainerOptions& options,
                                                    const std::vector<uint32_t>& groups,
                                                    const std::string& env_file = "",
                                                    const std::string& cgroup_parent = "");

// Whether podman's --env-file format can carry the variable unchanged (one line, a key
// without blanks that does not start with '#').
bool EnvFileCan(const std::string& key, const std::string& value);

// The --env-file text for the job's variables that EnvFileCan() hold.
std::string ContainerEnvFile(const LaunchSpec& spec);

// What a `podman run` exit status means for the job.
struct ContainerExit {
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string reason;  // empty when the command simply exited
};

// Maps podman run's status: 125 = podman could not run the container, 126 = the command
// could not be executed, 127 = not found in the image (reasons quote podman's last
// "Error:" line from `stderr_tail`), 128+N = the container's main process died of
// signal N. Anything else is the command's own exit code.
ContainerExit MapPodmanExit(int status, const std::string& stderr_tail, const std::string& image,
                            const std::string& command);

// The last line of podman's error output worth quoting ("Error: ..."), or the last
// non-empty line; "" when there is none.
std::string LastPodmanError(const std::string& stderr_text);

// What the agent learns about the node's podman once (ProbePodman).
struct PodmanFacts {
  std::string podman_path;      // resolved binary; empty = not installed
  std::string missing_reason;   // why podman is unusable (not found, `podman info` failed)
  std::string default_runtime;  // podman info's host.ociRuntime.name
  std::string cgroup_version;   // "v1" or "v2"
  bool crun_present = false;
  bool runc_present = false;
  bool cap_sys_resource = false;  // may raise hard limits
  uint64_t nofile_hard = 0;       // RLIMIT_NOFILE hard limit (0 = unknown)
  uint64_t nproc_hard = 0;        // RLIMIT_NPROC hard limit (0 = unknown)
  uint64_t pid_max = 0;           // /proc/sys/kernel/pid_max (podman lowers NPROC to it)
};

// Podman's rootful default for the container's nofile and nproc limits.
inline constexpr uint64_t kPodmanDefaultRlimit = 1'048'576;

// The adjustments a node needs, from the facts (pure):
//   - no crun but runc (or cgroup v1 with both: crun rejects hybrid layouts): --runtime runc
//   - without CAP_SYS_RESOURCE, a container cannot be given limits above the hard limits
//     podman itself runs with, and podman asks for 1048576 files and processes:
//     --ulimit nofile=H:H with H = hard RLIMIT_NOFILE, --ulimit nproc=P:P with
//     P = min(hard RLIMIT_NPROC, pid_max) (podman lowers its own NPROC to pid_max).
// `base` supplies podman path/global args/pull/network; the result's note lists what was
// adjusted and why, and `unavailable` is set when podman or every runtime is missing.
ContainerOptions DecideContainerOptions(const PodmanFacts& facts, ContainerOptions base);

// Gathers the facts: resolves the podman binary, runs `podman [global args] info
// --format json` (with a timeout), looks for crun/runc in PATH, reads this process's
// hard limits, capabilities and pid_max.
PodmanFacts ProbePodman(const ContainerOptions& base);

// ProbePodman + DecideContainerOptions.
ContainerOptions DetectContainerOptions(const ContainerOptions& base);

// Runs argv (no shell) with stdin from /dev/null, waits up to timeout_ms (then kills it
// with SIGKILL), and returns its standard output; Unavailable naming podman's last error
// line when it fails. `err_out`, if given, receives its standard error.
Result<std::string> RunCommand(const std::vector<std::string>& argv, int timeout_ms,
                               std::string* err_out = nullptr);

// Starts argv (no shell) with default signal handling, its standard input from /dev/null
// and its output on the caller's standard output and error; the caller reaps it.
Result<pid_t> StartCommand(const std::vector<std::string>& argv);

// `podman rm --force --time 0 NAME`: kills and removes the container if it exists.
// true when there was one to remove, false when there was none; an error when it may
// still exist.
Result<bool> RemoveContainer(const ContainerOptions& options, const std::string& name,
                             int timeout_ms = 30'000);

// Whether the user (uid, gid, groups) can reach and read `path` on the host — for a
// directory also enter it, and with `write` also write it. Checked in a forked child that
// switches to the user (root only; as the user itself when not root). FailedPrecondition
// naming the path and the user when not. A check of a path, not of what a later reader
// of the path gets: a root-run podman is given OpenMountSource's staged mounts instead
// (mount_source.h); this is for an agent that does not run as root.
Status CheckUserAccess(const std::string& path, const std::string& user, uid_t uid, gid_t gid,
                       const std::vector<gid_t>& groups, bool write);

}  // namespace gpupool::agent
