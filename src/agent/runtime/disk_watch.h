// The agent's watch of its own disk (docs/health.md, "A node whose disk fills up"), as
// kubelet's DiskPressure condition: every --disk-check-interval seconds the agent reads
// how much room the filesystem of its state directory has left (statvfs), and a
// filesystem below --disk-min-free (bytes or inodes) puts the node under disk pressure.
// The controller drains a node under pressure, so that jobs are not sent where they
// cannot be started, and returns it to service once the pressure ends. Jobs already
// running go on. The measure and the judgement are common/disk_room.h's (the server's
// watch of its store's disk uses them too).
//
// Pure but for ReadDiskUsage; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "common/disk_room.h"
#include "common/status.h"
#include "protocol/agent_protocol.h"

namespace gpupool::agent {

using gpupool::BytesForPeople;
using gpupool::DiskMinFree;
using gpupool::DiskUsage;
using gpupool::MinFreeBytes;
using gpupool::ReadDiskUsage;

// JudgeDiskRoom's verdict on the state directory `path` (the level named as "the agent's
// --disk-min-free"), as the report the agent sends: e.g. "/var/lib/gpupool/agent has 120
// MiB free of 50 GiB, below the agent's --disk-min-free of 1 GiB".
protocol::DiskReport JudgeDisk(const std::string& path, const DiskUsage& usage,
                               const DiskMinFree& min, bool was_under, int64_t now_ms);

}  // namespace gpupool::agent
