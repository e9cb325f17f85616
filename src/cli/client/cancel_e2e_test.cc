// End to end (client_e2e_test.h): what cancel says when it cancels nothing new, or is
// refused another user's jobs.

#include <gtest/gtest.h>

#include "cli/client/client_e2e_test.h"

namespace gpupool::cli {
namespace {

TEST_F(ClientE2eTest, CancelOfAnotherUsersJobsSaysCancelNotList) {
  Serve([](const HttpRequest&) {
    return JsonAnswer(403, R"({"error": "only admins may list other users' jobs"})");
  });
  RunResult r = Run({"cancel", "--user", "bob"});
  EXPECT_EQ(r.code, 4);
  EXPECT_EQ(r.err, "gpupool: cancel --user bob: only admins may cancel other users' jobs\n");
  EXPECT_EQ(Requests().size(), 1u);     // the list only: nothing cancelled
  r = Run({"queue", "--user", "bob"});  // queue does list: the server's words fit
  EXPECT_EQ(r.code, 4);
  EXPECT_EQ(r.err, "gpupool: only admins may list other users' jobs\n");
}

// A second cancel of an array while its running elements stop: said so, not counted again
// as running elements cancelled (as scancel, it is no error).
TEST_F(ClientE2eTest, ARepeatedArrayCancelCountsOnlyWhatItCancelled) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/jobs/14/cancel") {  // every running element is stopping already
      return JsonAnswer(200, R"({"job": {"state": "RUNNING"}, "array_cancelled": 7,
        "array": {"id": 14, "elements": 10, "queued": 0, "running": 0, "stopping": 7}})");
    }
    return JsonAnswer(200, R"({"job": {"state": "RUNNING"}, "array_cancelled": 6,
        "array": {"id": 15, "elements": 6, "queued": 3, "running": 1, "stopping": 2}})");
  });
  RunResult r = Run({"cancel", "14", "15"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "Array 14 is already cancelled: 7 running elements are being stopped (3 had "
            "already ended)\n"
            "Cancelled array 15: 3 queued and 1 running elements (the running ones are being "
            "stopped; 2 more were already being stopped)\n");
}

}  // namespace
}  // namespace gpupool::cli
