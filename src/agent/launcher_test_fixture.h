// The fixture of the launcher's tests (launcher_test.cc, launcher_adopt_test.cc): a
// process launcher on a scratch state directory, with helpers to start a task and wait
// for its end.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "agent/job_files.h"
#include "agent/launcher.h"
#include "agent/launcher_test_util.h"

namespace gpupool::agent::testing {

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    launcher_ = NewProcessLauncher(TestOptions(dir_.path()));
  }
  void TearDown() override {
    launcher_.reset();
    testing::KillLeftoverJobs(dir_.path());
  }
  std::string JobFile(int64_t id, const char* name) const {
    return JobDir(dir_.path(), TaskRun(id)) + "/" + name;
  }
  // Launches and expects the kStarted event.
  void Start(const LaunchSpec& spec) {
    Status st = launcher_->Launch(spec);
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::optional<JobEvent> e = testing::WaitForEvent(*launcher_, spec.id, 5000);
    ASSERT_TRUE(e.has_value());
    ASSERT_EQ(e->kind, JobEvent::Kind::kStarted) << e->reason;
    EXPECT_GT(e->start_time_us, 0);
  }
  JobEvent Finish(int64_t id, int timeout_ms = 10'000) {
    std::optional<JobEvent> e = testing::WaitForEvent(*launcher_, id, timeout_ms);
    EXPECT_TRUE(e.has_value()) << "no event for job " << id;
    return e.value_or(JobEvent{});
  }

  ScratchDir dir_;
  std::unique_ptr<Launcher> launcher_;
};

}  // namespace gpupool::agent::testing
