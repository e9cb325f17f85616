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
  const std::string line = FormatNodeLease(lease);
  EXPECT_EQ(line, "00000000123456789 00000000100000000 " + line.substr(36, 10) + "\n");
  EXPECT_EQ(FormatNodeLease({1, 2}).size(), line.size());  // one width for every lease
  EXPECT_EQ(ParseNodeLease(line), lease);
  std::string bare = line;
  bare.pop_back();
  EXPECT_EQ(ParseNodeLease(bare), lease);  // the newline is optional
  // A read that mixes two writes (the old line's start, the new one's end) is refused.
  const std::string renewed = FormatNodeLease({123'456'999, 100'000'100});
  EXPECT_FALSE(ParseNodeLease(line.substr(0, 20) + renewed.substr(20)).has_value());
  for (const std::string& bad :
       {std::string(""), std::string("\n"), std::string("5"), std::string("5 4"),
        std::string("5 4 "), " " + bare, bare + " 3", bare + "\n\n", "-" + bare.substr(1),
        std::string("1234567890123456789 1 1"), line.substr(0, 17) + "\t" + line.substr(18),
        bare.substr(0, bare.size() - 1) + (bare.back() == '0' ? "1" : "0")}) {
    EXPECT_FALSE(ParseNodeLease(bad).has_value()) << "[" << bad << "]";
  }
}

// A full disk: no new file can be made, so the renewal overwrites the line in place.
TEST(NodeLeaseTest, WhereNoNewFileCanBeMadeTheLineIsOverwrittenInPlace) {
  char tmpl[] = "/tmp/node_lease_test.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/" + kNodeLeaseFile;
  ASSERT_TRUE(WriteNodeLease(path, {20, 10}).ok());
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  fs::create_directory(path + ".tmp");  // the temporary file cannot be created
  ASSERT_TRUE(WriteNodeLease(path, {40, 30}).ok());
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(*ReadNodeLease(path), (NodeLease{40, 30}));
  // Nor where there is no line to overwrite: then it says why.
  fs::remove(path);
  Status s = WriteNodeLease(path, {60, 50});
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(path + ".tmp"), std::string::npos) << s.message();
  fs::remove_all(tmpl);
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

// held: D = 100, written at 90, the job told 20 before D.
TEST(NodeLeaseTest, TheJobIsToldItsGraceBeforeTheLeaseRunsOutUnlessItWasRenewed) {
  const NodeLease held{100, 90};
  EXPECT_EQ(JudgeLease(held, 79, held, 20), LeaseVerdict::kHolds);
  // The warning's stage: the same lease, or none that runs out later.
  EXPECT_EQ(JudgeLease(held, 80, held, 20), LeaseVerdict::kWarn);
  EXPECT_EQ(JudgeLease(held, 99, NodeLease{95, 85}, 20), LeaseVerdict::kWarn);
  // Renewed in the meantime: any lease that runs out after held's.
  EXPECT_EQ(JudgeLease(held, 85, NodeLease{101, 84}, 20), LeaseVerdict::kRenewed);
  // No file: fail open here too.
  EXPECT_EQ(JudgeLease(held, 85, std::nullopt, 20), LeaseVerdict::kUnknown);
  // At D the fence's rules, whatever the grace (once told, the shim judges with 0).
  EXPECT_EQ(JudgeLease(held, 100, held, 20), LeaseVerdict::kFence);
  EXPECT_EQ(JudgeLease(held, 100, held, 0), LeaseVerdict::kFence);
  EXPECT_EQ(JudgeLease(held, 100, NodeLease{130, 95}, 20), LeaseVerdict::kRenewed);
  // A negative grace counts as none.
  EXPECT_EQ(JudgeLease(held, 99, held, -5), LeaseVerdict::kHolds);
}

}  // namespace
}  // namespace gpupool::agent
