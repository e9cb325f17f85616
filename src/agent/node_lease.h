// The node's lease on this machine (docs/health.md, "A node cut off from the controller"):
// the agent's word to the shims of how long the controller still counts on this node.
//
// The controller gives a registered node a lease (protocol::RegistrationReply::
// node_lease_ms). After each exchange that proves the controller knows the node (a
// registration, a poll), the agent writes STATE/node_lease (STATE: the launcher's state
// directory, beside STATE/jobs), the agent's, 0600 (the shims read it, jobs never do),
// replaced atomically (or, when no new file can be made, as on a full disk, overwritten in
// place), one line "D W C\n" of fixed width:
//   D  when the lease runs out here: the exchange's send time + 3/4 of the lease (a
//      quarter early: the controller counts from when it received the request);
//   W  when the line was written;
//   C  a check value of D and W, so that a read mixing two writes is refused.
// D and W are CLOCK_BOOTTIME microseconds (it counts a suspend, as the controller's wall
// clock does, and is the same for every process of a boot). No lease: no file.
//
// The shim of a task whose job may be started again elsewhere once the node is lost
// (jobs::FencedOnLoss; LaunchSpec::lease_file names the file) fences it: its grace
// (LaunchSpec::lease_grace_s) before D, unless the file was renewed by then, the job is
// told to stop (SIGTERM, as a cancel); once D has passed, a file renewed in time (D' past
// now, written no later than the old D) lets the job run on; anything else (not renewed,
// or renewed only after the lease had run out, when the controller may already have
// requeued the job) kills the job (SIGKILL). A missing or
// unreadable file fences nothing (fail open). Plain functions; thread-safe. Linked into
// the static shim: no spdlog, fmt or NSS.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::agent {

inline constexpr char kNodeLeaseFile[] = "node_lease";

struct NodeLease {
  int64_t deadline_us = 0;  // D: CLOCK_BOOTTIME microseconds when the lease runs out
  int64_t written_us = 0;   // W: CLOCK_BOOTTIME microseconds when it was written
  friend bool operator==(const NodeLease&, const NodeLease&) = default;
};

// CLOCK_BOOTTIME in microseconds.
int64_t BootMicros();

// "D W C\n", D and W as 17 digits, C as 10.
std::string FormatNodeLease(const NodeLease& lease);
// The line FormatNodeLease makes; nullopt for anything else (three non-negative integers
// of at most 18 digits, one space apart, an optional newline, nothing more, C matching).
std::optional<NodeLease> ParseNodeLease(std::string_view text);

// Writes `lease` to `path` (temporary file and rename, no fsync; 0600), else, where no new
// file can be made, over the line already there in place. kUnavailable naming the path
// when neither works.
Status WriteNodeLease(const std::string& path, const NodeLease& lease);
// Reads the lease at `path`: kNotFound when there is none, kUnavailable when it cannot be
// read, kInvalidArgument when it is not a lease line. Plain POSIX reads; never throws.
Result<NodeLease> ReadNodeLease(const std::string& path);

// The shim's judgement at a check, `now` on CLOCK_BOOTTIME: `held` the lease it holds
// (read earlier), `read` the file as just read (nullopt: none, unreadable), `warn_us` how
// long before the lease runs out the job is told to stop (LaunchSpec::lease_grace_s; 0:
// not told, or told already). The lease holds while now < held.deadline_us - warn_us.
// From then until held.deadline_us a later lease (running out after held's) replaces it
// (kRenewed), else the job is told (kWarn). Once held.deadline_us has passed, a renewal
// written no later than it and running past now replaces it (kRenewed), else the job is
// fenced (kFence). No readable file fails open (kUnknown) at either stage.
enum class LeaseVerdict { kHolds, kRenewed, kUnknown, kWarn, kFence };
LeaseVerdict JudgeLease(const NodeLease& held, int64_t now_us, const std::optional<NodeLease>& read,
                        int64_t warn_us = 0);

}  // namespace gpupool::agent
