#include "fake_nvml_scenario.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace fake_nvml {
namespace {

using nlohmann::json;

// "text", or {"bytes": [78, 255, ...], "unterminated": true}.
FakeString ReadString(const json& j) {
  FakeString s;
  if (j.is_string()) {
    s.bytes = j.get<std::string>();
    return s;
  }
  for (const auto& b : j.at("bytes")) s.bytes.push_back(static_cast<char>(b.get<int>()));
  s.unterminated = j.value("unterminated", false);
  return s;
}

std::map<std::string, int> ReadErrors(const json& j) {
  std::map<std::string, int> out;
  if (j.contains("errors")) {
    for (const auto& [name, code] : j.at("errors").items()) out[name] = code.get<int>();
  }
  return out;
}

std::vector<unsigned> ParseCpuList(const std::string& list) {
  std::vector<unsigned> cpus;
  std::stringstream in(list);
  std::string range;
  while (std::getline(in, range, ',')) {
    unsigned a = 0, b = 0;
    if (std::sscanf(range.c_str(), "%u-%u", &a, &b) == 2) {
      for (unsigned c = a; c <= b; ++c) cpus.push_back(c);
    } else if (std::sscanf(range.c_str(), "%u", &a) == 1) {
      cpus.push_back(a);
    }
  }
  return cpus;
}

int RemoteType(const json& j) {
  if (j.is_number()) return j.get<int>();
  const std::string t = j.get<std::string>();
  if (t == "gpu") return 0;
  if (t == "ibmnpu") return 1;
  if (t == "switch") return 2;
  return 0xFF;
}

std::vector<FakeProcess> ReadProcesses(const json& j) {
  std::vector<FakeProcess> out;
  if (!j.contains("processes")) return out;
  for (const auto& p : j.at("processes")) {
    FakeProcess f;
    f.pid = p.at("pid").get<unsigned>();
    f.used_memory = p.value("used_memory", 0ULL);
    f.sm_util = p.value("sm_util", 0u);
    out.push_back(f);
  }
  return out;
}

// [79, {"xid": 13, "after_samples": 2}, ...]: due `now` + after_samples.
std::vector<FakeXid> ReadXids(const json& j, long long now) {
  std::vector<FakeXid> out;
  if (!j.contains("xid_events")) return out;
  for (const auto& x : j.at("xid_events")) {
    FakeXid f;
    if (x.is_number()) {
      f.xid = x.get<unsigned long long>();
    } else {
      f.xid = x.at("xid").get<unsigned long long>();
      f.due = x.value("after_samples", 0LL);
    }
    f.due += now;
    out.push_back(f);
  }
  return out;
}

// The hardware health keys present in `j` (a scenario's device or a telemetry entry).
void ReadHealth(const json& j, FakeHealth* h) {
  h->retired_sbe = j.value("retired_pages_sbe", h->retired_sbe);
  h->retired_dbe = j.value("retired_pages_dbe", h->retired_dbe);
  h->retired_pending = j.value("retired_pages_pending", h->retired_pending);
  h->remapped_correctable = j.value("remapped_rows_correctable", h->remapped_correctable);
  h->remapped_uncorrectable = j.value("remapped_rows_uncorrectable", h->remapped_uncorrectable);
  h->remap_pending = j.value("remapped_rows_pending", h->remap_pending);
  h->remap_failure = j.value("remapped_rows_failure", h->remap_failure);
  h->clocks_event_reasons = j.value("clocks_event_reasons", h->clocks_event_reasons);
}

FakeDevice ReadDevice(const json& j, int index) {
  FakeDevice d;
  d.index = index;
  if (j.contains("name")) d.name = ReadString(j.at("name"));
  if (j.contains("uuid")) d.uuid = ReadString(j.at("uuid"));
  d.bus_id = j.value("bus_id", "");
  unsigned domain = 0, bus = 0, dev = 0;
  if (std::sscanf(d.bus_id.c_str(), "%x:%x:%x", &domain, &bus, &dev) == 3) {
    d.domain = domain;
    d.bus = bus;
    d.device = dev;
  }
  d.domain = j.value("pci_domain", d.domain);
  d.bus = j.value("pci_bus", d.bus);
  d.device = j.value("pci_device", d.device);
  d.pci_device_id = j.value("pci_device_id", 0u);
  d.memory_total = j.value("memory_total", uint64_t{0});
  d.memory_used = j.value("memory_used", uint64_t{0});
  if (j.contains("compute_capability")) {
    d.cc_major = j.at("compute_capability").at(0).get<int>();
    d.cc_minor = j.at("compute_capability").at(1).get<int>();
  }
  d.minor = j.value("minor", static_cast<unsigned>(index));
  d.numa_node = j.value("numa_node", 0u);
  d.cpus = ParseCpuList(j.value("cpus", ""));
  d.mig_current = j.value("mig_current", 0u);
  d.mig_pending = j.value("mig_pending", d.mig_current);
  d.mig_max = j.value("mig_max", 0u);
  if (j.contains("migs")) {
    for (const auto& m : j.at("migs")) {
      FakeMig mig;
      mig.slot = m.at("slot").get<unsigned>();
      mig.uuid = ReadString(m.at("uuid"));
      mig.name = ReadString(m.at("name"));
      mig.memory_total = m.value("memory_total", uint64_t{0});
      mig.memory_used = m.value("memory_used", uint64_t{0});
      mig.gpu_instance_id = m.value("gpu_instance_id", 0u);
      mig.compute_instance_id = m.value("compute_instance_id", 0u);
      mig.errors = ReadErrors(m);
      d.migs.push_back(std::move(mig));
    }
  }
  d.ecc_current = j.value("ecc_current", 0u);
  d.ecc_pending = j.value("ecc_pending", d.ecc_current);
  d.util_gpu = j.value("utilization_gpu", 0u);
  d.util_memory = j.value("utilization_memory", 0u);
  d.temperature = j.value("temperature", 0u);
  d.power_mw = j.value("power_mw", 0u);
  d.power_limit_mw = j.value("power_limit_mw", 0u);
  d.ecc_total = j.value("ecc_total", 0ULL);
  d.processes = ReadProcesses(j);
  ReadHealth(j, &d.health);
  d.xid_events = ReadXids(j, 0);
  d.nvlink_max = j.value("nvlink_max", 0u);
  // "nvlinks": [{"remote": bus id, "type": "switch", "count": 5, "active": true}, ...]
  // fills link indices in order.
  if (j.contains("nvlinks")) {
    for (const auto& g : j.at("nvlinks")) {
      const int count = g.value("count", 1);
      for (int i = 0; i < count; ++i) {
        FakeLink l;
        l.active = g.value("active", true);
        l.remote_bus_id = g.value("remote", "");
        l.remote_type = g.contains("type") ? RemoteType(g.at("type")) : 0;
        d.links.push_back(l);
      }
    }
  }
  d.errors = ReadErrors(j);
  return d;
}

}  // namespace

bool LoadScenario(const std::string& path, Scenario* out, std::string* error) {
  try {
    std::ifstream in(path);
    if (!in) {
      *error = "cannot open scenario " + path;
      return false;
    }
    const json j = json::parse(in);
    Scenario s;
    s.init_error = j.value("init_error", 0);
    if (j.contains("driver_version")) s.driver_version = ReadString(j.at("driver_version"));
    s.cuda_version = j.value("cuda_version", 0);
    s.device_count = j.value("device_count", -1LL);
    s.errors = ReadErrors(j);
    if (j.contains("devices")) {
      int index = 0;
      for (const auto& d : j.at("devices")) s.devices.push_back(ReadDevice(d, index++));
    }
    if (j.contains("topology")) {
      const json& t = j.at("topology");
      s.topology_default = t.value("default", 50);
      if (t.contains("pairs")) {
        for (const auto& p : t.at("pairs")) {
          int a = p.at(0).get<int>();
          int b = p.at(1).get<int>();
          if (a > b) std::swap(a, b);
          s.topology[{a, b}] = p.at(2).get<int>();
        }
      }
    }
    *out = std::move(s);
    return true;
  } catch (const std::exception& e) {
    *error = "bad scenario " + path + ": " + e.what();
    return false;
  }
}

bool ApplyTelemetry(const std::string& path, Scenario* scenario, std::string* error) {
  try {
    std::ifstream in(path);
    if (!in) {
      *error = "cannot open telemetry " + path;
      return false;
    }
    const json j = json::parse(in);
    std::vector<FakeDevice> devices = scenario->devices;
    if (j.contains("devices")) {
      for (const auto& [key, d] : j.at("devices").items()) {
        const size_t i = std::stoul(key);
        if (i >= devices.size()) continue;
        FakeDevice& f = devices[i];
        f.util_gpu = d.value("utilization_gpu", f.util_gpu);
        f.memory_used = d.value("memory_used", f.memory_used);
        f.power_mw = d.value("power_mw", f.power_mw);
        f.temperature = d.value("temperature", f.temperature);
        f.ecc_total = d.value("ecc_total", f.ecc_total);
        if (d.contains("processes")) f.processes = ReadProcesses(d);
        ReadHealth(d, &f.health);
        for (const FakeXid& x : ReadXids(d, scenario->empty_waits)) f.xid_events.push_back(x);
      }
    }
    // In place, so that handles (pointers into the devices) stay valid.
    for (size_t i = 0; i < devices.size(); ++i) {
      FakeDevice& f = scenario->devices[i];
      f.util_gpu = devices[i].util_gpu;
      f.memory_used = devices[i].memory_used;
      f.power_mw = devices[i].power_mw;
      f.temperature = devices[i].temperature;
      f.ecc_total = devices[i].ecc_total;
      f.processes = devices[i].processes;
      f.health = devices[i].health;
      f.xid_events = devices[i].xid_events;
    }
    return true;
  } catch (const std::exception& e) {
    *error = "bad telemetry " + path + ": " + e.what();
    return false;
  }
}

}  // namespace fake_nvml
