// The fake backend through its real seams: CreateBackend/DiscoverNode, ReadJsonFile and
// NodeFromJson, on files written to a temporary directory.
#include "gpu/fake/fake_backend.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gpu/gpu_backend.h"

namespace gpupool::gpu {
namespace {

namespace fs = std::filesystem;

class FakeBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gpupool-fake-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }

  Result<NodeInfo> Discover(const std::string& file) {
    DiscoveryOptions options;
    options.backends = {"fake"};
    options.fake_node_file = file;
    return DiscoverNode(options);
  }

  fs::path dir_;
};

constexpr const char* kTwoGpus = R"({
  "schema": "gpupool.node/v1",
  "hostname": "fake-1",
  "gpus": [
    {"vendor": "nvidia", "index": 0, "name": "NVIDIA A100-SXM4-80GB", "pci_bus_id": "0000:07:00.0"},
    {"vendor": "nvidia", "index": 1, "pci_bus_id": "0000:0f:00.0", "backend": "nvml"}
  ]
})";

TEST_F(FakeBackendTest, ReadsANodeFileAndKeepsTheWrittenBackend) {
  Result<NodeInfo> node = Discover(Write("node.json", kTwoGpus));
  ASSERT_TRUE(node.ok()) << node.status().message();
  EXPECT_EQ(node->hostname, "fake-1");
  ASSERT_EQ(node->gpus.size(), 2u);
  EXPECT_EQ(node->gpus[0].backend, "fake");  // absent in the file
  EXPECT_EQ(node->gpus[1].backend, "nvml");  // a capture keeps what found it
  EXPECT_EQ(node->gpus[0].name, "NVIDIA A100-SXM4-80GB");
}

TEST_F(FakeBackendTest, TruncatedJsonNamesTheFileAndByte) {
  const std::string text = kTwoGpus;
  const std::string file = Write("cut.json", text.substr(0, text.size() / 2));
  Result<NodeInfo> node = Discover(file);
  ASSERT_FALSE(node.ok());
  const std::string& m = node.status().message();
  EXPECT_NE(m.find(file), std::string::npos) << m;
  EXPECT_NE(m.find("invalid JSON at byte"), std::string::npos) << m;
}

TEST_F(FakeBackendTest, NonUtf8NameIsRejectedWithItsOffset) {
  std::string text = kTwoGpus;
  const size_t at = text.find("A100");
  text[at] = static_cast<char>(0xff);
  Result<NodeInfo> node = Discover(Write("latin1.json", text));
  ASSERT_FALSE(node.ok());
  const std::string& m = node.status().message();
  EXPECT_NE(m.find("latin1.json"), std::string::npos) << m;
  EXPECT_NE(m.find("invalid JSON at byte"), std::string::npos) << m;
}

TEST_F(FakeBackendTest, SchemaErrorsNameTheFileAndField) {
  std::string text = kTwoGpus;
  text.replace(text.find("\"index\": 1"), 10, "\"index\": \"one\"");
  const std::string file = Write("typo.json", text);
  Result<NodeInfo> node = Discover(file);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().message(),
            "fake: " + file + ": gpus[1].index: expected an integer, found string");
}

TEST_F(FakeBackendTest, MissingFileSaysSo) {
  const std::string file = (dir_ / "absent.json").string();
  Result<NodeInfo> node = Discover(file);
  ASSERT_FALSE(node.ok());
  EXPECT_NE(node.status().message().find("cannot open '" + file + "'"), std::string::npos)
      << node.status().message();
}

TEST_F(FakeBackendTest, FakeWithoutAFileIsAUsageError) {
  DiscoveryOptions options;
  options.backends = {"fake"};
  Result<NodeInfo> node = DiscoverNode(options);
  ASSERT_FALSE(node.ok());
  EXPECT_NE(node.status().message().find("--fake FILE"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::gpu
