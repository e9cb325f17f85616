#include "gpu/node_json.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>

namespace gpupool::gpu {
namespace {

namespace fs = std::filesystem;

Result<NodeInfo> FromText(const std::string& text) {
  GP_ASSIGN_OR_RETURN(Json j, ParseJson(text, "test.json"));
  return NodeFromJson(j, "test.json");
}

// Parses `text` and returns the error message ("" if it was accepted).
std::string ErrorOf(const std::string& text) {
  Result<NodeInfo> r = FromText(text);
  return r.ok() ? "" : r.status().message();
}

NodeInfo FullNode() {
  NodeInfo n;
  n.hostname = "node-1";
  n.nvidia = DriverInfo{"550.54.15", "12.4", {"/usr/lib/libcuda.so.550.54.15"}, {"/dev/nvidiactl"}};
  n.amd = DriverInfo{};  // present but empty must survive as present
  GpuInfo g;
  g.vendor = Vendor::kNvidia;
  g.index = 0;
  g.name = "NVIDIA H100 80GB HBM3 \"quoted\" \\ ünïcode";
  g.uuid = "GPU-12345678-aaaa-bbbb-cccc-123456789abc";
  g.pci_bus_id = "0000:18:00.0";
  g.memory_total_bytes = 85520809984ULL;
  g.memory_used_bytes = 0;
  g.compute_capability = ComputeCapability{9, 0};
  g.gfx_target = "";
  g.minor_number = 0;
  g.device_nodes = {"/dev/nvidia0"};
  g.numa_node = 1;
  g.cpu_affinity = "0-55,112-167";
  g.mig_enabled = true;
  g.mig_devices = {
      MigDevice{"MIG-aaaa", "1g.10gb", 9, 0, 10200547328ULL, {"/dev/nvidia-caps/nvidia-cap36"}},
      MigDevice{}};
  g.ecc_enabled = false;
  g.utilization_percent = 0;
  g.temperature_celsius = -5;
  g.power_watts = 71.123456789012345;
  g.power_limit_watts = 700;
  g.backend = "nvml";
  g.enforcement = "mps";
  n.gpus.push_back(g);
  GpuInfo a;
  a.vendor = Vendor::kAmd;
  a.index = 0;
  a.pci_bus_id = "0000:c1:00.0";
  a.gfx_target = "gfx90a";
  a.compute_partition = "CPX";
  a.memory_partition = "NPS4";
  a.compute_units = 38;
  n.gpus.push_back(a);
  GpuInfo u;  // everything unknown
  n.gpus.push_back(u);
  n.links = {GpuLink{"0000:18:00.0", "0000:c1:00.0", 0, 3, PcieLevel::kSystem},
             GpuLink{"0000:c1:00.0", "0000:18:00.0", 18, 0, PcieLevel::kUnknown}};
  n.links.pop_back();  // one entry per pair
  n.diagnostics = {{"sysfs", "something odd\nwith a newline"}, {"", ""}};
  return n;
}

TEST(NodeJsonTest, FullNodeRoundTripsExactly) {
  const NodeInfo n = FullNode();
  const std::string text = DumpJson(NodeToJson(n), 2);
  Result<NodeInfo> back = FromText(text);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, n);
  EXPECT_EQ(DumpJson(NodeToJson(*back), 2), text);
}

TEST(NodeJsonTest, UnknownValuesAreOmittedNotInvented) {
  NodeInfo n;
  n.gpus.push_back(GpuInfo{});
  const OrderedJson j = NodeToJson(n);
  const OrderedJson& g = j["gpus"][0];
  for (const char* key : {"index", "name", "uuid", "numa_node", "minor_number", "mig_enabled",
                          "ecc_enabled", "utilization_percent", "power_watts", "backend"}) {
    EXPECT_FALSE(g.contains(key)) << key;
  }
  EXPECT_EQ(g["vendor"], "unknown");
  EXPECT_FALSE(j.contains("drivers"));
  Result<NodeInfo> back = FromText(DumpJson(j));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, n);
}

TEST(NodeJsonTest, NonFinitePowerIsWrittenAsUnknown) {
  NodeInfo n;
  GpuInfo g;
  g.power_watts = std::numeric_limits<double>::quiet_NaN();
  n.gpus.push_back(g);
  EXPECT_FALSE(NodeToJson(n)["gpus"][0].contains("power_watts"));
}

TEST(NodeJsonTest, EveryExampleNodeRoundTrips) {
  const fs::path dir = fs::path(GPUPOOL_SOURCE_DIR) / "examples" / "nodes";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++count;
    SCOPED_TRACE(entry.path().string());
    Result<Json> j = ReadJsonFile(entry.path().string());
    ASSERT_TRUE(j.ok()) << j.status().message();
    Result<NodeInfo> n = NodeFromJson(*j, entry.path().string());
    ASSERT_TRUE(n.ok()) << n.status().message();
    EXPECT_FALSE(n->gpus.empty());
    const std::string once = DumpJson(NodeToJson(*n), 2);
    Result<NodeInfo> again = FromText(once);
    ASSERT_TRUE(again.ok()) << again.status().message();
    EXPECT_EQ(*again, *n);
    EXPECT_EQ(DumpJson(NodeToJson(*again), 2), once);
  }
  EXPECT_GE(count, 7);
}

constexpr const char* kHead = R"({"schema": "gpupool.node/v1", )";

std::string WithGpu(const std::string& gpu_fields) {
  return std::string(kHead) + R"("gpus": [{"vendor": "nvidia", )" + gpu_fields + "}]}";
}

TEST(NodeJsonTest, WrongTypeNamesTheField) {
  const std::string e = ErrorOf(WithGpu(R"("index": 0, "memory_total_bytes": "80GB")"));
  EXPECT_NE(e.find("test.json: gpus[0].memory_total_bytes: expected an integer, found string"),
            std::string::npos)
      << e;
}

TEST(NodeJsonTest, NegativeSizeIsRejected) {
  const std::string e = ErrorOf(WithGpu(R"("memory_used_bytes": -1)"));
  EXPECT_NE(e.find("gpus[0].memory_used_bytes: -1 is negative"), std::string::npos) << e;
  const std::string m =
      ErrorOf(WithGpu(R"("mig_devices": [{"uuid": "MIG-1", "memory_total_bytes": -4}])"));
  EXPECT_NE(m.find("gpus[0].mig_devices[0].memory_total_bytes"), std::string::npos) << m;
}

TEST(NodeJsonTest, UnknownVendorAndPcieLevelAreRejected) {
  const std::string v = ErrorOf(std::string(kHead) + R"("gpus": [{"vendor": "matrox"}]})");
  EXPECT_NE(v.find("gpus[0].vendor: 'matrox' is not a known vendor; use nvidia, amd"),
            std::string::npos)
      << v;
  const std::string l = ErrorOf(std::string(kHead) +
                                R"("gpus": [{"vendor": "nvidia", "pci_bus_id": "0000:01:00.0"},
                  {"vendor": "nvidia", "pci_bus_id": "0000:02:00.0"}],
         "links": [{"a": "0000:01:00.0", "b": "0000:02:00.0", "pcie_level": "PCIE4"}]})");
  EXPECT_NE(l.find("links[0].pcie_level: 'PCIE4' is not a PCIe level"), std::string::npos) << l;
}

TEST(NodeJsonTest, DuplicateBusIdsAndIndicesAreRejected) {
  const std::string bus =
      ErrorOf(std::string(kHead) +
              R"("gpus": [{"vendor": "nvidia", "index": 0, "pci_bus_id": "0000:01:00.0"},
                  {"vendor": "nvidia", "index": 1, "pci_bus_id": "0000:01:00.0"}]})");
  EXPECT_NE(bus.find("gpus[1].pci_bus_id: 0000:01:00.0 is already used by gpus[0]"),
            std::string::npos)
      << bus;
  const std::string idx = ErrorOf(std::string(kHead) +
                                  R"("gpus": [{"vendor": "amd", "index": 3},
                                              {"vendor": "amd", "index": 3}]})");
  EXPECT_NE(idx.find("gpus[1].index: amd GPU 3 is already gpus[0]"), std::string::npos) << idx;
  // The same index under two vendors is fine: indices are per vendor runtime.
  EXPECT_EQ(
      ErrorOf(std::string(kHead) +
              R"("gpus": [{"vendor": "nvidia", "index": 0}, {"vendor": "amd", "index": 0}]})"),
      "");
  const std::string uuid = ErrorOf(std::string(kHead) +
                                   R"("gpus": [{"vendor": "nvidia", "uuid": "GPU-1"},
                                               {"vendor": "nvidia", "uuid": "GPU-1"}]})");
  EXPECT_NE(uuid.find("gpus[1].uuid: GPU-1 is already used by gpus[0]"), std::string::npos) << uuid;
}

// Two GPUs on one device would each be granted it: two jobs on one device (finding 9 of
// the fifth red-team round).
TEST(NodeJsonTest, DuplicateDeviceNodesAndMinorNumbersAreRejected) {
  const std::string dev = ErrorOf(std::string(kHead) + R"("gpus": [
      {"vendor": "nvidia", "index": 0, "minor_number": 0, "device_nodes": ["/dev/nvidia0"]},
      {"vendor": "nvidia", "index": 1, "minor_number": 1, "device_nodes": ["/dev/nvidia0"]}]})");
  EXPECT_NE(dev.find("gpus[1].device_nodes: /dev/nvidia0 is already a device node of gpus[0]; "
                     "every GPU needs its own device nodes"),
            std::string::npos)
      << dev;
  const std::string minor = ErrorOf(std::string(kHead) + R"("gpus": [
      {"vendor": "amd", "index": 0, "minor_number": 128},
      {"vendor": "amd", "index": 1, "minor_number": 128}]})");
  EXPECT_NE(minor.find("gpus[1].minor_number: amd minor number 128 is already that of gpus[0]; "
                       "every GPU needs its own device"),
            std::string::npos)
      << minor;
  // The same minor number under two vendors is two devices (/dev/nvidia0, renderD0); one
  // GPU may list a node of its own twice (it is still its own).
  EXPECT_EQ(ErrorOf(std::string(kHead) + R"("gpus": [
      {"vendor": "nvidia", "minor_number": 0, "device_nodes": ["/dev/nvidia0", "/dev/nvidia0"]},
      {"vendor": "amd", "minor_number": 0, "device_nodes": ["/dev/dri/renderD0"]}]})"),
            "");
}

TEST(NodeJsonTest, LinksMustNameGpusOfTheNode) {
  const std::string e = ErrorOf(std::string(kHead) +
                                R"("gpus": [{"vendor": "nvidia", "pci_bus_id": "0000:01:00.0"},
                  {"vendor": "nvidia", "pci_bus_id": "0000:02:00.0"}],
         "links": [{"a": "0000:01:00.0", "b": "0000:99:00.0", "nvlink_count": 4}]})");
  EXPECT_NE(e.find("links[0].b: '0000:99:00.0' is not the pci_bus_id of any GPU"),
            std::string::npos)
      << e;
  const std::string self = ErrorOf(std::string(kHead) +
                                   R"("gpus": [{"vendor": "nvidia", "pci_bus_id": "0000:01:00.0"},
                  {"vendor": "nvidia", "pci_bus_id": "0000:02:00.0"}],
         "links": [{"a": "0000:01:00.0", "b": "0000:01:00.0"}]})");
  EXPECT_NE(self.find("links[0]: links a GPU (0000:01:00.0) to itself"), std::string::npos) << self;
  const std::string twice = ErrorOf(std::string(kHead) +
                                    R"("gpus": [{"vendor": "nvidia", "pci_bus_id": "0000:01:00.0"},
                  {"vendor": "nvidia", "pci_bus_id": "0000:02:00.0"},
                  {"vendor": "nvidia", "pci_bus_id": "0000:03:00.0"}],
         "links": [{"a": "0000:01:00.0", "b": "0000:02:00.0"},
                   {"a": "0000:02:00.0", "b": "0000:01:00.0"}]})");
  EXPECT_NE(twice.find("links[1]: the pair"), std::string::npos) << twice;
}

TEST(NodeJsonTest, TenThousandGpusEndInAClearError) {
  std::string text = std::string(kHead) + R"("gpus": [)";
  for (int i = 0; i < 10000; ++i) {
    char bus[32];
    std::snprintf(bus, sizeof bus, "%04x:%02x:00.0", i / 256, i % 256);
    text += std::string(i ? "," : "") + R"({"vendor": "nvidia", "index": )" + std::to_string(i) +
            R"(, "pci_bus_id": ")" + bus + R"("})";
  }
  text += "]}";
  Result<NodeInfo> r = FromText(text);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("gpus: 10000 GPUs is more than the 1024 one node can have"),
            std::string::npos)
      << r.status().message();
}

TEST(NodeJsonTest, AbsurdStringLengthsAreRejected) {
  const std::string e = ErrorOf(WithGpu(R"("name": ")" + std::string(100000, 'x') + R"(")"));
  EXPECT_NE(e.find("gpus[0].name: is 100000 bytes long, over the limit of 4096"), std::string::npos)
      << e;
  const std::string host =
      ErrorOf(std::string(kHead) + R"("hostname": ")" + std::string(300, 'h') + R"("})");
  EXPECT_NE(host.find("hostname: is 300 bytes long"), std::string::npos) << host;
}

TEST(NodeJsonTest, UnknownFieldsAreRejected) {
  const std::string e = ErrorOf(WithGpu(R"("index": 0, "memory_total": 5)"));
  EXPECT_NE(e.find("gpus[0].memory_total: unknown field"), std::string::npos) << e;
  const std::string top = ErrorOf(std::string(kHead) + R"("gpu": []})");
  EXPECT_NE(top.find("gpu: unknown field"), std::string::npos) << top;
}

TEST(NodeJsonTest, SchemaIsRequiredAndChecked) {
  EXPECT_NE(ErrorOf(R"({"gpus": []})").find("schema: required field is missing"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"schema": "gpupool.node/v9", "gpus": []})")
                .find("schema: expected \"gpupool.node/v1\""),
            std::string::npos);
  EXPECT_NE(ErrorOf("[1, 2]").find("expected a JSON object"), std::string::npos);
}

TEST(NodeJsonTest, FieldFormatsAreChecked) {
  EXPECT_NE(ErrorOf(WithGpu(R"("pci_bus_id": "0000:3B:00.0")"))
                .find("gpus[0].pci_bus_id: '0000:3B:00.0' is not a PCI bus id in canonical form"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithGpu(R"("compute_capability": "nine")"))
                .find("gpus[0].compute_capability: 'nine' is not a compute capability"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithGpu(R"("cpu_affinity": "0-a")")).find("gpus[0].cpu_affinity"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithGpu(R"("utilization_percent": 101)"))
                .find("gpus[0].utilization_percent: 101 is outside the range 0..100"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithGpu(R"("power_watts": -3.5)")).find("gpus[0].power_watts"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithGpu(R"("mig_enabled": "yes")"))
                .find("gpus[0].mig_enabled: expected true or false, found string"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithGpu(R"("enforcement": "hopes")"))
                .find("gpus[0].enforcement: 'hopes' is not an enforcement mode; use mps, mig, "
                      "dmem or none"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithGpu(R"("compute_partition": "cpx")"))
                .find("gpus[0].compute_partition: 'cpx' is not a compute partition mode; use "
                      "SPX, DPX, TPX, QPX or CPX"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithGpu(R"("memory_partition": "NPS3")"))
                .find("gpus[0].memory_partition: 'NPS3' is not a memory partition mode"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithGpu(R"("compute_units": -1)")).find("gpus[0].compute_units"),
            std::string::npos);
}

TEST(NodeJsonTest, DevicePathsMustStayInDev) {
  EXPECT_NE(ErrorOf(WithGpu(R"("device_nodes": ["/etc/shadow"])"))
                .find("gpus[0].device_nodes[0]: '/etc/shadow' is not under /dev"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithGpu(R"("device_nodes": ["/dev/../etc/shadow"])"))
                .find("is not an absolute path without '..'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithGpu(R"("device_nodes": ["/dev/nvidia 0"])"))
                .find("contains a space, comma or control character"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf(std::string(kHead) + R"("drivers": {"nvidia": {"libraries": ["lib/libcuda.so"]}}})")
          .find("drivers.nvidia.libraries[0]: 'lib/libcuda.so' is not an absolute path"),
      std::string::npos);
  EXPECT_NE(ErrorOf(std::string(kHead) + R"("drivers": {"intel": {}}})")
                .find("drivers.intel: unknown field"),
            std::string::npos);
}

// Issue 30: a node file may say what the machine offers jobs besides its GPUs; checked
// as every field is, and read by the agent that replays it.
TEST(NodeJsonTest, AHostObjectSaysTheCpusAndMemoryAReplayOffers) {
  Json j = Json::parse(R"({"schema": "gpupool.node/v1", "hostname": "h",
                           "host": {"cpus": 2.5, "memory_bytes": 68719476736}})");
  ASSERT_TRUE(NodeFromJson(j, "f.json").ok());
  Result<HostResources> host = HostResourcesFromJson(j, "f.json");
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ(host->cpu_milli, 2500);
  EXPECT_EQ(host->memory_mib, 65536);
  j.erase("host");
  EXPECT_EQ(HostResourcesFromJson(j, "f.json")->cpu_milli, 0);  // says nothing: 0
  j["host"] = Json::parse(R"({"cpus": -1})");
  EXPECT_NE(NodeFromJson(j, "f.json").status().message().find("f.json: host.cpus: a number"),
            std::string::npos)
      << NodeFromJson(j, "f.json").status().message();
  EXPECT_FALSE(HostResourcesFromJson(j, "f.json").ok());
  j["host"] = Json::parse(R"({"cpu": 4})");
  EXPECT_NE(NodeFromJson(j, "f.json").status().message().find("cpu"), std::string::npos);
  j["host"] = Json::parse(R"({"memory_bytes": "64G"})");
  EXPECT_NE(NodeFromJson(j, "f.json").status().message().find("host.memory_bytes"),
            std::string::npos);
}

}  // namespace
}  // namespace gpupool::gpu
