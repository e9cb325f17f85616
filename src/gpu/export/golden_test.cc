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

namespace gpupool::gpu {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = GPUPOOL_SOURCE_DIR;

const std::vector<std::string>& ExampleNodes() {
  static const auto* const kNodes = new std::vector<std::string>{
      "nvidia-1gpu",  "nvidia-8xh100", "nvidia-16xv100",   "nvidia-a100-mig",
      "amd-8xmi250x", "amd-1gpu",      "mixed-nvidia-amd",
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
  if (node == "mixed-nvidia-amd") {
    Variant nv{"cdi-nvidia.json", "cdi", {}};
    nv.options.cdi.vendor = Vendor::kNvidia;
    Variant amd{"cdi-amd.json", "cdi", {}};
    amd.options.cdi.vendor = Vendor::kAmd;
    v.push_back(nv);
    v.push_back(amd);
  } else {
    v.push_back({"cdi.json", "cdi", {}});
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

TEST(GpupoolBinaryTest, UsageErrorsExitWith2) {
  EXPECT_EQ(RunGpupool("gpus --format yaml").exit_code, 2);
  EXPECT_EQ(RunGpupool("gpus --backend fake").exit_code, 2);
  EXPECT_EQ(RunGpupool(Fake("nvidia-1gpu") + " --json --format gres").exit_code, 2);
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
