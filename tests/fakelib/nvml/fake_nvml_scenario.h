// The scripted state behind the fake libnvidia-ml.so.1: one node's GPUs as a scenario
// file (JSON, see README.md) describes them. Loaded afresh by every nvmlInit_v2.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fake_nvml {

// A string answer; `unterminated` fills the caller's whole buffer with no NUL.
struct FakeString {
  std::string bytes;
  bool unterminated = false;
};

struct FakeDevice;

// What the opaque nvmlDevice_t points at: a GPU, or one MIG device of a GPU.
struct Handle {
  FakeDevice* gpu = nullptr;
  int mig = -1;  // index into gpu->migs, or -1 for the GPU itself
};

struct FakeMig {
  unsigned slot = 0;
  FakeString uuid;
  FakeString name;
  uint64_t memory_total = 0;
  uint64_t memory_used = 0;
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;
  std::map<std::string, int> errors;
  Handle handle;
};

struct FakeLink {
  bool active = true;
  std::string remote_bus_id;  // "00000000:05:00.0"
  int remote_type = 0;        // nvmlIntNvLinkDeviceType_t
};

// A process using a GPU (nvmlDeviceGetComputeRunningProcesses,
// nvmlDeviceGetProcessUtilization).
struct FakeProcess {
  unsigned pid = 0;
  unsigned long long used_memory = 0;  // bytes
  unsigned sm_util = 0;                // percent
};

// A scripted Xid event (nvmlEventSetWait): pending once `due` waits have come back empty
// (NVML_ERROR_TIMEOUT), which for a sampler that drains every sample is `due` samples on.
struct FakeXid {
  unsigned long long xid = 0;
  long long due = 0;
};

// Hardware health (nvmlDeviceGetRetiredPages, ...PendingStatus, nvmlDeviceGetRemappedRows,
// nvmlDeviceGetCurrentClocksEventReasons / ...ThrottleReasons).
struct FakeHealth {
  unsigned retired_sbe = 0, retired_dbe = 0;  // retired pages by cause
  bool retired_pending = false;
  unsigned remapped_correctable = 0, remapped_uncorrectable = 0;
  bool remap_pending = false, remap_failure = false;
  unsigned long long clocks_event_reasons = 0;  // nvmlClocksEventReason* bits
};

struct FakeDevice {
  int index = 0;
  FakeString name;
  FakeString uuid;
  std::string bus_id;  // 32-char form "00000000:18:00.0"; legacy and numbers derive from it
  unsigned domain = 0, bus = 0, device = 0;
  unsigned pci_device_id = 0;
  uint64_t memory_total = 0, memory_used = 0;
  int cc_major = 0, cc_minor = 0;
  unsigned minor = 0;
  unsigned numa_node = 0;
  std::vector<unsigned> cpus;
  unsigned mig_current = 0, mig_pending = 0, mig_max = 0;
  std::vector<FakeMig> migs;
  unsigned ecc_current = 0, ecc_pending = 0;
  unsigned util_gpu = 0, util_memory = 0;
  unsigned temperature = 0;
  unsigned power_mw = 0, power_limit_mw = 0;
  unsigned long long ecc_total = 0;  // nvmlDeviceGetTotalEccErrors
  std::vector<FakeProcess> processes;
  FakeHealth health;
  std::vector<FakeXid> xid_events;  // not yet delivered, in order
  unsigned nvlink_max = 0;          // 0: NVLink not supported
  std::vector<FakeLink> links;
  std::map<std::string, int> errors;  // function base name (no _vN) -> return code
  Handle handle;
};

struct Scenario {
  int init_error = 0;
  FakeString driver_version;
  int cuda_version = 0;
  long long device_count = -1;        // -1: the number of devices
  std::map<std::string, int> errors;  // system-wide calls
  std::vector<FakeDevice> devices;
  int topology_default = 50;
  std::map<std::pair<int, int>, int> topology;  // (lower index, higher index) -> level
  long long empty_waits = 0;                    // nvmlEventSetWait calls that found nothing pending
};

// Parses the file; on error returns false and sets *error. Never throws.
bool LoadScenario(const std::string& path, Scenario* out, std::string* error);

// Applies a telemetry file ($FAKE_NVML_TELEMETRY, see README.md) to the devices in place:
// {"devices": {"0": {"utilization_gpu": 80, "memory_used": bytes, "power_mw": n,
// "temperature": n, "ecc_total": n, "processes": [{"pid": n, "used_memory": bytes,
// "sm_util": n}], "xid_events": [79, {"xid": 13, "after_samples": 2}], and the hardware
// health keys of a scenario's device (README.md)}}}. Only the keys
// present change, but for xid_events, which are added to the device's pending events
// (after_samples counted from now). On error returns false and sets *error, changing
// nothing. Never throws.
bool ApplyTelemetry(const std::string& path, Scenario* scenario, std::string* error);

}  // namespace fake_nvml
