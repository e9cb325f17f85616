#include <gtest/gtest.h>

#include <algorithm>

#include "gpu/export/exporters.h"
#include "gpu/export/test_nodes.h"

namespace gpupool::gpu {
namespace {

using testing::AmdGpu;
using testing::NvidiaGpu;
using testing::TwoH100;

// 2 sockets x `cores` cores x 2 threads, numbered as Linux does on most x86 servers:
// first threads of socket 0's cores, then socket 1's, then the second threads in the
// same order (CPU c and c + 2*cores are one core).
CpuTopology TwoSocketsWithSmt(int cores) {
  CpuTopology t;
  const int n = 2 * cores;
  for (int s = 0; s < 2; ++s) {
    std::vector<int> package;
    for (int c = s * cores; c < (s + 1) * cores; ++c) {
      t.cores.push_back({c, c + n});
      package.push_back(c);
    }
    for (int c = s * cores; c < (s + 1) * cores; ++c) package.push_back(c + n);
    t.packages.push_back(package);
  }
  return t;
}

GresOptions WithTopology(CpuTopology t) {
  GresOptions o;
  o.cpu_topology = std::move(t);
  return o;
}

std::string Gres(const NodeInfo& n, const GresOptions& o = {}) {
  Result<std::string> text = ExportGres(n, o);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : "";
}

TEST(GresExportTest, ShortTypeNamesAreModelNames) {
  EXPECT_EQ(GresShortTypeName("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(GresShortTypeName("NVIDIA A100-SXM4-80GB"), "a100");
  EXPECT_EQ(GresShortTypeName("Tesla V100-SXM3-32GB"), "v100");
  EXPECT_EQ(GresShortTypeName("AMD Instinct MI250X"), "mi250x");
  EXPECT_EQ(GresShortTypeName("NVIDIA GeForce RTX 4090"), "rtx4090");
  EXPECT_EQ(GresShortTypeName("NVIDIA L40S"), "l40s");
  EXPECT_EQ(GresShortTypeName("NVIDIA"), "");
  EXPECT_EQ(GresShortTypeName(""), "");
  EXPECT_EQ(GresShortTypeName("Weird=Name;rm -rf"), "weirdnamerm");
}

// Issue 15 A.3: our Types must be the ones Slurm's AutoDetect=nvml derives (gpu_nvml.c:
// nvmlDeviceGetName through gpu_common_underscorify_tolower), or a gres.conf that pins
// what AutoDetect finds names different GPUs than Slurm sees.
TEST(GresExportTest, TypesAreWhatSlurmAutoDetectNvmlNames) {
  GpuInfo g = NvidiaGpu(0, "GPU-1", "0000:01:00.0");
  g.backend = "nvml";
  EXPECT_EQ(GresTypeName(g), "nvidia_h100_80gb_hbm3");
  g.name = "NVIDIA A100-SXM4-40GB";
  EXPECT_EQ(GresTypeName(g), "nvidia_a100-sxm4-40gb");
  g.name = "Tesla V100-SXM3-32GB";
  EXPECT_EQ(GresTypeName(g), "tesla_v100-sxm3-32gb");
  g.name = "NVIDIA GeForce RTX 4090";
  EXPECT_EQ(GresTypeName(g), "nvidia_geforce_rtx_4090");
  // MIG: the parent's type up to its first '-', then the profile.
  MigDevice m;
  m.profile = "1g.5gb";
  g.name = "NVIDIA A100-SXM4-40GB";
  EXPECT_EQ(GresTypeName(g, &m), "nvidia_a100_1g.5gb");
  g.name = "NVIDIA H100 80GB HBM3";
  m.profile = "1g.10gb+me";
  EXPECT_EQ(GresTypeName(g, &m), "nvidia_h100_80gb_hbm3_1g.10gbme");
  // Nothing a name holds can break a gres.conf or slurm.conf line.
  g.name = "NVIDIA X=1:2,3 #4\n";
  EXPECT_EQ(GresTypeName(g), "nvidia_x123_4");
  // Names NVML did not give keep the short model name: sysfs's pci.ids names, AMD.
  g.backend = "sysfs";
  g.name = "NVIDIA GH100 [H100 SXM5 80GB]";
  EXPECT_EQ(GresTypeName(g), "gh100");
  EXPECT_EQ(GresTypeName(AmdGpu(0, "0x1", "0000:c1:00.0")), "mi250x");
}

// Issue 15 A.3, "`--format gres` cannot be pasted into Slurm": lines had no NodeName=,
// Cores= held kernel CPU ids (0-55,112-167 on a 2x56-core node with SMT, where Slurm has
// only cores 0-111), Types did not match AutoDetect=nvml, and nothing said what
// slurm.conf needs.
TEST(GresExportTest, GresConfCanBePastedIntoSlurm) {
  NodeInfo n = TwoH100();
  n.gpus[0].backend = n.gpus[1].backend = "nvml";
  n.gpus[0].cpu_affinity = "0-55,112-167";
  n.gpus[1].cpu_affinity = "56-111,168-223";
  EXPECT_EQ(Gres(n, WithTopology(TwoSocketsWithSmt(56))),
            "# gres.conf for h100-pair, written by `gpupool gpus --format gres`\n"
            "# slurm.conf needs (merge into the node's own NodeName line):\n"
            "#   GresTypes=gpu\n"
            "#   NodeName=h100-pair CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 "
            "ThreadsPerCore=2 Gres=gpu:nvidia_h100_80gb_hbm3:2\n"
            "NodeName=h100-pair Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia0 "
            "Cores=0-55 Links=-1,18\n"
            "NodeName=h100-pair Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia1 "
            "Cores=56-111 Links=18,-1\n");
}

TEST(GresExportTest, NodeNameIsTheShortHostNameOrTheOption) {
  NodeInfo n = TwoH100();
  n.hostname = "h100-pair.cluster.example.org";
  std::string g = Gres(n);
  EXPECT_NE(g.find("\nNodeName=h100-pair Name=gpu Type="), std::string::npos) << g;
  EXPECT_NE(g.find("#   NodeName=h100-pair Gres=gpu:nvidia_h100_80gb_hbm3:2\n"), std::string::npos)
      << g;

  GresOptions o;
  o.node_name = "gpu[01-02]";
  g = Gres(n, o);
  EXPECT_EQ(std::count(g.begin(), g.end(), '\n'), 6) << g;
  EXPECT_NE(g.find("\nNodeName=gpu[01-02] Name=gpu"), std::string::npos) << g;

  o.node_name = "two words";
  Result<std::string> bad = ExportGres(n, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("not a Slurm node name"), std::string::npos);

  n.hostname = "";
  bad = ExportGres(n, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--node-name"), std::string::npos);
}

TEST(GresExportTest, CoresAreLeftOutWithASayWhenTheTopologyIsUnknown) {
  NodeInfo n = TwoH100();
  n.gpus[0].cpu_affinity = "0-55,112-167";
  const std::string g = Gres(n);
  const size_t note = g.find("\n# Cores= left out: the node's CPU topology is not known here");
  EXPECT_NE(note, std::string::npos) << g;
  EXPECT_EQ(g.find("Cores="), note + 3) << g;  // the note is the only Cores= there is
  EXPECT_EQ(g.rfind("Cores="), note + 3) << g;
  // Without any CPU list there is nothing to explain.
  EXPECT_EQ(Gres(TwoH100()).find("Cores="), std::string::npos);
}

TEST(GresExportTest, CpusOutsideTheTopologyAreSkipped) {
  NodeInfo n = TwoH100();
  n.gpus[0].cpu_affinity = "0-3,500";  // 500 is offline (or not on this node)
  n.gpus[1].cpu_affinity = "600-601";
  const std::string g = Gres(n, WithTopology(TwoSocketsWithSmt(4)));
  EXPECT_NE(g.find("File=/dev/nvidia0 Cores=0-3 Links"), std::string::npos) << g;
  EXPECT_NE(g.find("File=/dev/nvidia1 Links"), std::string::npos) << g;
  EXPECT_NE(g.find("# Cores= left out: the CPUs of GPU 1 (600-601) are not among the node's "
                   "online CPUs\n"),
            std::string::npos)
      << g;
}

TEST(GresExportTest, LinksAreLeftOutWithoutNvlink) {
  NodeInfo n = TwoH100();
  n.links[0].nvlink_count = 0;
  EXPECT_EQ(Gres(n).find("Links="), std::string::npos);
}

TEST(GresExportTest, AmdUsesRenderNodesAndXgmi) {
  NodeInfo n;
  n.hostname = "mi";
  n.gpus = {AmdGpu(0, "0x1", "0000:c1:00.0"), AmdGpu(1, "0x2", "0000:c6:00.0")};
  n.links = {GpuLink{"0000:c1:00.0", "0000:c6:00.0", 0, 4, PcieLevel::kSystem}};
  EXPECT_EQ(Gres(n),
            "# gres.conf for mi, written by `gpupool gpus --format gres`\n"
            "# slurm.conf needs (merge into the node's own NodeName line):\n"
            "#   GresTypes=gpu\n"
            "#   NodeName=mi Gres=gpu:mi250x:2\n"
            "NodeName=mi Name=gpu Type=mi250x File=/dev/dri/renderD128 Links=-1,4\n"
            "NodeName=mi Name=gpu Type=mi250x File=/dev/dri/renderD129 Links=4,-1\n");
}

TEST(GresExportTest, MigDevicesGetMultipleFilesAndTheirOwnTypes) {
  NodeInfo n = TwoH100();
  GpuInfo& g = n.gpus[0];
  g.backend = n.gpus[1].backend = "nvml";
  g.mig_enabled = true;
  g.mig_devices = {{"MIG-a",
                    "3g.40gb",
                    1,
                    0,
                    0,
                    {"/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"}},
                   {"MIG-b",
                    "1g.10gb",
                    9,
                    0,
                    0,
                    {"/dev/nvidia-caps/nvidia-cap84", "/dev/nvidia-caps/nvidia-cap85"}}};
  EXPECT_EQ(Gres(n),
            "# gres.conf for h100-pair, written by `gpupool gpus --format gres`\n"
            "# slurm.conf needs (merge into the node's own NodeName line):\n"
            "#   GresTypes=gpu\n"
            "#   NodeName=h100-pair Gres=gpu:nvidia_h100_80gb_hbm3_3g.40gb:1,"
            "gpu:nvidia_h100_80gb_hbm3_1g.10gb:1,gpu:nvidia_h100_80gb_hbm3:1\n"
            "NodeName=h100-pair Name=gpu Type=nvidia_h100_80gb_hbm3_3g.40gb MultipleFiles="
            "/dev/nvidia0,/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap13\n"
            "NodeName=h100-pair Name=gpu Type=nvidia_h100_80gb_hbm3_1g.10gb MultipleFiles="
            "/dev/nvidia0,/dev/nvidia-caps/nvidia-cap84,/dev/nvidia-caps/nvidia-cap85\n"
            "NodeName=h100-pair Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia1\n");
}

// Issue 15 A.4: a MIG device without its /dev/nvidia-caps nodes was printed as
// `MultipleFiles=/dev/nvidia0`, once per MIG device: every job would get the whole GPU,
// and slurmd refuses MultipleFiles with a single file. It is now left out, saying so.
TEST(GresExportTest, MigDeviceWithoutCapsNodesIsLeftOutNotPrintedAsTheWholeGpu) {
  NodeInfo n = TwoH100();
  n.gpus[0].mig_enabled = true;
  n.gpus[0].mig_devices = {{"MIG-a", "3g.40gb", 1, 0, 0, {}},
                           {"MIG-b",
                            "1g.10gb",
                            9,
                            0,
                            0,
                            {"/dev/nvidia-caps/nvidia-cap84", "/dev/nvidia-caps/nvidia-cap85"}}};
  const std::string g = Gres(n);
  EXPECT_EQ(g.find("MultipleFiles=/dev/nvidia0\n"), std::string::npos) << g;
  EXPECT_EQ(g.find("Type=nvidia_h100_80gb_hbm3_3g.40gb"), std::string::npos) << g;
  EXPECT_NE(g.find("# left out: MIG device MIG-a of GPU 0 has no /dev/nvidia-caps nodes"),
            std::string::npos)
      << g;
  EXPECT_NE(g.find("Gres=gpu:nvidia_h100_80gb_hbm3_1g.10gb:1,gpu:nvidia_h100_80gb_hbm3:1\n"),
            std::string::npos)
      << g;
}

TEST(GresExportTest, HostileNamesCannotAddLines) {
  NodeInfo n = TwoH100();
  n.hostname = "x\nName=gpu File=/dev/sda";
  EXPECT_FALSE(ExportGres(n, {}).ok());  // not a node name
  GresOptions o;
  o.node_name = "x";
  n.gpus[0].name = "NVIDIA\nName=gpu File=/dev/sda";
  n.gpus[0].backend = "nvml";
  n.gpus[0].device_nodes = {"/dev/nvidia0\nName=gpu"};
  const std::string g = Gres(n, o);
  EXPECT_EQ(std::count(g.begin(), g.end(), '\n'), 6) << g;
}

TEST(GresExportTest, NoGpus) {
  NodeInfo n;
  n.hostname = "empty";
  EXPECT_EQ(Gres(n),
            "# gres.conf for empty, written by `gpupool gpus --format gres`\n"
            "# no GPUs found\n");
}

}  // namespace
}  // namespace gpupool::gpu
