// Device access control under cgroup v2: there is no devices.deny file; the kernel asks
// eBPF programs of type BPF_PROG_TYPE_CGROUP_DEVICE attached to the job's cgroup (and
// its ancestors: every program must allow). This module builds such a program from a
// deny list and attaches it with raw bpf(2) calls (no libbpf: the program is a few
// instructions per rule).
//
// The program denies every access (read, write, mknod) to each listed device number and
// allows everything else, so it only narrows what the host already permits. It is
// attached with BPF_F_ALLOW_MULTI, which leaves programs of ancestors (systemd's) in
// force, and is detached by the kernel when the cgroup is removed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::agent {

struct DeviceNumber {
  char type = 'c';  // 'c' character or 'b' block device
  uint32_t major = 0;
  uint32_t minor = 0;
  bool operator==(const DeviceNumber&) const = default;
};

// The device number of a device node; an error when the path does not exist or is not
// a device node.
Result<DeviceNumber> DeviceNumberOf(const std::string& node);

// One eBPF instruction, laid out as the kernel's struct bpf_insn (8 bytes).
struct BpfInsn {
  uint8_t code;
  uint8_t regs;  // dst_reg in the low 4 bits, src_reg in the high 4 bits
  int16_t off;
  int32_t imm;
};
static_assert(sizeof(BpfInsn) == 8);

// The program for `deny` (duplicates kept; at most kMaxDeniedDevices rules).
inline constexpr size_t kMaxDeniedDevices = 4096;
Result<std::vector<BpfInsn>> BuildDeviceFilter(const std::vector<DeviceNumber>& deny);

// What the program answers for an access, evaluated here without the kernel (the tests
// check the instructions with it). `access` is a mask of 1 mknod, 2 read, 4 write.
// Returns 1 (allow) or 0 (deny); an error for an instruction it does not know.
Result<int> EvaluateDeviceFilter(const std::vector<BpfInsn>& program, DeviceNumber device,
                                 uint32_t access);

// Loads the program for `deny` and attaches it to the cgroup v2 directory `cgroup_dir`.
// Needs CAP_SYS_ADMIN (and CAP_BPF on newer kernels); the error names what failed.
Status AttachDeviceFilter(const std::string& cgroup_dir, const std::vector<DeviceNumber>& deny);

}  // namespace gpupool::agent
