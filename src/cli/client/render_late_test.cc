// gpupool show (RenderJob) of ends reported late (docs/health.md, "An end reported late").
#include <gtest/gtest.h>

#include "cli/client/render.h"

namespace gpupool::cli {
namespace render_late_test {
namespace {

constexpr int64_t kRenderNow = 1'793'491'200'000'000;  // 2026-11-01T00:00:00Z

Json Parse(const char* text) { return Json::parse(text); }

// red team 7, finding 1: a LOST gang whose tasks' ends came late: each task's own end with
// its own words (late_end_time_us is only the latest, task 1's here; late_exit_code task
// 0's); a lost attempt's words name each task, the end the last one's. Task 1's reason is
// worded as servers before 2026-11-30 wrote it.
TEST(RenderLateTest, ALostGangsLateEndsEachWithItsOwnTime) {
  const Json job = Parse(R"j({"id": 9, "state": "LOST", "attempt": 1,
    "late_end_time_us": 1793527210000000, "late_exit_code": 143,
    "late_reason": "task 0 (node n1) exited with code 143; task 1 (node n2) exited with code 9, reported after the loss (the job stays LOST)",
    "placement": [{"node": "n1", "gpu_indices": [0]}, {"node": "n2", "gpu_indices": [0]}],
    "tasks": [{"host": "n1", "ended": true, "exit_code": 143, "end_time_us": 1793527201000000,
               "reported_late": true,
               "reason": "reported after the loss: exited with code 143"},
              {"host": "n2", "ended": true, "exit_code": 9, "end_time_us": 1793527210000000,
               "reported_late": true,
               "reason": "reported after its node was lost: exited with code 9"}],
    "earlier_attempts": [{"attempt": 1, "ended_by": "lost", "start_time_us": 1793491200000000,
     "end_time_us": 1793491270000000, "gpu_hours": 1, "lost_time_us": 1793491230000000,
     "late_reason": "task 0 (node n1) exited with code 0; task 1 (node n2) exited with code 9, reported after the loss"}]})j");
  const std::string out = RenderJob(job, kRenderNow);
  EXPECT_NE(out.find("  Late end:   2026-11-01T10:00:01Z, task 0 (node n1) exited with code 143, "
                     "reported after the loss\n"
                     "  Late end:   2026-11-01T10:00:10Z, task 1 (node n2) exited with code 9, "
                     "reported after the loss\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("lost; then task 0 (node n1) exited with code 0; task 1 (node n2) exited "
                     "with code 9, reported after the loss (the last at "
                     "2026-11-01T00:01:10Z)\n"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace render_late_test
}  // namespace gpupool::cli
