#include "agent/device_filter.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpupool::agent {
namespace {

// Registers: r1 holds the context (struct bpf_cgroup_dev_ctx: access_type, major, minor,
// three u32), r2-r4 the loaded fields, r0 the answer.
constexpr uint8_t kR0 = 0, kR1 = 1, kR2 = 2, kR3 = 3, kR4 = 4;

constexpr uint8_t kLoadWord = BPF_LDX | BPF_MEM | BPF_W;
constexpr uint8_t kAndImm = BPF_ALU64 | BPF_AND | BPF_K;
constexpr uint8_t kJumpIfNotEqualImm = BPF_JMP | BPF_JNE | BPF_K;
constexpr uint8_t kMoveImm = BPF_ALU64 | BPF_MOV | BPF_K;
constexpr uint8_t kExit = BPF_JMP | BPF_EXIT;

BpfInsn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  return BpfInsn{code, static_cast<uint8_t>((src << 4) | (dst & 0x0f)), off, imm};
}

int32_t TypeCode(char type) { return type == 'b' ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR; }

long Bpf(int cmd, union bpf_attr* attr) { return ::syscall(__NR_bpf, cmd, attr, sizeof(*attr)); }

}  // namespace

Result<DeviceNumber> DeviceNumberOf(const std::string& node) {
  struct stat st;
  if (::stat(node.c_str(), &st) != 0) {
    return Status::NotFound("device node '" + node + "': " + std::strerror(errno));
  }
  DeviceNumber d;
  if (S_ISCHR(st.st_mode)) {
    d.type = 'c';
  } else if (S_ISBLK(st.st_mode)) {
    d.type = 'b';
  } else {
    return Status::InvalidArgument("'" + node + "' is not a device node");
  }
  d.major = major(st.st_rdev);
  d.minor = minor(st.st_rdev);
  return d;
}

Result<std::vector<BpfInsn>> BuildDeviceFilter(const std::vector<DeviceNumber>& deny) {
  if (deny.size() > kMaxDeniedDevices) {
    return Status::InvalidArgument("device filter: " + std::to_string(deny.size()) +
                                   " devices to deny; at most " +
                                   std::to_string(kMaxDeniedDevices) + " are supported");
  }
  std::vector<BpfInsn> p;
  p.reserve(6 + 5 * deny.size());
  p.push_back(Insn(kLoadWord, kR2, kR1, 0, 0));   // access_type
  p.push_back(Insn(kAndImm, kR2, 0, 0, 0xffff));  // its low half: the device type
  p.push_back(Insn(kLoadWord, kR3, kR1, 4, 0));   // major
  p.push_back(Insn(kLoadWord, kR4, kR1, 8, 0));   // minor
  for (const DeviceNumber& d : deny) {
    if (d.type != 'c' && d.type != 'b') {
      return Status::InvalidArgument(std::string("device filter: device type '") + d.type +
                                     "' is neither 'c' nor 'b'");
    }
    if (d.major > INT32_MAX || d.minor > INT32_MAX) {
      return Status::InvalidArgument("device filter: device number " + std::to_string(d.major) +
                                     ":" + std::to_string(d.minor) + " is out of range");
    }
    // A match of all three falls through to "deny"; any mismatch skips to the next rule.
    p.push_back(Insn(kJumpIfNotEqualImm, kR2, 0, 4, TypeCode(d.type)));
    p.push_back(Insn(kJumpIfNotEqualImm, kR3, 0, 3, static_cast<int32_t>(d.major)));
    p.push_back(Insn(kJumpIfNotEqualImm, kR4, 0, 2, static_cast<int32_t>(d.minor)));
    p.push_back(Insn(kMoveImm, kR0, 0, 0, 0));
    p.push_back(Insn(kExit, 0, 0, 0, 0));
  }
  p.push_back(Insn(kMoveImm, kR0, 0, 0, 1));
  p.push_back(Insn(kExit, 0, 0, 0, 0));
  return p;
}

Result<int> EvaluateDeviceFilter(const std::vector<BpfInsn>& program, DeviceNumber device,
                                 uint32_t access) {
  const uint32_t ctx[3] = {(access << 16) | static_cast<uint32_t>(TypeCode(device.type)),
                           device.major, device.minor};
  uint64_t reg[11] = {};
  size_t pc = 0;
  for (size_t steps = 0; steps <= program.size() && pc < program.size(); ++steps) {
    const BpfInsn& in = program[pc];
    const uint8_t dst = in.regs & 0x0f;
    const uint8_t src = in.regs >> 4;
    if (dst > 10 || src > 10) return Status::InvalidArgument("device filter: bad register");
    switch (in.code) {
      case kLoadWord:
        if (src != kR1 || in.off < 0 || in.off > 8 || in.off % 4 != 0) {
          return Status::InvalidArgument("device filter: load outside the context");
        }
        reg[dst] = ctx[in.off / 4];
        ++pc;
        break;
      case kAndImm:
        reg[dst] &= static_cast<uint64_t>(static_cast<int64_t>(in.imm));
        ++pc;
        break;
      case kMoveImm:
        reg[dst] = static_cast<uint64_t>(static_cast<int64_t>(in.imm));
        ++pc;
        break;
      case kJumpIfNotEqualImm:
        pc += 1 + (reg[dst] != static_cast<uint64_t>(static_cast<int64_t>(in.imm))
                       ? static_cast<size_t>(in.off)
                       : 0);
        break;
      case kExit:
        return static_cast<int>(reg[kR0]);
      default:
        return Status::InvalidArgument("device filter: unknown instruction code " +
                                       std::to_string(in.code));
    }
  }
  return Status::InvalidArgument("device filter: the program runs past its end");
}

Status AttachDeviceFilter(const std::string& cgroup_dir, const std::vector<DeviceNumber>& deny) {
  GP_ASSIGN_OR_RETURN(std::vector<BpfInsn> program, BuildDeviceFilter(deny));
  static const char kLicense[] = "Apache-2.0";
  union bpf_attr load;
  std::memset(&load, 0, sizeof load);
  load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  load.insns = reinterpret_cast<uint64_t>(program.data());
  load.insn_cnt = static_cast<uint32_t>(program.size());
  load.license = reinterpret_cast<uint64_t>(kLicense);
  int prog = static_cast<int>(Bpf(BPF_PROG_LOAD, &load));
  if (prog < 0) {
    const int err = errno;
    // Again with the verifier's log, to say why.
    std::string log(16384, '\0');
    load.log_level = 1;
    load.log_buf = reinterpret_cast<uint64_t>(log.data());
    load.log_size = static_cast<uint32_t>(log.size());
    const int again = static_cast<int>(Bpf(BPF_PROG_LOAD, &load));
    if (again >= 0) ::close(again);
    log.resize(std::strlen(log.c_str()));
    return Status::Unavailable(std::string("cannot load the eBPF device filter: ") +
                               std::strerror(err) +
                               (err == EPERM ? " (needs root: CAP_SYS_ADMIN or CAP_BPF)" : "") +
                               (log.empty() ? "" : "; verifier: " + log.substr(0, 400)));
  }
  const int dir = ::open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    const int err = errno;
    ::close(prog);
    return Status::Unavailable("cannot open cgroup '" + cgroup_dir + "': " + std::strerror(err));
  }
  union bpf_attr attach;
  std::memset(&attach, 0, sizeof attach);
  attach.target_fd = static_cast<uint32_t>(dir);
  attach.attach_bpf_fd = static_cast<uint32_t>(prog);
  attach.attach_type = BPF_CGROUP_DEVICE;
  attach.attach_flags = BPF_F_ALLOW_MULTI;
  const long rc = Bpf(BPF_PROG_ATTACH, &attach);
  const int err = errno;
  ::close(dir);
  ::close(prog);  // the attachment keeps the program alive
  if (rc != 0) {
    return Status::Unavailable("cannot attach the eBPF device filter to '" + cgroup_dir +
                               "': " + std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace gpupool::agent
