// End to end (client_e2e_test.h): `limits set`'s preemption defaults, `usage`'s period and
// `token create`'s expiry are checked before anything is sent, naming the flag and the
// values it takes.

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cli/client/client_e2e_test.h"

namespace gpupool::cli {
namespace {

// A job's 0 s is no value (the server's default), so an entry's 0 s did not mean "at
// once": the server took it, and then refused every job's own --grace as "longer than
// the 0 s grace" while giving a job without one the server's 120 s. Past the server's
// bounds the refusal was the server's "limits.users.a.min_runtime_s: 34560000 is outside
// the range -1..31536000", naming neither the flag nor a value it takes.
TEST_F(ClientE2eTest, LimitsSetRefusesPreemptionDurationsTheServerCannotHonour) {
  Serve([](const HttpRequest& r) {
    if (r.method == "GET")
      return JsonAnswer(200, R"({"default": {}, "users": {}, "projects": {}})");
    return JsonAnswer(200, r.body);
  });
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{{"--grace", "0"},
                                                        {"--min-runtime", "0s"},
                                                        {"--grace", "2d"},
                                                        {"--min-runtime", "400d"},
                                                        {"--grace", "60"}}) {
    RunResult bad = Run({"limits", "set", "--user", "a", flag, value});
    EXPECT_EQ(bad.code, 2) << flag << " " << value;
    EXPECT_NE(bad.err.find(flag + " " + value + ": a duration with its unit from 1s to "),
              std::string::npos)
        << bad.err;
  }
  EXPECT_TRUE(Requests().empty());  // none of those reached the server
  RunResult ok = Run({"limits", "set", "--user", "a", "--grace", "24h", "--min-runtime", "1s"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  ASSERT_EQ(Requests().size(), 2u);
  EXPECT_EQ(Json::parse(Requests()[1].body)["users"]["a"],
            Json::parse(R"({"min_runtime_s": 1, "preempt_grace_s": 86400})"));
}

// `usage --since 2030-01-01` and `token create --expires 20y` were refused in the API's
// words (since_us must be before until_us; expires_in_s ...): the flags are named, before
// any request.
TEST_F(ClientE2eTest, UsageAndTokenBoundsNameTheFlags) {
  Serve([](const HttpRequest&) { return JsonAnswer(200, "{}"); });
  RunResult r = Run({"usage", "--since", "2030-01-01"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --since 2030-01-01 (2030-01-01T00:00:00Z) is not before now (--until's "
            "default): give an earlier --since\n");
  r = Run({"usage", "--since", "1d", "--until", "2d"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --since 1d (2026-10-31T00:00:00Z) is not before --until 2d "
            "(2026-10-30T00:00:00Z): give an earlier --since\n");
  r = Run({"token", "create", "--user", "prom", "--expires", "3661d"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --expires 3661d: at most 3660d (10 years); leave --expires out for a token "
            "that never expires\n");
  EXPECT_TRUE(Requests().empty());
  EXPECT_EQ(Run({"usage", "--since", "2d", "--until", "1d"}).code, 0);
  EXPECT_EQ(Requests().size(), 1u);
}

}  // namespace
}  // namespace gpupool::cli
