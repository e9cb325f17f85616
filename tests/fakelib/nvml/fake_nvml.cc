// A fake libnvidia-ml.so.1 for tests: the NVML entry points gpupool's backend uses,
// answering from a scenario file named by $FAKE_NVML_SCENARIO. With $FAKE_NVML_LOG set,
// it appends each entry point's name to that file the first time it is called in a
// session, and every nvmlInit_v2 / nvmlShutdown, so tests can check which calls (and
// fallbacks) the backend made and that it shut NVML down. With $FAKE_NVML_MEMORY_LIMITS
// set, each per-cgroup memory limit set is appended there (README.md).
//
// Built five times (see CMakeLists.txt): complete; without several optional entry
// points (FAKE_NVML_OMIT_OPTIONAL, like an old driver); without a required one
// (FAKE_NVML_OMIT_REQUIRED); without nvmlEventSetWait_v2 only
// (FAKE_NVML_OMIT_EVENT_WAIT_V2, a driver before R450, whose nvmlEventSetWait fills the
// shorter v1 nvmlEventData_t); complete plus NVML's per-cgroup memory limits
// (FAKE_NVML_MEMORY_LIMITS_CALLS, an R615+ driver).
//
// The types below are written from NVML's documented ABI, independently of the
// backend's own declarations, so that a layout mistake on either side shows in tests.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "fake_nvml_scenario.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_UNKNOWN = 999,
};
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;

#define nvmlEventTypeXidCriticalError 0x0000000000000008LL

typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

// What nvmlEventSetWait (v1) of a driver before R450 fills: no instance ids.
typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
} nvmlEventDataV1_t;

typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

// The layout the unversioned (v1) PCI calls fill.
typedef struct {
  char busId[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  unsigned int reserved0, reserved1, reserved2, reserved3;
} nvmlPciInfoV1_t;

typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

// nvmlProcessInfo_t as the _v2/_v3 calls fill it.
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

namespace {

using fake_nvml::FakeDevice;
using fake_nvml::FakeMig;
using fake_nvml::FakeString;
using fake_nvml::Handle;

fake_nvml::Scenario g_scenario;
int g_init_count = 0;
std::set<std::string> g_logged;

// An event set: the GPUs registered on it. What the opaque nvmlEventSet_t points at.
struct FakeEventSet {
  std::vector<FakeDevice*> devices;
};
std::set<FakeEventSet*> g_event_sets;  // live ones

void Log(const char* name, bool always = false) {
  const char* path = std::getenv("FAKE_NVML_LOG");
  if (path == nullptr || *path == '\0') return;
  if (!always && !g_logged.insert(name).second) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", name);
    std::fclose(f);
  }
}

int Injected(const std::map<std::string, int>& errors, const char* name) {
  auto it = errors.find(name);
  return it == errors.end() ? NVML_SUCCESS : it->second;
}

// Applies $FAKE_NVML_TELEMETRY when the file changed since it was last read, so a test
// can script values that change while a sampler holds its NVML session open.
void RefreshTelemetry() {
  static long long seen_mtime_ns = -1;
  static long long seen_size = -1;
  static long long seen_inode = -1;  // a file renamed into place is a new inode
  const char* path = std::getenv("FAKE_NVML_TELEMETRY");
  if (path == nullptr || *path == '\0') return;
  struct stat st;
  if (stat(path, &st) != 0) return;
  const long long mtime_ns = st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  if (mtime_ns == seen_mtime_ns && st.st_size == seen_size &&
      static_cast<long long>(st.st_ino) == seen_inode) {
    return;
  }
  std::string error;
  if (!fake_nvml::ApplyTelemetry(path, &g_scenario, &error)) {
    std::fprintf(stderr, "fake libnvidia-ml: %s\n", error.c_str());
    return;  // a half-written file: read again next time
  }
  seen_mtime_ns = mtime_ns;
  seen_size = st.st_size;
  seen_inode = static_cast<long long>(st.st_ino);
}

// Resolves a handle; on failure `rc` says why. Injected errors of the GPU (or of the MIG
// device) for `call` come back as rc too.
Handle* Resolve(nvmlDevice_t device, const char* call, int* rc) {
  *rc = NVML_SUCCESS;
  if (g_init_count == 0) {
    *rc = NVML_ERROR_UNINITIALIZED;
    return nullptr;
  }
  if (device == nullptr) {
    *rc = NVML_ERROR_INVALID_ARGUMENT;
    return nullptr;
  }
  RefreshTelemetry();
  auto* h = reinterpret_cast<Handle*>(device);
  const auto& errors = h->mig >= 0 ? h->gpu->migs[h->mig].errors : h->gpu->errors;
  *rc = Injected(errors, call);
  return *rc == NVML_SUCCESS ? h : nullptr;
}

#define RESOLVE(var, device, call)           \
  Log(call);                                 \
  int rc_ = NVML_SUCCESS;                    \
  Handle* var = Resolve(device, call, &rc_); \
  if (var == nullptr) return rc_

nvmlReturn_t WriteString(const FakeString& s, char* buf, unsigned int length) {
  if (buf == nullptr || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.unterminated) {
    for (unsigned i = 0; i < length; ++i)
      buf[i] = s.bytes.empty() ? 'A' : s.bytes[i % s.bytes.size()];
    return NVML_SUCCESS;
  }
  if (s.bytes.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buf, s.bytes.data(), s.bytes.size());
  buf[s.bytes.size()] = '\0';
  return NVML_SUCCESS;
}

// Fills the current nvmlPciInfo_t from a bus id "00000000:18:00.0".
void FillPci(const std::string& bus_id, unsigned domain, unsigned bus, unsigned device,
             unsigned device_id, nvmlPciInfo_t* pci) {
  std::memset(pci, 0, sizeof *pci);
  std::snprintf(pci->busId, sizeof pci->busId, "%s", bus_id.c_str());
  // The legacy form has a 4-digit domain: drop the first four of eight digits.
  const std::string legacy = bus_id.size() > 4 && bus_id.find(':') == 8 ? bus_id.substr(4) : bus_id;
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", legacy.c_str());
  pci->domain = domain;
  pci->bus = bus;
  pci->device = device;
  pci->pciDeviceId = device_id;
}

void FixHandles() {
  for (FakeDevice& d : g_scenario.devices) {
    d.handle = Handle{&d, -1};
    for (size_t k = 0; k < d.migs.size(); ++k) d.migs[k].handle = Handle{&d, static_cast<int>(k)};
  }
}

FakeMig* MigOf(Handle* h) { return h->mig >= 0 ? &h->gpu->migs[h->mig] : nullptr; }

}  // namespace

// ---- Required entry points -------------------------------------------------------

FAKE_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  Log("nvmlInit_v2", /*always=*/true);
  if (g_init_count > 0) {
    ++g_init_count;
    return NVML_SUCCESS;
  }
  const char* path = std::getenv("FAKE_NVML_SCENARIO");
  if (path == nullptr) {
    std::fprintf(stderr, "fake libnvidia-ml: FAKE_NVML_SCENARIO is not set\n");
    return NVML_ERROR_UNKNOWN;
  }
  std::string error;
  fake_nvml::Scenario s;
  if (!fake_nvml::LoadScenario(path, &s, &error)) {
    std::fprintf(stderr, "fake libnvidia-ml: %s\n", error.c_str());
    return NVML_ERROR_UNKNOWN;
  }
  if (s.init_error != NVML_SUCCESS) return s.init_error;
  g_scenario = std::move(s);
  FixHandles();
  g_logged.clear();
  ++g_init_count;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlShutdown(void) {
  Log("nvmlShutdown", /*always=*/true);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (--g_init_count == 0) {
    if (!g_event_sets.empty()) Log("nvmlShutdown with an event set not freed", true);
    for (FakeEventSet* s : g_event_sets) delete s;
    g_event_sets.clear();
    g_scenario = fake_nvml::Scenario{};
  }
  return NVML_SUCCESS;
}

FAKE_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case 0:
      return "Success";
    case 1:
      return "Uninitialized";
    case 2:
      return "Invalid Argument";
    case 3:
      return "Not Supported";
    case 4:
      return "Insufficient Permissions";
    case 6:
      return "Not Found";
    case 9:
      return "Driver Not Loaded";
    case 10:
      return "Timeout";
    case 15:
      return "GPU is lost";
    case 18:
      return "RM has detected an NVML/RM version mismatch.";
    case 999:
      return "Unknown Error";
    default:
      return "Unknown Error";
  }
}

#ifndef FAKE_NVML_OMIT_REQUIRED
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  Log("nvmlDeviceGetCount_v2");
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (int rc = Injected(g_scenario.errors, "nvmlDeviceGetCount")) return rc;
  *count = g_scenario.device_count >= 0 ? static_cast<unsigned>(g_scenario.device_count)
                                        : static_cast<unsigned>(g_scenario.devices.size());
  return NVML_SUCCESS;
}
#endif

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  Log("nvmlDeviceGetHandleByIndex_v2");
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= g_scenario.devices.size()) return NVML_ERROR_INVALID_ARGUMENT;
  FakeDevice& d = g_scenario.devices[index];
  if (int rc = Injected(d.errors, "nvmlDeviceGetHandleByIndex")) return rc;
  *device = reinterpret_cast<nvmlDevice_t>(&d.handle);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  Log("nvmlDeviceGetHandleByUUID");
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (FakeDevice& d : g_scenario.devices) {
    for (FakeMig& m : d.migs) {
      if (m.uuid.bytes != uuid) continue;
      *device = reinterpret_cast<nvmlDevice_t>(&m.handle);
      return NVML_SUCCESS;
    }
    if (d.uuid.bytes != uuid) continue;
    if (int rc = Injected(d.errors, "nvmlDeviceGetHandleByUUID")) return rc;
    *device = reinterpret_cast<nvmlDevice_t>(&d.handle);
    return NVML_SUCCESS;
  }
  return NVML_ERROR_NOT_FOUND;
}

// ---- System ----------------------------------------------------------------------

FAKE_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  Log("nvmlSystemGetDriverVersion");
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (int rc = Injected(g_scenario.errors, "nvmlSystemGetDriverVersion")) return rc;
  return WriteString(g_scenario.driver_version, version, length);
}

static nvmlReturn_t CudaVersion(int* version) {
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (int rc = Injected(g_scenario.errors, "nvmlSystemGetCudaDriverVersion")) return rc;
  *version = g_scenario.cuda_version;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  Log("nvmlSystemGetCudaDriverVersion");
  return CudaVersion(version);
}

#ifndef FAKE_NVML_OMIT_OPTIONAL
FAKE_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  Log("nvmlSystemGetCudaDriverVersion_v2");
  return CudaVersion(version);
}
#endif

// ---- Identity ----------------------------------------------------------------------

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  RESOLVE(h, device, "nvmlDeviceGetName");
  const FakeMig* mig = MigOf(h);
  return WriteString(mig != nullptr ? mig->name : h->gpu->name, name, length);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  RESOLVE(h, device, "nvmlDeviceGetUUID");
  const FakeMig* mig = MigOf(h);
  return WriteString(mig != nullptr ? mig->uuid : h->gpu->uuid, uuid, length);
}

static nvmlReturn_t PciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci, const char* logged) {
  RESOLVE(h, device, "nvmlDeviceGetPciInfo");
  Log(logged);
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const FakeDevice& d = *h->gpu;
  FillPci(d.bus_id, d.domain, d.bus, d.device, d.pci_device_id, pci);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return PciInfo(device, pci, "nvmlDeviceGetPciInfo_v2");
}

#ifndef FAKE_NVML_OMIT_OPTIONAL
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return PciInfo(device, pci, "nvmlDeviceGetPciInfo_v3");
}
#endif

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  RESOLVE(h, device, "nvmlDeviceGetMinorNumber");
  if (minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *minor = h->gpu->minor;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  RESOLVE(h, device, "nvmlDeviceGetMemoryInfo");
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const FakeMig* mig = MigOf(h);
  memory->total = mig != nullptr ? mig->memory_total : h->gpu->memory_total;
  memory->used = mig != nullptr ? mig->memory_used : h->gpu->memory_used;
  memory->free = memory->total > memory->used ? memory->total - memory->used : 0;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                            int* minor) {
  RESOLVE(h, device, "nvmlDeviceGetCudaComputeCapability");
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *major = h->gpu->cc_major;
  *minor = h->gpu->cc_minor;
  return NVML_SUCCESS;
}

// ---- Placement ---------------------------------------------------------------------

#ifndef FAKE_NVML_OMIT_OPTIONAL
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  RESOLVE(h, device, "nvmlDeviceGetNumaNodeId");
  if (node == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *node = h->gpu->numa_node;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int size,
                                                  unsigned long* set) {
  RESOLVE(h, device, "nvmlDeviceGetCpuAffinity");
  if (set == nullptr || size == 0) return NVML_ERROR_INVALID_ARGUMENT;
  constexpr unsigned kBits = sizeof(unsigned long) * 8;
  std::memset(set, 0, size * sizeof(unsigned long));
  for (unsigned cpu : h->gpu->cpus) {
    if (cpu / kBits < size) set[cpu / kBits] |= 1ul << (cpu % kBits);
  }
  return NVML_SUCCESS;
}
#endif

// ---- Modes and telemetry -------------------------------------------------------------

#ifndef FAKE_NVML_OMIT_OPTIONAL
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                              unsigned int* pending) {
  RESOLVE(h, device, "nvmlDeviceGetMigMode");
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *current = h->gpu->mig_current;
  *pending = h->gpu->mig_pending;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  RESOLVE(h, device, "nvmlDeviceGetMaxMigDeviceCount");
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = h->gpu->mig_max;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                             unsigned int index,
                                                             nvmlDevice_t* mig) {
  RESOLVE(h, device, "nvmlDeviceGetMigDeviceHandleByIndex");
  if (mig == nullptr || h->mig >= 0 || index >= h->gpu->mig_max) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (FakeMig& m : h->gpu->migs) {
    if (m.slot == index) {
      *mig = reinterpret_cast<nvmlDevice_t>(&m.handle);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  RESOLVE(h, device, "nvmlDeviceGetGpuInstanceId");
  const FakeMig* m = MigOf(h);
  if (id == nullptr || m == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *id = m->gpu_instance_id;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  RESOLVE(h, device, "nvmlDeviceGetComputeInstanceId");
  const FakeMig* m = MigOf(h);
  if (id == nullptr || m == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *id = m->compute_instance_id;
  return NVML_SUCCESS;
}
#endif

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned int* current,
                                              unsigned int* pending) {
  RESOLVE(h, device, "nvmlDeviceGetEccMode");
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *current = h->gpu->ecc_current;
  *pending = h->gpu->ecc_pending;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                       nvmlUtilization_t* utilization) {
  RESOLVE(h, device, "nvmlDeviceGetUtilizationRates");
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  utilization->gpu = h->gpu->util_gpu;
  utilization->memory = h->gpu->util_memory;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor,
                                                  unsigned int* temp) {
  RESOLVE(h, device, "nvmlDeviceGetTemperature");
  if (temp == nullptr || sensor != 0)
    return NVML_ERROR_INVALID_ARGUMENT;  // only NVML_TEMPERATURE_GPU
  *temp = h->gpu->temperature;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  RESOLVE(h, device, "nvmlDeviceGetPowerUsage");
  if (power == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *power = h->gpu->power_mw;
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_OPTIONAL
// Telemetry extras (an old driver lacks them: the sampler leaves their fields unset).
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type,
                                                     int counter_type, unsigned long long* count) {
  RESOLVE(h, device, "nvmlDeviceGetTotalEccErrors");
  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED (1), NVML_VOLATILE_ECC (0) / NVML_AGGREGATE_ECC (1).
  if (count == nullptr || error_type != 1 || counter_type < 0 || counter_type > 1)
    return NVML_ERROR_INVALID_ARGUMENT;
  *count = h->gpu->ecc_total;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                 unsigned int* count,
                                                                 nvmlProcessInfo_t* infos) {
  RESOLVE(h, device, "nvmlDeviceGetComputeRunningProcesses");
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const auto& procs = h->gpu->processes;
  if (*count < procs.size() || (infos == nullptr && !procs.empty())) {
    *count = static_cast<unsigned>(procs.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  *count = static_cast<unsigned>(procs.size());
  for (size_t i = 0; i < procs.size(); ++i) {
    infos[i].pid = procs[i].pid;
    infos[i].usedGpuMemory = procs[i].used_memory;
    infos[i].gpuInstanceId = 0xFFFFFFFF;
    infos[i].computeInstanceId = 0xFFFFFFFF;
  }
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                         nvmlProcessUtilizationSample_t* samples,
                                                         unsigned int* count,
                                                         unsigned long long last_seen_timestamp) {
  RESOLVE(h, device, "nvmlDeviceGetProcessUtilization");
  (void)last_seen_timestamp;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const auto& procs = h->gpu->processes;
  if (samples == nullptr || *count < procs.size()) {
    *count = static_cast<unsigned>(procs.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  *count = static_cast<unsigned>(procs.size());
  for (size_t i = 0; i < procs.size(); ++i) {
    samples[i] = nvmlProcessUtilizationSample_t{procs[i].pid, 1, procs[i].sm_util, 0, 0, 0};
  }
  return NVML_SUCCESS;
}
#endif

// Hardware health. nvmlDeviceGetCurrentClocksThrottleReasons, the older name, stays in
// every build (an old driver has it); the others are optional.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                   unsigned long long* reasons) {
  RESOLVE(h, device, "nvmlDeviceGetCurrentClocksThrottleReasons");
  if (reasons == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *reasons = h->gpu->health.clocks_event_reasons;
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_OPTIONAL
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                unsigned long long* reasons) {
  RESOLVE(h, device, "nvmlDeviceGetCurrentClocksEventReasons");
  if (reasons == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *reasons = h->gpu->health.clocks_event_reasons;
  return NVML_SUCCESS;
}

// cause: NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS (0), _DOUBLE_BIT_ECC_ERROR
// (1). A count of 0 asks for the count (INSUFFICIENT_SIZE when there are pages).
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause,
                                                   unsigned int* count,
                                                   unsigned long long* addresses) {
  RESOLVE(h, device, "nvmlDeviceGetRetiredPages");
  if (count == nullptr || cause < 0 || cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned pages = cause == 0 ? h->gpu->health.retired_sbe : h->gpu->health.retired_dbe;
  if (*count < pages || (addresses == nullptr && pages > 0)) {
    *count = pages;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < pages; ++i) addresses[i] = 0x1000ULL * (i + 1);
  *count = pages;
  return NVML_SUCCESS;
}

// nvmlEnableState_t: NVML_FEATURE_ENABLED (1) when a retirement waits for a reset.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                                unsigned int* pending) {
  RESOLVE(h, device, "nvmlDeviceGetRetiredPagesPendingStatus");
  if (pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *pending = h->gpu->health.retired_pending ? 1 : 0;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corr,
                                                   unsigned int* unc, unsigned int* pending,
                                                   unsigned int* failure) {
  RESOLVE(h, device, "nvmlDeviceGetRemappedRows");
  if (corr == nullptr || unc == nullptr || pending == nullptr || failure == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const fake_nvml::FakeHealth& x = h->gpu->health;
  *corr = x.remapped_correctable;
  *unc = x.remapped_uncorrectable;
  *pending = x.remap_pending ? 1 : 0;
  *failure = x.remap_failure ? 1 : 0;
  return NVML_SUCCESS;
}
#endif

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit) {
  RESOLVE(h, device, "nvmlDeviceGetEnforcedPowerLimit");
  if (limit == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *limit = h->gpu->power_limit_mw;
  return NVML_SUCCESS;
}

// ---- Topology ------------------------------------------------------------------------

static const fake_nvml::FakeLink* LinkOf(Handle* h, unsigned int link, int* rc) {
  const FakeDevice& d = *h->gpu;
  if (d.nvlink_max == 0) {
    *rc = NVML_ERROR_NOT_SUPPORTED;
    return nullptr;
  }
  if (link >= d.nvlink_max) {
    *rc = NVML_ERROR_INVALID_ARGUMENT;
    return nullptr;
  }
  static const fake_nvml::FakeLink kInactive{false, "", 0};
  return link < d.links.size() ? &d.links[link] : &kInactive;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                  unsigned int* active) {
  RESOLVE(h, device, "nvmlDeviceGetNvLinkState");
  if (active == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const fake_nvml::FakeLink* l = LinkOf(h, link, &rc_);
  if (l == nullptr) return rc_;
  *active = l->active ? 1 : 0;
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_OPTIONAL
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                             nvmlPciInfo_t* pci) {
  RESOLVE(h, device, "nvmlDeviceGetNvLinkRemotePciInfo");
  Log("nvmlDeviceGetNvLinkRemotePciInfo_v2");
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const fake_nvml::FakeLink* l = LinkOf(h, link, &rc_);
  if (l == nullptr) return rc_;
  unsigned domain = 0, bus = 0, dev = 0;
  std::sscanf(l->remote_bus_id.c_str(), "%x:%x:%x", &domain, &bus, &dev);
  FillPci(l->remote_bus_id, domain, bus, dev, 0, pci);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                             int* type) {
  RESOLVE(h, device, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const fake_nvml::FakeLink* l = LinkOf(h, link, &rc_);
  if (l == nullptr) return rc_;
  *type = l->remote_type;
  return NVML_SUCCESS;
}
#endif

// The v1 call fills the older, shorter struct; it is what old drivers have.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                                          nvmlPciInfoV1_t* pci) {
  RESOLVE(h, device, "nvmlDeviceGetNvLinkRemotePciInfo");
  Log("nvmlDeviceGetNvLinkRemotePciInfo_v1");
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const fake_nvml::FakeLink* l = LinkOf(h, link, &rc_);
  if (l == nullptr) return rc_;
  std::memset(pci, 0, sizeof *pci);
  unsigned domain = 0, bus = 0, dev = 0;
  std::sscanf(l->remote_bus_id.c_str(), "%x:%x:%x", &domain, &bus, &dev);
  std::snprintf(pci->busId, sizeof pci->busId, "%04x:%02x:%02x.0", domain, bus, dev);
  pci->domain = domain;
  pci->bus = bus;
  pci->device = dev;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1,
                                                             nvmlDevice_t device2, int* level) {
  RESOLVE(a, device1, "nvmlDeviceGetTopologyCommonAncestor");
  int rc2 = NVML_SUCCESS;
  Handle* b = Resolve(device2, "nvmlDeviceGetTopologyCommonAncestor", &rc2);
  if (b == nullptr) return rc2;
  if (level == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  int x = a->gpu->index;
  int y = b->gpu->index;
  if (x > y) std::swap(x, y);
  auto it = g_scenario.topology.find({x, y});
  *level = it != g_scenario.topology.end() ? it->second : g_scenario.topology_default;
  return NVML_SUCCESS;
}

// ---- Events ------------------------------------------------------------------------
//
// Xid events come from the scenario's and the telemetry file's "xid_events" (README.md).
// A wait never blocks: nothing pending is NVML_ERROR_TIMEOUT at once, whatever the
// timeout, and a wait with a timeout is logged ("nvmlEventSetWait with a timeout") so a
// test can check that the caller never asks to block.

#ifndef FAKE_NVML_OMIT_OPTIONAL
static FakeEventSet* LiveSet(nvmlEventSet_t set) {
  auto* s = reinterpret_cast<FakeEventSet*>(set);
  return g_event_sets.count(s) != 0 ? s : nullptr;
}

FAKE_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  Log("nvmlEventSetCreate");
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (int rc = Injected(g_scenario.errors, "nvmlEventSetCreate")) return rc;
  auto* s = new FakeEventSet;
  g_event_sets.insert(s);
  *set = reinterpret_cast<nvmlEventSet_t>(s);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                  unsigned long long event_types,
                                                  nvmlEventSet_t set) {
  RESOLVE(h, device, "nvmlDeviceRegisterEvents");
  FakeEventSet* s = LiveSet(set);
  if (s == nullptr || event_types == 0) return NVML_ERROR_INVALID_ARGUMENT;
  // Only Xid events, and only on whole GPUs.
  if (h->mig >= 0 ||
      (event_types & ~static_cast<unsigned long long>(nvmlEventTypeXidCriticalError)) != 0) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  if (std::find(s->devices.begin(), s->devices.end(), h->gpu) == s->devices.end()) {
    s->devices.push_back(h->gpu);
  }
  return NVML_SUCCESS;
}

// The next event due on `set`'s devices, taken off its device; false when none is.
static bool NextEvent(FakeEventSet* s, nvmlEventData_t* data) {
  RefreshTelemetry();
  for (FakeDevice* d : s->devices) {
    for (auto it = d->xid_events.begin(); it != d->xid_events.end(); ++it) {
      if (it->due > g_scenario.empty_waits) continue;
      data->device = reinterpret_cast<nvmlDevice_t>(&d->handle);
      data->eventType = nvmlEventTypeXidCriticalError;
      data->eventData = it->xid;
      data->gpuInstanceId = 0xFFFFFFFF;
      data->computeInstanceId = 0xFFFFFFFF;
      d->xid_events.erase(it);
      return true;
    }
  }
  ++g_scenario.empty_waits;
  return false;
}

static nvmlReturn_t Wait(nvmlEventSet_t set, unsigned int timeout_ms, nvmlEventData_t* data) {
  if (timeout_ms != 0) Log("nvmlEventSetWait with a timeout");
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  FakeEventSet* s = LiveSet(set);
  if (s == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (int rc = Injected(g_scenario.errors, "nvmlEventSetWait")) return rc;
  return NextEvent(s, data) ? NVML_SUCCESS : NVML_ERROR_TIMEOUT;
}

#ifndef FAKE_NVML_OMIT_EVENT_WAIT_V2
FAKE_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                             unsigned int timeout_ms) {
  Log("nvmlEventSetWait_v2");
  return Wait(set, timeout_ms, data);
}
#endif

// The v1 call fills the shorter struct: it must not touch the instance ids.
FAKE_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventDataV1_t* data,
                                          unsigned int timeout_ms) {
  Log("nvmlEventSetWait_v1");
  if (data == nullptr) return Wait(set, timeout_ms, nullptr);
  nvmlEventData_t full{};
  const nvmlReturn_t rc = Wait(set, timeout_ms, &full);
  if (rc == NVML_SUCCESS) *data = nvmlEventDataV1_t{full.device, full.eventType, full.eventData};
  return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  Log("nvmlEventSetFree");
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  FakeEventSet* s = LiveSet(set);
  if (s == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  g_event_sets.erase(s);
  delete s;
  return NVML_SUCCESS;
}
#endif

// ---- Per-cgroup memory limits (R615+) --------------------------------------------
// Only in the memory_limits build (FAKE_NVML_MEMORY_LIMITS_CALLS): the others are drivers
// before R615, so an agent loading them holds no GPU through NVML. Each set is appended to
// $FAKE_NVML_MEMORY_LIMITS as "UUID NAMESPACE SOFT HARD"; the getter answers from that file's last
// line for the GPU and cgroup (the limits live beyond one process, as the driver's do).

#ifdef FAKE_NVML_MEMORY_LIMITS_CALLS
typedef struct {
  const char* nameSpace;
  unsigned long long softLimit;
  unsigned long long hardLimit;
} nvmlSetMemoryLimits_v1_t;

typedef struct {
  const char* nameSpace;
  unsigned long long softLimit;
  unsigned long long hardLimit;
  unsigned long long currentUsed;
} nvmlGetMemoryLimits_v1_t;

FAKE_EXPORT nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device,
                                                      nvmlSetMemoryLimits_v1_t* limits) {
  RESOLVE(h, device, "nvmlDeviceSetMemoryLimits");
  if (h->mig >= 0) return NVML_ERROR_NOT_SUPPORTED;  // whole GPUs only
  struct stat st;
  if (limits == nullptr || limits->nameSpace == nullptr || stat(limits->nameSpace, &st) != 0 ||
      !S_ISDIR(st.st_mode) || limits->softLimit > limits->hardLimit) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const char* path = std::getenv("FAKE_NVML_MEMORY_LIMITS");
  if (path == nullptr || *path == '\0') return NVML_SUCCESS;
  FILE* f = std::fopen(path, "a");
  if (f == nullptr) return NVML_ERROR_UNKNOWN;
  std::fprintf(f, "%s %s %llu %llu\n", h->gpu->uuid.bytes.c_str(), limits->nameSpace,
               limits->softLimit, limits->hardLimit);
  std::fclose(f);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device,
                                                      nvmlGetMemoryLimits_v1_t* limits) {
  RESOLVE(h, device, "nvmlDeviceGetMemoryLimits");
  if (h->mig >= 0) return NVML_ERROR_NOT_SUPPORTED;
  if (limits == nullptr || limits->nameSpace == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const char* path = std::getenv("FAKE_NVML_MEMORY_LIMITS");
  FILE* f = path != nullptr && *path != '\0' ? std::fopen(path, "r") : nullptr;
  bool found = false;
  char uuid[256], name[4096];
  unsigned long long soft = 0, hard = 0;
  while (f != nullptr && std::fscanf(f, "%255s %4095s %llu %llu", uuid, name, &soft, &hard) == 4) {
    if (h->gpu->uuid.bytes != uuid || std::strcmp(name, limits->nameSpace) != 0) continue;
    found = soft != 0 || hard != ~0ULL;  // soft 0 and hard all ones: cleared
    limits->softLimit = soft;
    limits->hardLimit = hard;
  }
  if (f != nullptr) std::fclose(f);
  limits->currentUsed = 0;
  return found ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}
#endif
