// A fake librocm_smi64.so for tests: exports the rsmi_* entry points gpupool uses, with
// answers scripted by the JSON scenario file named in GPUPOOL_FAKE_ROCM_SMI_SCENARIO.
// gpupool loads it through its real dlopen code, so the tests exercise the real backend.
//
// Scenario (every key optional):
//   init_status           status rsmi_init returns (0 = success)
//   num_devices           count rsmi_num_monitor_devices reports (default: devices size)
//   num_devices_status    status of rsmi_num_monitor_devices
//   driver_version        string of rsmi_version_str_get
//   library_version       [major, minor, patch] for rsmi_version_get
//   xgmi_all_pairs        true: every pair is XGMI, one hop; else PCIe, two hops
//   links                 [{"a":0,"b":1,"type":2,"hops":1}] overriding pairs
//   call_log              file that init/shut_down calls are appended to
//   devices: [{ name | name_hex (raw bytes) | name_unterminated (fills the buffer),
//               bdfid, unique_id, vram_total, vram_used, busy_percent, numa_node,
//               render_minor, temp_edge_mc, temp_junction_mc, power_uw,
//               errors: {"rsmi_dev_...": status} }]
//   processes: [{ pid, devices: [dv, ...], vram: [bytes on each listed device],
//                 queues: [dv, ...] (default: devices) }]
//                         what KFD lists: rsmi_compute_process_info_get gives the pids
//                         (no memory, as the real library), rsmi_compute_process_gpus_get
//                         the devices it has queues on (as the real library, which reads
//                         KFD's proc/PID/queues), rsmi_compute_process_info_by_pid_get the
//                         VRAM summed, rsmi_compute_process_info_by_device_get one device's
//                         (0 on a device it does not use, as the real library)
//   process_errors        {"rsmi_compute_process_...": status} making that call fail
// A device field that is absent answers RSMI_STATUS_NOT_SUPPORTED.
//
// Compile definitions make the variants: FAKE_RSMI_WITHOUT_OPTIONAL leaves out a few
// optional entry points, FAKE_RSMI_WITHOUT_REQUIRED leaves out rsmi_num_monitor_devices,
// FAKE_RSMI_WITHOUT_BY_DEVICE leaves out rsmi_compute_process_info_by_device_get (a
// library older than ROCm 5.7), FAKE_RSMI_WITHOUT_PROCESSES every rsmi_compute_process_*.
#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

using Json = nlohmann::json;

// Values of rsmi_status_t (the real library's ABI).
constexpr uint32_t kSuccess = 0;
constexpr uint32_t kInvalidArgs = 1;
constexpr uint32_t kNotSupported = 2;
constexpr uint32_t kInternalException = 6;
constexpr uint32_t kInitError = 8;
constexpr uint32_t kNotFound = 10;
constexpr uint32_t kInsufficientSize = 11;

struct RsmiProcessInfo {  // rsmi_process_info_t
  uint32_t process_id;
  uint32_t pasid;
  uint64_t vram_usage;
  uint64_t sdma_usage;
  uint32_t cu_occupancy;
};

struct RsmiVersion {
  uint32_t major;
  uint32_t minor;
  uint32_t patch;
  const char* build;
};

Json g_scenario;
bool g_initialized = false;

void Log(const std::string& line) {
  if (!g_scenario.is_object() || !g_scenario.contains("call_log")) return;
  std::ofstream out(g_scenario["call_log"].get<std::string>(), std::ios::app);
  out << line << "\n";
}

// Reads the scenario again when its file changed (mtime or size) since it was read, so a
// test can script values that change while a telemetry sampler keeps the library
// initialised. A file that does not parse (half written) changes nothing.
void Refresh() {
  static long long seen_mtime_ns = -1;
  static long long seen_size = -1;
  static long long seen_inode = -1;  // a file renamed into place is a new inode
  const char* path = std::getenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO");
  struct stat st;
  if (path == nullptr || stat(path, &st) != 0) return;
  const long long mtime_ns = st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  if (mtime_ns == seen_mtime_ns && st.st_size == seen_size &&
      static_cast<long long>(st.st_ino) == seen_inode) {
    return;
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  Json scenario = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (scenario.is_discarded() || !scenario.is_object()) return;
  seen_mtime_ns = mtime_ns;
  seen_size = st.st_size;
  seen_inode = static_cast<long long>(st.st_ino);
  g_scenario = std::move(scenario);
}

// Runs `body` unless the library is not initialised; exceptions (a scenario of the wrong
// shape) must not cross the C boundary.
template <typename F>
uint32_t Guard(F body) {
  if (!g_initialized) return kInitError;
  Refresh();
  try {
    return body();
  } catch (...) {
    return kInternalException;
  }
}

// The device's scenario object, or nullptr for an index past the scripted devices.
const Json* Device(uint32_t index) {
  const Json& devices = g_scenario["devices"];
  if (!devices.is_array() || index >= devices.size()) return nullptr;
  return &devices[index];
}

// Looks up a scripted error for `function`, then the numeric `field`.
template <typename T>
uint32_t Answer(uint32_t index, const char* function, const char* field, T* out) {
  return Guard([&]() -> uint32_t {
    const Json* d = Device(index);
    if (d == nullptr || out == nullptr) return kInvalidArgs;
    if (d->contains("errors") && (*d)["errors"].contains(function)) {
      return (*d)["errors"][function].get<uint32_t>();
    }
    if (!d->contains(field)) return kNotSupported;
    *out = (*d)[field].get<T>();
    return kSuccess;
  });
}

// A scripted failure of a process call, else kSuccess.
[[maybe_unused]] uint32_t ProcessError(const char* function) {
  const Json& errors = g_scenario.value("process_errors", Json::object());
  return errors.contains(function) ? errors[function].get<uint32_t>() : kSuccess;
}

// The scripted process `pid`, or nullptr.
[[maybe_unused]] const Json* Process(uint32_t pid) {
  if (!g_scenario.contains("processes") || !g_scenario["processes"].is_array()) return nullptr;
  const Json& procs = g_scenario["processes"];
  for (const Json& p : procs) {
    if (p["pid"].get<uint32_t>() == pid) return &p;
  }
  return nullptr;
}

// The VRAM of `p` on device `dv`, or on all its devices when `dv` is negative.
[[maybe_unused]] uint64_t VramOf(const Json& p, long long dv) {
  const Json& devices = p.value("devices", Json::array());
  const Json& vram = p.value("vram", Json::array());
  uint64_t sum = 0;
  for (size_t i = 0; i < devices.size() && i < vram.size(); ++i) {
    if (dv < 0 || devices[i].get<long long>() == dv) sum += vram[i].get<uint64_t>();
  }
  return sum;
}

uint32_t CopyString(const std::string& text, char* buf, size_t len) {
  if (buf == nullptr || len == 0) return kInvalidArgs;
  const size_t n = text.size() < len - 1 ? text.size() : len - 1;
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
  return n < text.size() ? kInsufficientSize : kSuccess;
}

}  // namespace

extern "C" {

uint32_t rsmi_init(uint64_t /*flags*/) {
  const char* path = std::getenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO");
  if (path == nullptr) return kInitError;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  Json scenario = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (scenario.is_discarded() || !scenario.is_object()) return kInitError;
  g_scenario = std::move(scenario);
  Log("init");
  if (g_scenario.contains("init_status") && g_scenario["init_status"].get<uint32_t>() != 0) {
    return g_scenario["init_status"].get<uint32_t>();
  }
  g_initialized = true;
  return kSuccess;
}

uint32_t rsmi_shut_down() {
  Log("shut_down");
  g_initialized = false;
  return kSuccess;
}

#ifndef FAKE_RSMI_WITHOUT_REQUIRED
uint32_t rsmi_num_monitor_devices(uint32_t* count) {
  return Guard([&]() -> uint32_t {
    if (count == nullptr) return kInvalidArgs;
    if (g_scenario.contains("num_devices_status")) {
      return g_scenario["num_devices_status"].get<uint32_t>();
    }
    *count = g_scenario.contains("num_devices")
                 ? g_scenario["num_devices"].get<uint32_t>()
                 : static_cast<uint32_t>(g_scenario.value("devices", Json::array()).size());
    return kSuccess;
  });
}
#endif

uint32_t rsmi_dev_pci_id_get(uint32_t dv, uint64_t* bdfid) {
  return Answer(dv, "rsmi_dev_pci_id_get", "bdfid", bdfid);
}

uint32_t rsmi_dev_name_get(uint32_t dv, char* name, size_t len) {
  return Guard([&]() -> uint32_t {
    const Json* d = Device(dv);
    if (d == nullptr || name == nullptr || len == 0) return kInvalidArgs;
    if (d->contains("errors") && (*d)["errors"].contains("rsmi_dev_name_get")) {
      return (*d)["errors"]["rsmi_dev_name_get"].get<uint32_t>();
    }
    if (d->value("name_unterminated", false)) {
      std::memset(name, 'X', len);  // a buggy library: no terminating NUL at all
      return kSuccess;
    }
    if (d->contains("name_hex")) {
      std::string raw;
      const std::string hex = (*d)["name_hex"].get<std::string>();
      for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        raw.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      }
      return CopyString(raw, name, len);
    }
    if (!d->contains("name")) return kNotSupported;
    return CopyString((*d)["name"].get<std::string>(), name, len);
  });
}

uint32_t rsmi_dev_unique_id_get(uint32_t dv, uint64_t* id) {
  return Answer(dv, "rsmi_dev_unique_id_get", "unique_id", id);
}

uint32_t rsmi_dev_memory_total_get(uint32_t dv, uint32_t mem_type, uint64_t* total) {
  if (mem_type != 0) return kNotSupported;
  return Answer(dv, "rsmi_dev_memory_total_get", "vram_total", total);
}

uint32_t rsmi_dev_memory_usage_get(uint32_t dv, uint32_t mem_type, uint64_t* used) {
  if (mem_type != 0) return kNotSupported;
  return Answer(dv, "rsmi_dev_memory_usage_get", "vram_used", used);
}

uint32_t rsmi_topo_numa_affinity_get(uint32_t dv, uint32_t* numa) {
  return Answer(dv, "rsmi_topo_numa_affinity_get", "numa_node", numa);
}

uint32_t rsmi_dev_drm_render_minor_get(uint32_t dv, uint32_t* minor) {
  return Answer(dv, "rsmi_dev_drm_render_minor_get", "render_minor", minor);
}

uint32_t rsmi_dev_temp_metric_get(uint32_t dv, uint32_t sensor, uint32_t metric, int64_t* t) {
  if (metric != 0) return kNotSupported;
  if (sensor == 0) return Answer(dv, "rsmi_dev_temp_metric_get", "temp_edge_mc", t);
  if (sensor == 1) return Answer(dv, "rsmi_dev_temp_metric_get", "temp_junction_mc", t);
  return kNotSupported;
}

uint32_t rsmi_version_str_get(uint32_t component, char* text, uint32_t len) {
  return Guard([&]() -> uint32_t {
    if (component != 0 || !g_scenario.contains("driver_version")) return kNotSupported;
    return CopyString(g_scenario["driver_version"].get<std::string>(), text, len);
  });
}

#ifndef FAKE_RSMI_WITHOUT_OPTIONAL
uint32_t rsmi_dev_busy_percent_get(uint32_t dv, uint32_t* percent) {
  return Answer(dv, "rsmi_dev_busy_percent_get", "busy_percent", percent);
}

uint32_t rsmi_dev_power_ave_get(uint32_t dv, uint32_t sensor, uint64_t* microwatts) {
  if (sensor != 0) return kNotSupported;
  return Answer(dv, "rsmi_dev_power_ave_get", "power_uw", microwatts);
}

uint32_t rsmi_topo_get_link_type(uint32_t src, uint32_t dst, uint64_t* hops, uint32_t* type) {
  return Guard([&]() -> uint32_t {
    if (hops == nullptr || type == nullptr || src == dst || Device(src) == nullptr ||
        Device(dst) == nullptr) {
      return kInvalidArgs;
    }
    if (g_scenario.contains("link_type_status")) {
      return g_scenario["link_type_status"].get<uint32_t>();
    }
    const bool xgmi = g_scenario.value("xgmi_all_pairs", false);
    *hops = xgmi ? 1 : 2;
    *type = xgmi ? 2 : 1;
    for (const Json& l : g_scenario.value("links", Json::array())) {
      const uint32_t a = l["a"].get<uint32_t>();
      const uint32_t b = l["b"].get<uint32_t>();
      if ((a == src && b == dst) || (a == dst && b == src)) {
        *hops = l["hops"].get<uint64_t>();
        *type = l["type"].get<uint32_t>();
      }
    }
    return kSuccess;
  });
}

uint32_t rsmi_version_get(RsmiVersion* version) {
  if (version == nullptr) return kInvalidArgs;
  version->major = 5;
  version->minor = 2;
  version->patch = 3;
  version->build = "fake";
  return kSuccess;
}

uint32_t rsmi_status_string(uint32_t status, const char** text) {
  if (text == nullptr) return kInvalidArgs;
  switch (status) {
    case 4:
      *text = "RSMI_STATUS_PERMISSION: fake permission denied";
      break;
    case 8:
      *text = "RSMI_STATUS_INIT_ERROR: fake init error";
      break;
    default:
      *text = "fake status";
      break;
  }
  return kSuccess;
}
#endif

#ifndef FAKE_RSMI_WITHOUT_PROCESSES
uint32_t rsmi_compute_process_info_get(RsmiProcessInfo* procs, uint32_t* num_items) {
  return Guard([&]() -> uint32_t {
    if (num_items == nullptr) return kInvalidArgs;
    if (uint32_t e = ProcessError("rsmi_compute_process_info_get"); e != kSuccess) return e;
    const Json& list = g_scenario.value("processes", Json::array());
    const uint32_t found = static_cast<uint32_t>(list.size());
    if (procs == nullptr) {
      *num_items = found;
      return kSuccess;
    }
    for (uint32_t i = 0; i < found && i < *num_items; ++i) {
      procs[i] = RsmiProcessInfo{list[i]["pid"].get<uint32_t>(), 100 + i, 0, 0, 0};
    }
    if (*num_items < found) return kInsufficientSize;  // *num_items stays, as the real one
    *num_items = found;
    return kSuccess;
  });
}

uint32_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t* dv_indices, uint32_t* num) {
  return Guard([&]() -> uint32_t {
    if (num == nullptr) return kInvalidArgs;
    if (uint32_t e = ProcessError("rsmi_compute_process_gpus_get"); e != kSuccess) return e;
    const Json* p = Process(pid);
    if (p == nullptr) return kNotFound;
    const Json& devices =
        p->contains("queues") ? (*p)["queues"] : p->value("devices", Json::array());
    const uint32_t found = static_cast<uint32_t>(devices.size());
    if (dv_indices != nullptr) {
      for (uint32_t i = 0; i < found && i < *num; ++i) dv_indices[i] = devices[i].get<uint32_t>();
      if (*num < found) return kInsufficientSize;
    }
    *num = found;
    return kSuccess;
  });
}

uint32_t rsmi_compute_process_info_by_pid_get(uint32_t pid, RsmiProcessInfo* proc) {
  return Guard([&]() -> uint32_t {
    if (proc == nullptr) return kInvalidArgs;
    if (uint32_t e = ProcessError("rsmi_compute_process_info_by_pid_get"); e != kSuccess) {
      return e;
    }
    const Json* p = Process(pid);
    if (p == nullptr) return kNotFound;
    *proc = RsmiProcessInfo{pid, 100, VramOf(*p, -1), 0, 0};
    return kSuccess;
  });
}

#ifndef FAKE_RSMI_WITHOUT_BY_DEVICE
uint32_t rsmi_compute_process_info_by_device_get(uint32_t pid, uint32_t dv, RsmiProcessInfo* proc) {
  return Guard([&]() -> uint32_t {
    if (proc == nullptr || Device(dv) == nullptr) return kInvalidArgs;
    if (uint32_t e = ProcessError("rsmi_compute_process_info_by_device_get"); e != kSuccess) {
      return e;
    }
    const Json* p = Process(pid);
    if (p == nullptr) return kNotFound;
    *proc = RsmiProcessInfo{pid, 100, VramOf(*p, dv), 0, 0};
    return kSuccess;
  });
}
#endif
#endif

}  // extern "C"
