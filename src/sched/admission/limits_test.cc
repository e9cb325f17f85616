#include "sched/admission/limits.h"

#include <gtest/gtest.h>

namespace gpupool::sched {
namespace {

TEST(LimitsJsonTest, RoundTripsAndDropsEmptyEntries) {
  Limits l;
  l.user_default.max_queued = 500;
  l.users["alice"] = {8, 4, -1};
  l.projects["vision"] = {16, -1, -1};
  Result<Limits> back = LimitsFromJson(Json::parse(DumpJson(LimitsToJson(l))));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, l);
  back = LimitsFromJson(Json::parse(R"({"users": {"bob": {}}})"));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->users.empty());  // no limit is no entry
  EXPECT_EQ(back->ForUser("bob").max_gpus, -1);
}

// A user's own row overrides the default field by field: a user with their own GPU
// limit keeps the default's max_queued and max_running (issue 30).
TEST(LimitsTest, AUsersRowInheritsTheDefaultFieldByField) {
  Limits l;
  l.user_default = {/*max_gpus=*/2, /*max_running=*/3, /*max_queued=*/5};
  l.users["alice"] = {/*max_gpus=*/8, /*max_running=*/-1, /*max_queued=*/-1};
  l.users["bob"] = {/*max_gpus=*/-1, /*max_running=*/-1, /*max_queued=*/50};
  EXPECT_EQ(l.ForUser("alice"), (Limit{8, 3, 5}));
  EXPECT_EQ(l.ForUser("bob"), (Limit{2, 3, 50}));
  EXPECT_EQ(l.ForUser("carol"), (Limit{2, 3, 5}));
  l.user_default = {};
  EXPECT_EQ(l.ForUser("alice"), (Limit{8, -1, -1}));
}

// Issue 28: the admin's preemption defaults ride along with the limits.
TEST(LimitsJsonTest, PreemptionDefaultsRoundTripAndAreChecked) {
  Limits l;
  l.users["alice"].preemptible = true;
  l.users["alice"].min_runtime_s = 1800;
  l.projects["vision"].preemptible = false;
  l.user_default.preempt_grace_s = 60;
  Result<Limits> back = LimitsFromJson(Json::parse(DumpJson(LimitsToJson(l))));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, l);
  Result<Limits> bad = LimitsFromJson(Json::parse(R"({"users": {"a": {"preemptible": "yes"}}})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("limits.users.a.preemptible"), std::string::npos)
      << bad.status().message();
  bad = LimitsFromJson(Json::parse(R"({"default": {"preempt_grace_s": 100000}})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("preempt_grace_s"), std::string::npos);
}

TEST(LimitsJsonTest, BadInputNamesTheField) {
  auto err = [](const char* text) {
    Result<Limits> r = LimitsFromJson(Json::parse(text));
    return r.ok() ? std::string("OK") : r.status().message();
  };
  EXPECT_NE(err(R"({"users": {"alice": {"max_gpus": -2}}})").find("limits.users.alice.max_gpus"),
            std::string::npos);
  EXPECT_NE(err(R"({"users": {"alice": {"max_gpu": 2}}})").find("max_gpu"), std::string::npos);
  EXPECT_NE(err(R"({"users": []})").find("limits.users"), std::string::npos);
  EXPECT_NE(err(R"({"default": {"max_running": "4"}})").find("limits.default.max_running"),
            std::string::npos);
  EXPECT_NE(err(R"({"users": {"alice": 3}})").find("limits.users.alice"), std::string::npos);
  EXPECT_NE(err(R"({"quota": {}})").find("quota"), std::string::npos);
  EXPECT_NE(err("[]").find("limits"), std::string::npos);
  // What GET /v1/limits answers carries their revision: read past (`gpupool sim timed
  // --limits-file` takes what `gpupool limits --json` printed), but checked.
  EXPECT_EQ(err(R"({"users": {}, "revision": 7})"), "OK");
  EXPECT_NE(err(R"({"revision": -1})").find("limits.revision"), std::string::npos);
  EXPECT_NE(err(R"({"revision": "7"})").find("limits.revision"), std::string::npos);
}

// Associations: a project's members and a user's default project ride with the limits;
// members only on projects, a default project only on users and only one that lists them.
TEST(LimitsJsonTest, MembersAndDefaultProjectsRoundTripAndAreChecked) {
  Limits l;
  l.projects["vision"].members = {"bob", "alice"};
  l.users["alice"].default_project = "vision";
  const OrderedJson j = LimitsToJson(l);
  EXPECT_EQ(DumpJson(j["projects"]["vision"]), R"({"members":["alice","bob"]})");
  Result<Limits> back = LimitsFromJson(Json::parse(DumpJson(j)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, l);  // an entry with members only is kept
  auto err = [](const char* text) {
    Result<Limits> r = LimitsFromJson(Json::parse(text));
    return r.ok() ? std::string("OK") : r.status().message();
  };
  EXPECT_EQ(err(R"({"users": {"a": {"members": ["b"]}}})").rfind("limits.users.a.members: only", 0),
            0u);
  EXPECT_EQ(err(R"({"default": {"members": ["b"]}})").rfind("limits.default.members: only", 0), 0u);
  EXPECT_EQ(err(R"({"projects": {"p": {"default_project": "q"}}})")
                .rfind("limits.projects.p.default_project: only", 0),
            0u);
  EXPECT_EQ(err(R"({"projects": {"p": {"members": [""]}}})").rfind("limits.projects.p.members", 0),
            0u);
  EXPECT_EQ(err(R"({"projects": {"p": {"members": "a"}}})").rfind("limits.projects.p.members", 0),
            0u);
  const std::string why = err(R"({"projects": {"p": {"members": ["b"]}},
                                  "users": {"a": {"default_project": "p"}}})");
  EXPECT_EQ(why.rfind("limits.users.a.default_project: project 'p' does not list a", 0), 0u) << why;
  EXPECT_NE(why.find("gpupool limits set --project p --add-member a"), std::string::npos);
  EXPECT_EQ(err(R"({"users": {"a": {"default_project": "nowhere"}}})")
                .rfind("limits.users.a.default_project", 0),
            0u);
}

// Fair-share weights (Slurm's Fairshare=N) ride along with the limits: a user's and a
// project's entry may carry one (an entry with only a weight is kept), the default may not,
// and a value that is no positive number up to a million is refused naming the field.
TEST(LimitsJsonTest, FairShareWeightsRoundTripAndAreChecked) {
  Limits l;
  l.users["alice"].fair_share = 2;
  l.users["bob"].max_gpus = 4;
  l.projects["vision"].fair_share = 0.5;
  Result<Limits> back = LimitsFromJson(Json::parse(DumpJson(LimitsToJson(l))));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, l);
  EXPECT_EQ(back->users.at("alice").fair_share, 2);
  EXPECT_EQ(FairShareWeights(*back, false),
            (std::map<std::string, double, std::less<>>{{"alice", 2}}));
  EXPECT_EQ(FairShareWeights(*back, true),
            (std::map<std::string, double, std::less<>>{{"vision", 0.5}}));
  back = LimitsFromJson(Json::parse(R"({"projects": {"p": {"fair_share": 1000000}}})"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->projects.at("p").fair_share, 1'000'000);
  auto err = [](const char* text) {
    Result<Limits> r = LimitsFromJson(Json::parse(text));
    return r.ok() ? std::string("OK") : r.status().message();
  };
  EXPECT_EQ(err(R"({"projects": {"vision": {"fair_share": -2}}})"),
            "limits.projects.vision.fair_share: must be a number above 0 and at most 1000000, "
            "got -2");
  EXPECT_EQ(err(R"({"users": {"a": {"fair_share": 0}}})"),
            "limits.users.a.fair_share: must be a number above 0 and at most 1000000, got 0");
  EXPECT_EQ(err(R"({"users": {"a": {"fair_share": "2"}}})"),
            "limits.users.a.fair_share: must be a number above 0 and at most 1000000, got \"2\"");
  EXPECT_EQ(err(R"({"users": {"a": {"fair_share": 1e7}}})").rfind("limits.users.a.fair_share", 0),
            0u);
  EXPECT_EQ(err(R"({"default": {"fair_share": 2}})")
                .rfind("limits.default.fair_share: a weight belongs to a user's or a project's", 0),
            0u);
}

TEST(LimitReasonTest, NamesWhoAndWhichLimit) {
  Limit l{8, 2, -1};
  EXPECT_EQ(LimitReason("user alice", l, 4, 1, 4), "");
  EXPECT_EQ(LimitReason("user alice", l, 4, 2, 1),
            "user alice has 2 jobs running or next to start, the limit (max_running 2, `gpupool "
            "limits`)");
  EXPECT_EQ(LimitReason("project vision", l, 6, 1, 4),
            "project vision has 6 GPUs in use or next to start; this job's 4 more would pass the "
            "limit (max_gpus 8, `gpupool limits`)");
  EXPECT_EQ(LimitReason("user alice", l, 8, 0, 0), "");  // a CPU job needs no GPU
  // Red team 7, finding 9: a gang bigger than the limit itself waits for no job's end.
  EXPECT_EQ(LimitReason("user alice", l, 0, 0, 12),
            "this job alone asks for 12 GPUs, more than user alice's limit (max_gpus 8): it "
            "starts only if an admin raises the limit (`gpupool limits`)");
}

}  // namespace
}  // namespace gpupool::sched
