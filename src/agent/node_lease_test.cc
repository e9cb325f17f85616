#include "agent/node_lease.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

TEST(NodeLeaseTest, TheLineRoundTripsAndAnythingElseIsRefused) {
  const NodeLease lease{123'456'789, 100'000'000};
  EXPECT_EQ(FormatNodeLease(lease), "123456789 100000000\n");
  EXPECT_EQ(ParseNodeLease(FormatNodeLease(lease)), lease);
  EXPECT_EQ(ParseNodeLease("5 4"), (NodeLease{5, 4}));  // the newline is optional
  for (const char* bad : {"", "\n", "5", "5 ", " 5 4", "5  4", "-5 4", "5 -4", "5 4\n\n", "5 4 3",
                          "5x 4", "5 4x", "1234567890123456789 1", "5\t4"}) {
    EXPECT_FALSE(ParseNodeLease(bad).has_value()) << "[" << bad << "]";
  }
}

TEST(NodeLeaseTest, TheFileIsWrittenWholeReadableByAllAndReadBack) {
  char tmpl[] = "/tmp/node_lease_test.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/" + kNodeLeaseFile;
  EXPECT_EQ(ReadNodeLease(path).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(WriteNodeLease(path, {20, 10}).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_TRUE(WriteNodeLease(path, {40, 30}).ok());  // replaced
  Result<NodeLease> back = ReadNodeLease(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, (NodeLease{40, 30}));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  std::ofstream(path) << "garbled";
  Result<NodeLease> bad = ReadNodeLease(path);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(path), std::string::npos) << bad.status().message();
  fs::remove_all(tmpl);
}

TEST(NodeLeaseTest, TheBootClockMovesForward) {
  const int64_t a = BootMicros();
  const int64_t b = BootMicros();
  EXPECT_GT(a, 0);
  EXPECT_LE(a, b);
}

// held: D = 100, written at 90.
TEST(NodeLeaseTest, ALeaseHoldsUntilItsDeadlineAndOnlyATimelyRenewalExtendsIt) {
  const NodeLease held{100, 90};
  EXPECT_EQ(JudgeLease(held, 99, std::nullopt), LeaseVerdict::kHolds);
  EXPECT_EQ(JudgeLease(held, 99, NodeLease{50, 40}), LeaseVerdict::kHolds);
  // Renewed before D, running past now.
  EXPECT_EQ(JudgeLease(held, 100, NodeLease{130, 95}), LeaseVerdict::kRenewed);
  EXPECT_EQ(JudgeLease(held, 120, NodeLease{130, 100}), LeaseVerdict::kRenewed);
  // Not renewed: the same lease, or one that also ran out.
  EXPECT_EQ(JudgeLease(held, 100, held), LeaseVerdict::kFence);
  EXPECT_EQ(JudgeLease(held, 130, NodeLease{130, 95}), LeaseVerdict::kFence);
  // Renewed only after D: the agent came back after the fact.
  EXPECT_EQ(JudgeLease(held, 110, NodeLease{200, 101}), LeaseVerdict::kFence);
  // No file (removed: no lease any more), or unreadable: fail open.
  EXPECT_EQ(JudgeLease(held, 100, std::nullopt), LeaseVerdict::kUnknown);
}

}  // namespace
}  // namespace gpupool::agent
