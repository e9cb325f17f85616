// Checks `gpupool gpus --format gres` against Slurm itself: Debian's slurmd reads our
// gres.conf and slurm.conf lines (`slurmd -G`), and its own core numbering of fake CPU
// topologies (`slurmd -C`, and the CPU map `slurmd -G -vvvvvv` logs) must agree with
// ours. hwloc, which slurmd uses, reads the same fake sysfs tree as we do through
// HWLOC_FSROOT. Skips, saying why, where slurmd is not installed (`apt-get install
// slurmd`; scripts/install-deps.sh leaves it out because installing it enables daemons).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/file_util.h"
#include "common/strings.h"
#include "gpu/export/exporters.h"
#include "gpu/sysfs/cpu_topology_reader.h"
#include "gpu/sysfs/fake_sysfs_tree.h"

namespace gpupool::gpu {
namespace {

using testing::FakeSysfsTree;
using FakeCpu = FakeSysfsTree::FakeCpu;

constexpr char kNode[] = "gpupool-test";

std::string FindSlurmd() {
  for (const char* dir : {"/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin"}) {
    const std::string path = std::string(dir) + "/slurmd";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

struct ShellRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

ShellRun Shell(const std::string& command) {
  ShellRun run;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) run.output.append(buf, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

class GresSlurmdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    slurmd_ = FindSlurmd();
    if (slurmd_.empty()) {
      GTEST_SKIP() << "slurmd is not installed, so gres.conf is not checked against Slurm "
                      "(apt-get install slurmd to run this test)";
    }
  }

  // `slurmd ARGS` with hwloc reading the fake tree's sys/ (or this machine's).
  ShellRun Slurmd(const std::string& args) const {
    const std::string root = real_machine_ ? "" : "HWLOC_FSROOT='" + tree_.root() + "' ";
    return Shell(root + "timeout 60 '" + slurmd_ + "' " + args);
  }

  // slurmd -C's layout ("CPUs=16 Boards=1 ... ThreadsPerCore=2"), after checking that
  // hwloc read the fake tree (an hwloc without HWLOC_FSROOT would describe this machine).
  std::string SlurmdLayout(size_t cpus) {
    const ShellRun run = Slurmd("-C");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    std::smatch m;
    if (!std::regex_search(run.output, m,
                           std::regex("CPUs=\\d+ Boards=\\d+ [^\\n]*?ThreadsPerCore=\\d+"))) {
      ADD_FAILURE() << "slurmd -C printed no layout:\n" << run.output;
      return "";
    }
    if (m.str().rfind("CPUs=" + std::to_string(cpus) + " ", 0) != 0) {
      hwloc_ignores_fsroot_ = true;
    }
    return m.str();
  }

  // Writes slurm.conf (with `extra` lines) and gres.conf, and returns the -f argument.
  std::string WriteConfig(const std::string& extra, const std::string& gres) const {
    const std::string dir = tree_.Path("etc");
    tree_.Write("etc/slurm.conf",
                "ClusterName=gpupooltest\nSlurmctldHost=localhost\n"
                "SlurmdSpoolDir=" +
                    dir + "\n" + extra + "PartitionName=all Nodes=" + kNode + "\n");
    tree_.Write("etc/gres.conf", gres);
    return "-f '" + dir + "/slurm.conf' -N " + kNode;
  }

  // Slurm's core of each kernel CPU, from the CPU map slurmd logs at debug4
  // ("CPU map[<abstract cpu>]=><kernel cpu>"; abstract cpu = core * threads + thread).
  std::map<int, int> SlurmdCoreOfCpu(const std::string& layout) {
    const std::string conf =
        WriteConfig(std::string("NodeName=") + kNode + " " + layout + "\nSlurmdDebug=debug5\n", "");
    const ShellRun run = Slurmd("-G -D -vvvvvv " + conf);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    std::smatch t;
    EXPECT_TRUE(std::regex_search(layout, t, std::regex("ThreadsPerCore=(\\d+)")));
    const int threads = t.empty() ? 1 : std::stoi(t[1]);
    std::map<int, int> core_of;
    const std::regex line("CPU map\\[(\\d+)\\]=>(\\d+) ");
    for (auto it = std::sregex_iterator(run.output.begin(), run.output.end(), line);
         it != std::sregex_iterator(); ++it) {
      core_of[std::stoi((*it)[2])] = std::stoi((*it)[1]) / threads;
    }
    return core_of;
  }

  std::string slurmd_;
  FakeSysfsTree tree_;
  bool real_machine_ = false;
  bool hwloc_ignores_fsroot_ = false;
};

// 2 sockets x 4 cores x 2 threads in Linux's usual numbering: CPU c and c + 8 are one
// core, socket 0 holds cores 0-3.
std::vector<FakeCpu> TwoSocketsWithSmt() {
  std::vector<FakeCpu> cpus;
  for (int thread = 0; thread < 2; ++thread) {
    for (int c = 0; c < 8; ++c) {
      FakeCpu cpu;
      cpu.package = c / 4;
      cpu.core = c % 4;
      cpu.l3 = 0;
      cpu.numa = c / 4;
      cpus.push_back(cpu);
    }
  }
  return cpus;
}

struct TopologyCase {
  std::string name;
  std::vector<FakeCpu> cpus;
};

std::vector<TopologyCase> Topologies() {
  std::vector<TopologyCase> cases = {{"two sockets with SMT", TwoSocketsWithSmt()}};
  auto one_package = [](int cores, auto place) {
    std::vector<FakeCpu> cpus;
    for (int c = 0; c < cores; ++c) {
      FakeCpu cpu;
      cpu.core = c;
      place(c, &cpu);
      cpus.push_back(cpu);
    }
    return cpus;
  };
  // Sockets taking turns: even CPUs on package 1, which therefore comes first.
  cases.push_back({"round-robin sockets", one_package(8, [](int c, FakeCpu* cpu) {
                     cpu->package = 1 - c % 2;
                     cpu->core = c / 2;
                   })});
  // Inside one package, interleaved L3 caches, NUMA nodes (sub-NUMA clustering), dies
  // and clusters each order the cores.
  cases.push_back(
      {"interleaved L3 caches", one_package(8, [](int c, FakeCpu* cpu) { cpu->l3 = c % 2; })});
  cases.push_back(
      {"interleaved NUMA nodes", one_package(8, [](int c, FakeCpu* cpu) { cpu->numa = c % 2; })});
  cases.push_back(
      {"interleaved dies", one_package(8, [](int c, FakeCpu* cpu) { cpu->die = c % 2; })});
  cases.push_back(
      {"interleaved clusters", one_package(8, [](int c, FakeCpu* cpu) { cpu->cluster = c % 4; })});
  // L3 caches holding two dies each, the dies ordered differently from the caches.
  cases.push_back({"dies inside L3 caches", one_package(8, [](int c, FakeCpu* cpu) {
                     static const int kL3[] = {0, 1, 1, 1, 1, 0, 0, 0};
                     static const int kDie[] = {0, 1, 1, 2, 2, 0, 3, 3};
                     cpu->l3 = kL3[c];
                     cpu->die = kDie[c];
                   })});
  return cases;
}

TEST_F(GresSlurmdTest, CoreNumberingAgreesWithSlurmd) {
  for (const TopologyCase& c : Topologies()) {
    SCOPED_TRACE(c.name);
    std::filesystem::remove_all(tree_.Path("sys"));
    tree_.AddCpus(c.cpus, "sys");
    Result<CpuTopology> topology = ReadCpuTopology(tree_.Path("sys"));
    ASSERT_TRUE(topology.ok()) << topology.status().ToString();
    Result<SlurmCoreNumbering> ours = SlurmCoreNumbering::Of(*topology);
    ASSERT_TRUE(ours.ok()) << ours.status().ToString();

    const std::string layout = SlurmdLayout(c.cpus.size());
    if (hwloc_ignores_fsroot_) {
      GTEST_SKIP() << "this slurmd's hwloc ignores HWLOC_FSROOT (slurmd -C says " << layout
                   << "), so it cannot be shown a fake topology";
    }
    EXPECT_EQ(ours->SlurmConfLayout(), layout);
    const std::map<int, int> theirs = SlurmdCoreOfCpu(layout);
    ASSERT_EQ(theirs.size(), c.cpus.size()) << "slurmd logged no full CPU map";
    for (const auto& [cpu, core] : theirs) {
      EXPECT_EQ(ours->CoreOf(cpu), core) << "CPU " << cpu;
    }
  }
}

// The machine the test runs on, read from the real /sys and by slurmd's own hwloc.
TEST_F(GresSlurmdTest, ThisMachinesCoreNumberingAgreesWithSlurmd) {
  real_machine_ = true;
  Result<CpuTopology> topology = ReadCpuTopology("/sys");
  if (!topology.ok()) GTEST_SKIP() << "this machine's /sys: " << topology.status().message();
  Result<SlurmCoreNumbering> ours = SlurmCoreNumbering::Of(*topology);
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  size_t cpus = 0;
  for (const auto& core : topology->cores) cpus += core.size();
  const std::string layout = SlurmdLayout(cpus);
  EXPECT_EQ(ours->SlurmConfLayout(), layout);
  const std::map<int, int> theirs = SlurmdCoreOfCpu(layout);
  EXPECT_EQ(theirs.size(), cpus) << "slurmd logged no full CPU map";
  for (const auto& [cpu, core] : theirs) EXPECT_EQ(ours->CoreOf(cpu), core) << "CPU " << cpu;
}

// Issue 15 A.3 end to end: slurmd takes our gres.conf and slurm.conf lines as they are,
// with no error but for the device nodes, which do not exist here.
TEST_F(GresSlurmdTest, SlurmdAcceptsTheGresConfAsWritten) {
  tree_.AddCpus(TwoSocketsWithSmt(), "sys");
  Result<CpuTopology> topology = ReadCpuTopology(tree_.Path("sys"));
  ASSERT_TRUE(topology.ok()) << topology.status().ToString();
  SlurmdLayout(16);
  if (hwloc_ignores_fsroot_) GTEST_SKIP() << "this slurmd's hwloc ignores HWLOC_FSROOT";

  NodeInfo node;
  node.hostname = "somewhere.example.org";
  auto gpu = [](int index, std::string name, std::string cpus) {
    GpuInfo g;
    g.vendor = Vendor::kNvidia;
    g.backend = "nvml";
    g.index = index;
    g.minor_number = index;
    g.name = std::move(name);
    g.pci_bus_id = "0000:0" + std::to_string(index) + ":00.0";
    g.cpu_affinity = std::move(cpus);
    return g;
  };
  node.gpus = {gpu(0, "NVIDIA H100 80GB HBM3", "0-3,8-11"),
               gpu(1, "NVIDIA H100 80GB HBM3", "4-7,12-15"),
               gpu(2, "NVIDIA A100-SXM4-40GB", "0-15")};
  node.gpus[2].mig_enabled = true;
  node.gpus[2].mig_devices = {
      {"MIG-1",
       "3g.20gb",
       1,
       0,
       0,
       {"/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"}},
      {"MIG-2",
       "1g.5gb",
       13,
       0,
       0,
       {"/dev/nvidia-caps/nvidia-cap120", "/dev/nvidia-caps/nvidia-cap121"}},
      {"MIG-3",
       "1g.5gb",
       14,
       0,
       0,
       {"/dev/nvidia-caps/nvidia-cap129", "/dev/nvidia-caps/nvidia-cap130"}}};
  node.links = {GpuLink{"0000:00:00.0", "0000:01:00.0", 18, 0, PcieLevel::kNode}};
  // slurmd waits for, then refuses, device files that do not exist: stand-ins under the
  // tree (regular files, which it only warns about, where mknod is not allowed).
  auto stand_in = [&](const std::string& dev_path) {
    const std::string path = tree_.Path(dev_path.substr(1));
    tree_.Write(dev_path.substr(1), "");
    std::filesystem::remove(path);
    if (::mknod(path.c_str(), S_IFCHR | 0600, makedev(195, 0)) != 0)
      tree_.Write(dev_path.substr(1), "");
    return path;
  };
  for (GpuInfo& g : node.gpus) {
    g.device_nodes = {stand_in("/dev/nvidia" + std::to_string(g.index))};
    for (MigDevice& m : g.mig_devices) {
      for (std::string& n : m.device_nodes) n = stand_in(n);
    }
  }
  GresOptions options;
  options.node_name = kNode;
  options.cpu_topology = *topology;
  Result<std::string> gres = ExportGres(node, options);
  ASSERT_TRUE(gres.ok()) << gres.status().ToString();

  // slurm.conf gets what the comment says it needs; gres.conf is the output itself.
  std::string slurm_conf;
  std::set<std::tuple<std::string, std::string, std::string>> written;  // type, files, cores
  const std::regex gres_line("Type=(\\S+) (?:Multiple)?Files?=(\\S+) Cores=(\\S+)");
  for (const std::string& line : Split(*gres, '\n')) {
    if (StartsWith(line, "#   ")) slurm_conf += line.substr(4) + "\n";
    std::smatch m;
    if (std::regex_search(line, m, gres_line)) written.insert({m[1], m[2], m[3]});
  }
  ASSERT_EQ(written.size(), 5u) << *gres;
  const ShellRun run = Slurmd("-G " + WriteConfig(slurm_conf, *gres));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  std::set<std::tuple<std::string, std::string, std::string>> read;
  const std::regex slurmd_line(
      "Gres Name=gpu Type=(\\S+) Count=1 Index=\\d+ ID=\\d+ File=(\\S+) Cores=(\\S+) CoreCnt=16");
  for (const std::string& line : Split(run.output, '\n')) {
    std::smatch m;
    if (std::regex_search(line, m, slurmd_line)) read.insert({m[1], m[2], m[3]});
    if (line.find("error") != std::string::npos || line.find("fatal") != std::string::npos) {
      EXPECT_NE(line.find("is not a valid character or block device"), std::string::npos)
          << "slurmd: " << line << "\ngres.conf:\n"
          << *gres;
    }
  }
  EXPECT_EQ(read, written) << "slurmd -G printed:\n" << run.output << "\ngres.conf:\n" << *gres;
  EXPECT_NE(gres->find("/nvidia0 Cores=0-3 Links=-1,18\n"), std::string::npos) << *gres;
}

}  // namespace
}  // namespace gpupool::gpu
