#include "common/subprocess.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

namespace gpupool {
namespace {

TEST(SubprocessTest, CapturesBothStreamsAndTheExitStatus) {
  auto r = RunCommandCapture({"sh", "-c", "echo out; echo err >&2; exit 3"}, 10'000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  ASSERT_TRUE(WIFEXITED(r->wait_status));
  EXPECT_EQ(WEXITSTATUS(r->wait_status), 3);
  EXPECT_FALSE(r->Succeeded());
  EXPECT_EQ(r->Failure({"sh", "-c"}, 10'000), "sh -c failed: err");
}

TEST(SubprocessTest, SucceedsAndReadsNoInput) {
  auto r = RunCommandCapture({"cat"}, 10'000);  // stdin is /dev/null: ends at once
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->Succeeded());
  EXPECT_EQ(r->out, "");
}

TEST(SubprocessTest, KillsACommandPastItsTimeLimit) {
  auto r = RunCommandCapture({"sleep", "30"}, 200);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->Succeeded());
  EXPECT_TRUE(WIFSIGNALED(r->wait_status) && WTERMSIG(r->wait_status) == SIGKILL);
  EXPECT_EQ(r->Failure({"sleep", "30"}, 200),
            "sleep 30 did not finish within 200 ms and was killed");
}

TEST(SubprocessTest, MissingCommandOrEmptyArgvIsAnError) {
  auto missing = RunCommandCapture({"/no/such/tool"}, 1000);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/no/such/tool"), std::string::npos);
  EXPECT_EQ(RunCommandCapture({}, 1000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(SpawnCommand({}).ok());
}

}  // namespace
}  // namespace gpupool
