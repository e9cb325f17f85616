#include "agent/runtime/health_check.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace gpupool::agent {
namespace {

class HealthCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-health-check-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Script(const std::string& body) {
    const std::string path = dir_ + "/check.sh";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0755);
    return path;
  }
  std::string dir_;
};

TEST_F(HealthCheckTest, APassingProgramPasses) {
  protocol::HealthReport r = RunHealthCheck(Script("echo all good; exit 0"), 10, 1234);
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(r.node_reason, "");
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_EQ(r.output, "all good\n");
  EXPECT_EQ(r.at_ms, 1234);
}

TEST_F(HealthCheckTest, NamedGpusAreBadAndOtherLinesAreJustOutput) {
  protocol::HealthReport r = RunHealthCheck(
      Script("echo 'checking...'; echo 'gpu=3 bad retired pages pending'; echo 'gpu=1 bad'; "
             "echo 'gpu=x bad nonsense'; echo 'gpu=2 fine'; exit 0"),
      10, 0);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.node_reason, "");
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].index, 3);
  EXPECT_EQ(r.gpus[0].reason, "retired pages pending");
  EXPECT_EQ(r.gpus[1].index, 1);
  EXPECT_EQ(r.gpus[1].reason, "");
}

TEST_F(HealthCheckTest, AFailingExitOrANodeLineMakesTheNodeBad) {
  protocol::HealthReport r = RunHealthCheck(Script("echo 'fan 3 stopped' >&2; exit 2"), 10, 0);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.node_reason, "the health check exited 2: fan 3 stopped");
  r = RunHealthCheck(Script("echo 'node bad PSU degraded'; exit 0"), 10, 0);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.node_reason, "PSU degraded");
}

TEST_F(HealthCheckTest, AHangingProgramIsKilledAtItsLimit) {
  const auto t0 = std::chrono::steady_clock::now();
  protocol::HealthReport r = RunHealthCheck(Script("exec sleep 30"), 1, 0);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(10));
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.node_reason, "the health check did not finish within 1 s");
}

TEST_F(HealthCheckTest, AMissingProgramMakesTheNodeBadSayingWhy) {
  protocol::HealthReport r = RunHealthCheck(dir_ + "/no-such-check", 10, 0);
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.node_reason.find("no-such-check"), std::string::npos) << r.node_reason;
}

// No user data reaches it: the agent's environment is not passed on.
TEST_F(HealthCheckTest, ItRunsWithOnlyPathAndLocale) {
  ::setenv("GPUPOOL_TOKEN", "secret-token", 1);
  protocol::HealthReport r = RunHealthCheck(Script("env | sort"), 10, 0);
  ::unsetenv("GPUPOOL_TOKEN");
  EXPECT_EQ(r.output.find("secret-token"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("LC_ALL=C"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gpupool::agent
