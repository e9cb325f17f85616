// Golden-output tests: every example node (examples/nodes/*.json), read through the real
// fake backend, in every format, compared byte for byte with tests/golden/. Some cases go
// through the real `gpupool` binary built in the same tree.
//
// To accept new output after an intended change: GPUPOOL_UPDATE_GOLDEN=1 ./golden_test
// then review `git diff tests/golden`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "gpu/export/exporters.h"
#include "gpu/gpu_backend.h"
#include "gpu/sysfs/fake_sysfs_tree.h"

namespace gpupool::gpu {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = GPUPOOL_SOURCE_DIR;

const std::vector<std::string>& ExampleNodes() {
  static const auto* const kNodes = new std::vector<std::string>{
      "nvidia-1gpu",  "nvidia-8xh100", "nvidia-16xv100",   "nvidia-a100-mig",
      "amd-8xmi250x", "amd-1gpu",      "mixed-nvidia-amd", "amd-mi300x-cpx",
  };
  return *kNodes;
}

struct Variant {
  std::string name;    // golden file suffix
  std::string format;  // exporter name
  ExportOptions options;
};

std::vector<Variant> VariantsFor(const std::string& node) {
  std::vector<Variant> v = {{"table.txt", "table", {}},
                            {"json", "json", {}},
                            {"classad", "classad", {}},
                            {"classad-legacy", "classad", {}},
                            {"gres.conf", "gres", {}}};
  v[3].options.classad_legacy = true;
  if (node == "nvidia-8xh100") {
    // As on the node itself, whose CPU topology is known: 2 sockets x 56 cores x 2
    // threads in Linux's numbering (CPU c and c + 112 are one core).
    Variant topo{"gres-on-node.conf", "gres", {}};
    CpuTopology t;
    for (int s = 0; s < 2; ++s) {
      std::vector<int> package;
      for (int c = s * 56; c < (s + 1) * 56; ++c) t.cores.push_back({c, c + 112});
      for (int c = s * 56; c < (s + 1) * 56; ++c) package.push_back(c);
      for (int c = s * 56; c < (s + 1) * 56; ++c) package.push_back(c + 112);
      t.packages.push_back(package);
    }
    topo.options.gres.cpu_topology = t;
    v.push_back(topo);
  }
  ExportOptions cdi;
  // The hook binary as an installed agent's would be (the CLI's default is its own path).
  cdi.cdi.hook_path = "/usr/local/bin/gpupool";
  if (node == "mixed-nvidia-amd") {
    Variant nv{"cdi-nvidia.json", "cdi", cdi};
    nv.options.cdi.vendor = Vendor::kNvidia;
    Variant amd{"cdi-amd.json", "cdi", cdi};
    amd.options.cdi.vendor = Vendor::kAmd;
    v.push_back(nv);
    v.push_back(amd);
  } else {
    v.push_back({"cdi.json", "cdi", cdi});
  }
  return v;
}

fs::path NodeFile(const std::string& node) { return kSource / "examples/nodes" / (node + ".json"); }
fs::path GoldenFile(const std::string& node, const std::string& variant) {
  return kSource / "tests/golden" / (node + "." + variant);
}

bool Updating() {
  const char* v = std::getenv("GPUPOOL_UPDATE_GOLDEN");
  return v != nullptr && std::string(v) == "1";
}

// Compares with the golden file, or rewrites it when GPUPOOL_UPDATE_GOLDEN=1.
void ExpectGolden(const fs::path& golden, const std::string& actual) {
  if (Updating()) {
    ASSERT_TRUE(WriteFileAtomically(golden.string(), actual).ok()) << golden;
    return;
  }
  Result<std::string> expected = ReadFileToString(golden.string());
  ASSERT_TRUE(expected.ok()) << expected.status().message()
                             << "\n(create it with GPUPOOL_UPDATE_GOLDEN=1)";
  if (*expected == actual) return;
  std::istringstream e(*expected);
  std::istringstream a(actual);
  std::string el;
  std::string al;
  int line = 1;
  while (true) {
    const bool more_e = static_cast<bool>(std::getline(e, el));
    const bool more_a = static_cast<bool>(std::getline(a, al));
    if (!more_e && !more_a) break;
    if (!more_e || !more_a || el != al) {
      ADD_FAILURE() << golden << " differs at line " << line
                    << "\n  expected: " << (more_e ? el : "<end of file>")
                    << "\n  actual:   " << (more_a ? al : "<end of output>")
                    << "\nIf the change is intended, rerun with GPUPOOL_UPDATE_GOLDEN=1 and "
                       "review `git diff tests/golden`";
      return;
    }
    ++line;
  }
  ADD_FAILURE() << golden << " differs (line endings or a final newline)";
}

Result<NodeInfo> LoadExample(const std::string& node) {
  DiscoveryOptions options;
  options.backends = {"fake"};
  options.fake_node_file = NodeFile(node).string();
  return DiscoverNode(options);
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, EveryFormatMatches) {
  const std::string node_name = GetParam();
  Result<NodeInfo> node = LoadExample(node_name);
  ASSERT_TRUE(node.ok()) << node.status().message();
  for (const Variant& v : VariantsFor(node_name)) {
    SCOPED_TRACE(v.name);
    Result<std::string> text = ExportNode(*node, v.format, v.options);
    ASSERT_TRUE(text.ok()) << text.status().message();
    ExpectGolden(GoldenFile(node_name, v.name), *text);
  }
}

TEST_P(GoldenTest, JsonRoundTripsThroughTheFakeBackend) {
  const std::string node_name = GetParam();
  Result<NodeInfo> node = LoadExample(node_name);
  ASSERT_TRUE(node.ok()) << node.status().message();
  const fs::path copy =
      fs::temp_directory_path() /
      ("gpupool-golden-" + std::to_string(::getpid()) + "-" + node_name + ".json");
  const std::string once = ExportJson(*node);
  ASSERT_TRUE(WriteFileAtomically(copy.string(), once).ok());
  DiscoveryOptions options;
  options.backends = {"fake"};
  options.fake_node_file = copy.string();
  Result<NodeInfo> again = DiscoverNode(options);
  fs::remove(copy);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(*again, *node);
  EXPECT_EQ(ExportJson(*again), once);
}

INSTANTIATE_TEST_SUITE_P(ExampleNodes, GoldenTest, ::testing::ValuesIn(ExampleNodes()),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(GoldenFilesTest, EveryExampleNodeHasGoldens) {
  for (const auto& entry : fs::directory_iterator(kSource / "examples/nodes")) {
    const std::string stem = entry.path().stem().string();
    EXPECT_NE(std::find(ExampleNodes().begin(), ExampleNodes().end(), stem), ExampleNodes().end())
        << entry.path() << " is not in the golden test's list: add it to ExampleNodes()";
  }
}

// ---- through the real binary ---------------------------------------------------------

struct CommandRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `gpupool <args>` with a shell; stdout and stderr are captured separately.
CommandRun RunGpupool(const std::string& args, const std::string& env = "") {
  const fs::path err_file =
      fs::temp_directory_path() / ("gpupool-golden-err-" + std::to_string(::getpid()));
  const std::string cmd =
      env + " '" + std::string(GPUPOOL_BINARY) + "' " + args + " 2>'" + err_file.string() + "'";
  CommandRun run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) run.out.append(buf, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.err = ReadFileToString(err_file.string()).value_or("");
  fs::remove(err_file);
  return run;
}

std::string Fake(const std::string& node) {
  return "gpus --fake '" + NodeFile(node).string() + "'";
}

TEST(GpupoolBinaryTest, OutputMatchesTheGoldens) {
  struct Case {
    std::string node, flags, golden;
  };
  const std::vector<Case> cases = {
      {"nvidia-8xh100", "", "table.txt"},
      {"nvidia-8xh100", "--format classad", "classad"},
      {"nvidia-a100-mig", "--classad-legacy", "classad-legacy"},
      {"amd-8xmi250x", "--format gres", "gres.conf"},
      {"nvidia-16xv100", "--json", "json"},
      {"mixed-nvidia-amd", "--format cdi --cdi-vendor amd", "cdi-amd.json"},
      {"nvidia-8xh100", "--format cdi --cdi-hook /usr/local/bin/gpupool", "cdi.json"},
  };
  if (Updating()) GTEST_SKIP() << "goldens are written by GoldenTest";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.node + " " + c.flags);
    const CommandRun run = RunGpupool(Fake(c.node) + " " + c.flags);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    ExpectGolden(GoldenFile(c.node, c.golden), run.out);
  }
}

TEST(GpupoolBinaryTest, JsonCaptureReplaysIdentically) {
  const fs::path capture =
      fs::temp_directory_path() / ("gpupool-capture-" + std::to_string(::getpid()) + ".json");
  for (const std::string& node : ExampleNodes()) {
    SCOPED_TRACE(node);
    const CommandRun first = RunGpupool(Fake(node) + " --json");
    ASSERT_EQ(first.exit_code, 0) << first.err;
    ASSERT_TRUE(WriteFileAtomically(capture.string(), first.out).ok());
    const CommandRun second = RunGpupool("gpus --fake '" + capture.string() + "' --json");
    ASSERT_EQ(second.exit_code, 0) << second.err;
    EXPECT_EQ(second.out, first.out);
  }
  fs::remove(capture);
}

TEST(GpupoolBinaryTest, BadInputFailsWithExitCode1AndAMessage) {
  const fs::path bad =
      fs::temp_directory_path() / ("gpupool-bad-" + std::to_string(::getpid()) + ".json");
  ASSERT_TRUE(
      WriteFileAtomically(bad.string(), R"({"schema": "gpupool.node/v1", "gpus": [{"vendor": )")
          .ok());
  const CommandRun run = RunGpupool("gpus --fake '" + bad.string() + "'");
  fs::remove(bad);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(run.out.empty()) << run.out;
  EXPECT_NE(run.err.find("invalid JSON at byte"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(bad.string()), std::string::npos) << run.err;
}

// Issue 15 A.3 through the CLI: on the node itself (here a fake sysfs tree), gres.conf
// numbers Cores= as Slurm does from the node's CPU topology, and --node-name names it.
TEST(GpupoolBinaryTest, GresOnTheNodeItselfUsesSlurmCoreIds) {
  testing::FakeSysfsTree tree;
  std::vector<testing::FakeSysfsTree::FakeCpu> cpus(16);
  for (int c = 0; c < 16; ++c) {
    cpus[static_cast<size_t>(c)].package = (c % 8) / 4;
    cpus[static_cast<size_t>(c)].core = c % 4;
  }
  tree.AddCpus(cpus);
  tree.AddPciDevice("0000:3b:00.0", "0x10de", "0x2330", "0x030200", "1", "4-7,12-15");
  const std::string env = "GPUPOOL_SYSFS_ROOT=" + tree.root() +
                          " GPUPOOL_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1"
                          " GPUPOOL_ROCM_SMI_LIBRARY=/nonexistent/librocm_smi64.so";
  CommandRun run = RunGpupool("gpus --backend sysfs --format gres --node-name gpu-07", env);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("#   NodeName=gpu-07 CPUs=16 Boards=1 SocketsPerBoard=2 "
                         "CoresPerSocket=4 ThreadsPerCore=2 Gres=gpu:"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("\nNodeName=gpu-07 Name=gpu Type="), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(" Cores=4-7\n"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("left out"), std::string::npos) << run.out;

  run = RunGpupool("gpus --backend sysfs --format gres --node-name 'a b'", env);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("'a b' is not a Slurm node name"), std::string::npos) << run.err;
}

TEST(GpupoolBinaryTest, UsageErrorsExitWith2) {
  EXPECT_EQ(RunGpupool("gpus --format yaml").exit_code, 2);
  EXPECT_EQ(RunGpupool("gpus --backend fake").exit_code, 2);
  EXPECT_EQ(RunGpupool(Fake("nvidia-1gpu") + " --json --format gres").exit_code, 2);
}

// Issue 15 A.1, "make the kind configurable for gpus --format cdi too", and the hook:
// by default the spec's hook is the binary that wrote it, by absolute path.
TEST(GpupoolBinaryTest, CdiKindAndHookAreConfigurable) {
  const CommandRun run = RunGpupool(Fake("nvidia-1gpu") + " --format cdi --cdi-kind x.example/gpu");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("\"kind\": \"x.example/gpu\""), std::string::npos) << run.out;
  const std::string binary = fs::canonical(GPUPOOL_BINARY).string();
  EXPECT_NE(run.out.find("\"path\": \"" + binary + "\""), std::string::npos) << run.out;
  const CommandRun relative = RunGpupool(Fake("nvidia-1gpu") + " --format cdi --cdi-hook gpupool");
  EXPECT_EQ(relative.exit_code, 1);
  EXPECT_NE(relative.err.find("must be an absolute path"), std::string::npos) << relative.err;
}

TEST(GpupoolBinaryTest, MixedNodeCdiAsksForAVendor) {
  const CommandRun run = RunGpupool(Fake("mixed-nvidia-amd") + " --format cdi");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("--cdi-vendor"), std::string::npos) << run.err;
  // Diagnostics of machine formats go to stderr, keeping stdout parseable.
  EXPECT_NE(run.err.find("[rocm-smi] rsmi_dev_power_ave_get failed"), std::string::npos) << run.err;
}

TEST(GpupoolBinaryTest, NoGpusSaysSoAndShowsTheFakeNodeHint) {
  const fs::path empty =
      fs::temp_directory_path() / ("gpupool-nogpu-" + std::to_string(::getpid()));
  fs::create_directories(empty);
  // Every real backend is pointed at something empty, so no machine's GPUs leak in.
  const std::string env = "GPUPOOL_NVML_LIBRARY=" + (empty / "libnvidia-ml.so.1").string() +
                          " GPUPOOL_ROCM_SMI_LIBRARY=" + (empty / "librocm_smi64.so").string() +
                          " GPUPOOL_SYSFS_ROOT=" + empty.string();
  const CommandRun run = RunGpupool("gpus", env);
  fs::remove_all(empty);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("No GPUs found on"), std::string::npos) << run.out;
  // Issue 15 A.5, "the no-GPU hint gives a path relative to the source tree": the example
  // named is an absolute path that exists, so the hint works from any directory.
  const std::string want = "gpupool gpus --fake " +
                           fs::weakly_canonical(kSource / "examples/nodes").string() +
                           "/nvidia-8xh100.json";
  EXPECT_NE(run.out.find(want), std::string::npos) << run.out;
}

}  // namespace
}  // namespace gpupool::gpu
