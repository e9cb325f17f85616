// End to end (client_e2e_test.h): `limits set` changes one entry (members, default
// projects, fair-share weights) and keeps the others, also when another admin writes in
// between; its preemption defaults, `usage`'s period and `token create`'s expiry are
// checked before anything is sent, naming the flag and the values it takes.

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

TEST_F(ClientE2eTest, LimitsSetChangesOneEntryAndKeepsTheOthers) {
  Serve([](const HttpRequest& r) {
    if (r.method == "GET") {
      return JsonAnswer(200, R"({"default": {"max_queued": 500},
        "users": {"bob": {"max_gpus": 4}}, "projects": {}})");
    }
    return JsonAnswer(200, r.body);  // PUT: the server answers what it stored
  });
  RunResult r =
      Run({"limits", "set", "--user", "alice", "--max-gpus", "8", "--max-running", "none"});
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(Requests().size(), 2u);
  EXPECT_EQ(Requests()[1].method, "PUT");
  EXPECT_EQ(Json::parse(Requests()[1].body),
            Json::parse(R"({"default": {"max_queued": 500}, "projects": {},
              "users": {"alice": {"max_gpus": 8}, "bob": {"max_gpus": 4}}})"));
  EXPECT_EQ(r.out,
            "FOR                   MAX_GPUS  MAX_RUNNING  MAX_QUEUED\n"
            "every user (default)         -            -         500\n"
            "user alice                   8      default     default\n"
            "user bob                     4      default     default\n");
  EXPECT_EQ(Run({"limits", "set", "--max-gpus", "1"}).code, 2);
  EXPECT_EQ(Run({"limits", "set", "--user", "a", "--project", "p", "--max-gpus", "1"}).code, 2);
  EXPECT_EQ(Run({"limits", "set", "--user", "a", "--max-gpus", "-3"}).code, 2);
  EXPECT_EQ(Run({"limits", "set", "--user", "a"}).code, 2);
  EXPECT_EQ(Requests().size(), 2u);  // none of those reached the server
}

// Lost updates: `limits set` read the limits, changed its entry and wrote them all back,
// so another admin's write in between was undone. It sends back the revision it read;
// the server refuses a stale one (409), and it reads again and reapplies its change.
// Here the server takes another admin's --add-member b between the first read and write.
TEST_F(ClientE2eTest, LimitsSetRereadsAndReappliesWhenAnotherWriteCameBetween) {
  std::mutex mu;
  Json stored =
      Json::parse(R"({"default": {}, "users": {}, "projects": {"p": {}}, "revision": 7})");
  bool other_admin_wrote = false;
  Serve([&](const HttpRequest& r) {
    std::lock_guard<std::mutex> lock(mu);
    if (r.method == "GET") return JsonAnswer(200, stored.dump());
    if (!other_admin_wrote) {  // the other admin's write lands after this command's read
      other_admin_wrote = true;
      stored["projects"]["p"]["members"] = Json::array({"b"});
      stored["revision"] = 8;
    }
    Json put = Json::parse(r.body);
    if (put["revision"] != stored["revision"]) {
      return JsonAnswer(409, R"({"error": "the limits changed since they were read"})");
    }
    stored = put;
    stored["revision"] = put["revision"].get<int64_t>() + 1;
    return JsonAnswer(200, stored.dump());
  });
  RunResult r = Run({"limits", "set", "--project", "p", "--add-member", "a"});
  EXPECT_EQ(r.code, 0) << r.err;
  std::vector<std::string> methods;
  for (const HttpRequest& q : Requests()) methods.push_back(q.method);
  EXPECT_EQ(methods, (std::vector<std::string>{"GET", "PUT", "GET", "PUT"}));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(stored["projects"]["p"]["members"], Json::parse(R"(["a", "b"])"));  // both landed
  EXPECT_EQ(stored["revision"], 9);
}

// Against admins who write on every try, `limits set` gives up after five, saying what
// happened and that nothing changed; a server without revisions is not retried.
TEST_F(ClientE2eTest, LimitsSetGivesUpAfterFiveConflictsAndRetriesNoServerWithoutRevisions) {
  std::atomic<bool> revisions{true};
  Serve([&](const HttpRequest& r) {
    if (r.method == "GET") {
      return JsonAnswer(200, revisions ? R"({"default": {}, "users": {}, "revision": 3})"
                                       : R"({"default": {}, "users": {}})");
    }
    return JsonAnswer(409, R"({"error": "the limits changed since they were read"})");
  });
  RunResult r = Run({"limits", "set", "--user", "root", "--max-gpus", "2"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "gpupool: limits set: the limits changed between this command's read and its write 5 "
            "times in a row (other admins are changing them now); nothing was changed: run it "
            "again (the server said: the limits changed since they were read)\n");
  EXPECT_EQ(Requests().size(), 10u);
  revisions = false;
  EXPECT_EQ(Run({"limits", "set", "--user", "root", "--max-gpus", "2"}).code, 1);
  EXPECT_EQ(Requests().size(), 12u);
}

// Associations: --members replaces a project's members, --add-member and
// --remove-member change them (in that order); --default-project is a user's.
TEST_F(ClientE2eTest, LimitsSetChangesAProjectsMembersAndAUsersDefaultProject) {
  Serve([](const HttpRequest& r) {
    if (r.method == "GET") {
      return JsonAnswer(200, R"({"default": {}, "users": {},
        "projects": {"vision": {"max_gpus": 16, "members": ["alice", "bob"]}}})");
    }
    return JsonAnswer(200, r.body);
  });
  auto put = [&](std::vector<std::string> args) {
    const size_t before = Requests().size();
    RunResult r = Run(std::move(args));
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(Requests().size(), before + 2);
    return Json::parse(Requests().back().body);
  };
  Json l = put({"limits", "set", "--project", "vision", "--add-member", "carol,dave",
                "--remove-member", "bob"});
  EXPECT_EQ(l["projects"]["vision"],
            Json::parse(R"({"max_gpus": 16, "members": ["alice", "carol", "dave"]})"));
  l = put({"limits", "set", "--project", "vision", "--members", "erin", "--add-member", "bob"});
  EXPECT_EQ(l["projects"]["vision"]["members"], Json::parse(R"(["bob", "erin"])"));
  l = put({"limits", "set", "--project", "vision", "--members", "none"});
  EXPECT_EQ(l["projects"]["vision"], Json::parse(R"({"max_gpus": 16})"));
  l = put({"limits", "set", "--project", "ml", "--members", "alice"});
  EXPECT_EQ(l["projects"]["ml"], Json::parse(R"({"members": ["alice"]})"));
  l = put({"limits", "set", "--user", "alice", "--default-project", "vision"});
  EXPECT_EQ(l["users"]["alice"], Json::parse(R"({"default_project": "vision"})"));
  const size_t sent = Requests().size();
  RunResult r = Run({"limits", "set", "--user", "alice", "--add-member", "bob"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("give --project NAME"), std::string::npos) << r.err;
  r = Run({"limits", "set", "--project", "vision", "--default-project", "vision"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--default-project: a user's"), std::string::npos) << r.err;
  EXPECT_EQ(Run({"limits", "set", "--project", "vision", "--members", "a,,b"}).code, 2);
  EXPECT_EQ(Requests().size(), sent);  // none of those reached the server
}

// Fair-share weights (Slurm's Fairshare=N): --fair-share sets a user's or a project's,
// none clears it; `limits` shows them in a FAIR_SHARE column (1 for entries without).
// The default has none, and a weight that is no positive number is refused before any
// request.
TEST_F(ClientE2eTest, LimitsSetFairShareSetsAndClearsAWeight) {
  Serve([](const HttpRequest& r) {
    if (r.method == "GET") {
      return JsonAnswer(200, R"({"default": {}, "users": {"bob": {"max_gpus": 4}},
        "projects": {"vision": {"fair_share": 3}}})");
    }
    return JsonAnswer(200, r.body);
  });
  RunResult r = Run({"limits", "set", "--user", "alice", "--fair-share", "2"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Json::parse(Requests().back().body)["users"]["alice"],
            Json::parse(R"({"fair_share": 2.0})"));
  EXPECT_EQ(r.out,
            "FOR                   MAX_GPUS  MAX_RUNNING  MAX_QUEUED  FAIR_SHARE\n"
            "every user (default)         -            -           -           1\n"
            "user alice             default      default     default           2\n"
            "user bob                     4      default     default           1\n"
            "project vision               -            -           -           3\n");
  r = Run({"limits", "set", "--project", "vision", "--fair-share", "none"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Json::parse(Requests().back().body)["projects"]["vision"], Json::object());
  EXPECT_EQ(r.out.find("FAIR_SHARE"), std::string::npos) << r.out;
  r = Run({"limits", "set", "--project", "vision", "--fair-share", "0.5"});
  EXPECT_EQ(Json::parse(Requests().back().body)["projects"]["vision"]["fair_share"], 0.5);
  const size_t sent = Requests().size();
  for (const char* bad : {"0", "-2", "abc", "2000000", "inf", "nan"}) {
    r = Run({"limits", "set", "--user", "alice", "--fair-share", bad});
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_EQ(r.err, std::string("gpupool: --fair-share ") + bad +
                         ": a number above 0 and at most 1000000 (a weight: 2 gets twice the "
                         "share of 1), or none\n");
  }
  r = Run({"limits", "set", "--default", "--fair-share", "2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--fair-share: a user's or a project's weight"), std::string::npos) << r.err;
  EXPECT_EQ(Requests().size(), sent);  // none of those reached the server
}

}  // namespace
}  // namespace gpupool::cli
