// Associations through the API (sched/admission/project_access.h): a project's members
// and a user's default project in PUT /v1/limits, and who may charge which project at
// POST /v1/jobs under the server's enforce-projects.
#include <gtest/gtest.h>
#include <pwd.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/json.h"
#include "controller/api.h"
#include "store/forwarding_store.h"
#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

class ApiProjectsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    const passwd* pw = getpwnam("nobody");
    ASSERT_NE(pw, nullptr) << "the test needs the account 'nobody'";
    user_uid_ = pw->pw_uid;
    Start(ProjectEnforcement::kMembers);
  }
  // (Re)starts the controller on the same store: a restart.
  void Start(ProjectEnforcement mode) {
    api_.reset();
    controller_.reset();
    ControllerOptions o;
    o.node_timeout_us = 3'600'000'000;
    o.enforce_projects = mode;
    controller_ = Controller::Create(store_.get(), &clock_, o).value();
    api_ = std::make_unique<Api>(controller_.get(), store_.get(), &clock_, AuthOptions{});
  }
  net::HttpResponse AsUid(uint32_t uid, const std::string& method, const std::string& path,
                          const std::string& body = "") {
    net::HttpRequest r;
    r.method = method;
    r.path = path;
    r.body = body;
    r.peer = net::PeerCredentials{1, uid, uid};
    return api_->Handle(r);
  }
  net::HttpResponse SetLimits(const std::string& body, const std::string& if_match = "") {
    net::HttpRequest r;
    r.method = "PUT";
    r.path = "/v1/limits";
    r.body = body;
    if (!if_match.empty()) r.headers["if-match"] = if_match;
    r.peer = net::PeerCredentials{1, 0, 0};
    return api_->Handle(r);
  }
  // nobody's submission with these extra fields; the answer.
  net::HttpResponse Submit(const std::string& fields, uint32_t uid = 0xffffffff) {
    return AsUid(uid == 0xffffffff ? user_uid_ : uid, "POST", "/v1/jobs",
                 R"({"command": ["true"], "workdir": "/")" + fields + "}");
  }
  static std::string Error(const net::HttpResponse& r) {
    Result<Json> j = ParseJson(r.body, "answer");
    return j.ok() ? j->value("error", std::string()) : r.body;
  }
  size_t Jobs() { return store_->ListJobs({})->size(); }

  ManualClock clock_{1'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Api> api_;
  uint32_t user_uid_ = 0;
};

// Security: `--project` was free text; nobody named root's project to use its limits and
// QoS. Under enforce-projects members it is 403 naming the field, the project and the
// fix, for every kind of submission (a batch job, an array, `run`, `alloc`), and nothing
// is stored.
TEST_F(ApiProjectsTest, ANonMemberCannotChargeAnotherTeamsProject) {
  ASSERT_EQ(SetLimits(R"({"projects": {"vision": {"max_gpus": 16, "members": ["root"]}}})").status,
            200);
  for (const std::string body :
       {R"({"command": ["true"], "workdir": "/", "project": "vision"})",
        R"({"command": ["true"], "workdir": "/", "project": "vision", "array": "0-3"})",
        R"({"command": ["true"], "workdir": "/", "project": "vision", "interactive": "run"})",
        R"({"command": [], "workdir": "/", "project": "vision", "interactive": "alloc"})"}) {
    net::HttpResponse r = AsUid(user_uid_, "POST", "/v1/jobs", body);
    EXPECT_EQ(r.status, 403) << body << ": " << r.body;
    EXPECT_EQ(Error(r).rfind("project (--project): nobody is not a member of project 'vision'", 0),
              0u)
        << r.body;
    EXPECT_NE(Error(r).find("`gpupool limits set --project vision --add-member nobody`"),
              std::string::npos);
  }
  EXPECT_EQ(Jobs(), 0u);
  EXPECT_EQ(Submit(R"(, "project": "vision")", 0).status, 201);  // root is a member
  // Once an admin adds them, they may.
  ASSERT_EQ(SetLimits(R"({"projects": {"vision": {"members": ["nobody", "root"]}}})").status, 200);
  net::HttpResponse r = Submit(R"(, "project": "vision")");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(Jobs(), 2u);
}

// Security: with fair share by project, a made-up project is a fresh share; under
// enforcement (known or members) it is refused, and without --project (or naming
// oneself) a job charges its user's own name as before.
TEST_F(ApiProjectsTest, AMadeUpProjectIsRefusedUnderEnforcement) {
  for (ProjectEnforcement mode : {ProjectEnforcement::kKnown, ProjectEnforcement::kMembers}) {
    Start(mode);
    net::HttpResponse r = Submit(R"(, "project": "made-up")");
    EXPECT_EQ(r.status, 403) << r.body;
    EXPECT_EQ(Error(r).rfind("project (--project): there is no project 'made-up'", 0), 0u)
        << r.body;
  }
  EXPECT_EQ(Jobs(), 0u);
  EXPECT_EQ(Submit("").status, 201);
  EXPECT_EQ(Submit(R"(, "project": "nobody")").status, 201);
  // Admins are not exempt.
  EXPECT_EQ(Submit(R"(, "project": "made-up")", 0).status, 403);
  // Without enforcement (the default), as before.
  Start(ProjectEnforcement::kNone);
  EXPECT_EQ(Submit(R"(, "project": "made-up")").status, 201);
}

// Members and default projects are set by admins, name accounts of the controller host
// (as a user's row does), are kept in the store and outlive a restart; a user's jobs
// without --project charge their default project.
TEST_F(ApiProjectsTest, MembershipIsSetByAdminsCheckedStoredAndKeptAcrossARestart) {
  const std::string body = R"({"projects": {"vision": {"members": ["nobody"]}},
                               "users": {"nobody": {"default_project": "vision"}}})";
  EXPECT_EQ(AsUid(user_uid_, "PUT", "/v1/limits", body).status, 403);
  net::HttpResponse r = SetLimits(R"({"projects": {"vision": {"members": ["nosuchuser-gp"]}}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Error(r).rfind("limits.projects.vision.members: there is no user 'nosuchuser-gp' on "
                           "the controller host",
                           0),
            0u)
      << r.body;
  r = SetLimits(R"({"users": {"nobody": {"default_project": "vision"}}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("limits.users.nobody.default_project"), std::string::npos) << r.body;
  ASSERT_EQ(SetLimits(body).status, 200);
  Start(ProjectEnforcement::kMembers);  // a restart
  r = AsUid(user_uid_, "GET", "/v1/limits");
  ASSERT_EQ(r.status, 200);
  const Json limits = ParseJson(r.body, "answer").value();
  EXPECT_EQ(limits["projects"]["vision"]["members"], Json::parse(R"(["nobody"])"));
  EXPECT_EQ(limits["users"]["nobody"]["default_project"], "vision");
  r = Submit("");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(ParseJson(r.body, "answer").value()["job"]["project"], "vision");
}

// Jobs queued before their user left the project keep it, but under enforcement they
// wait (the `project` gate) with the reason and the fix, as a new submission is refused.
TEST_F(ApiProjectsTest, AQueuedJobWaitsOnceItsUserLeavesTheProject) {
  ASSERT_EQ(SetLimits(R"({"projects": {"vision": {"members": ["nobody"]}}})").status, 200);
  net::HttpResponse r = Submit(R"(, "project": "vision")");
  ASSERT_EQ(r.status, 201) << r.body;
  const int64_t vision = ParseJson(r.body, "answer").value()["job"]["id"].get<int64_t>();
  r = Submit("");
  ASSERT_EQ(r.status, 201) << r.body;
  const int64_t own = ParseJson(r.body, "answer").value()["job"]["id"].get<int64_t>();
  ASSERT_EQ(SetLimits(R"({"projects": {"vision": {"members": ["root"]}}})").status, 200);
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  auto reason = [&](int64_t id) {
    net::HttpResponse got = AsUid(user_uid_, "GET", "/v1/jobs/" + std::to_string(id));
    return ParseJson(got.body, "answer").value()["job"].value("pending_reason", std::string());
  };
  EXPECT_EQ(reason(vision),
            "waits: nobody may not charge project 'vision' (enforce-projects members): an admin "
            "adds them (`gpupool limits set --project vision --add-member nobody`), or cancel it");
  EXPECT_EQ(reason(own).find("waits: nobody may not charge"), std::string::npos) << reason(own);
}

// A submission retried with its submit_key (its first answer was lost) after its user left
// the project is answered with the job the first made (which waits at the project gate),
// not refused: a 403 would tell the user no job exists while one does.
TEST_F(ApiProjectsTest, ARetriedSubmissionAfterLeavingTheProjectGetsTheJobItMade) {
  ASSERT_EQ(SetLimits(R"({"projects": {"vision": {"members": ["nobody"]}}})").status, 200);
  const std::string fields = R"(, "project": "vision", "submit_key": "k-1")";
  net::HttpResponse first = Submit(fields);
  ASSERT_EQ(first.status, 201) << first.body;
  ASSERT_EQ(SetLimits(R"({"projects": {"vision": {"members": ["root"]}}})").status, 200);
  net::HttpResponse again = Submit(fields);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(ParseJson(again.body, "answer").value()["job"]["id"],
            ParseJson(first.body, "answer").value()["job"]["id"]);
  EXPECT_EQ(Jobs(), 1u);
  // A new key is a new submission, and refused.
  EXPECT_EQ(Submit(R"(, "project": "vision", "submit_key": "k-2")").status, 403);
}

// The red team: an admin made project 'nobody' for a team of others; user nobody, no
// member, still charged it (`--project nobody`, or no --project at all: a job without one
// charges its user's name), its limits and QoS. A project named after an account must
// list that account; one without members (the user's own limits) stays allowed.
TEST_F(ApiProjectsTest, AProjectNamedAfterAUserMustListThem) {
  net::HttpResponse r = SetLimits(R"({"projects": {"nobody": {"members": ["root"]}}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Error(r).rfind("limits.projects.nobody.members: 'nobody' is also a login name", 0), 0u)
      << r.body;
  EXPECT_EQ(Submit(R"(, "project": "nobody")").status, 201);  // still nobody's own name
  EXPECT_EQ(SetLimits(R"({"projects": {"nobody": {"max_gpus": 1}}})").status, 200);
  EXPECT_EQ(SetLimits(R"({"projects": {"nobody": {"members": ["root", "nobody"]}}})").status, 200);
  r = SetLimits(R"({"projects": {"nobody": {"members": ["root"]}}})");  // nor by removal
  EXPECT_EQ(r.status, 400) << r.body;
}

// The red team: names in the limits were any 1..64 bytes: escape sequences for whoever
// runs `gpupool limits` or reads a refusal, and a project "none" that `gpupool limits set`
// cannot name (`--default-project none` clears the default). New names are refused with
// the field, not echoed; other text (a '/', UTF-8) is a name.
TEST_F(ApiProjectsTest, ProjectNamesInTheLimitsArePrintableAndNotNone) {
  // The third red team: names that print like another ("vision" + U+200B, "vision ") or
  // reversed (U+202E).
  for (const std::string name : {R"(red\u001b[31m)", R"(a\nb)", R"(x\u009b2J)", R"(vision\u200b)",
                                 R"(\u202enoisiv)", "vision ", " vision"}) {
    net::HttpResponse r = SetLimits(R"({"projects": {")" + name + R"(": {"max_gpus": 1}}})");
    EXPECT_EQ(r.status, 400) << name;
    EXPECT_EQ(Error(r).rfind("limits.projects: a project name of 1..64 characters without "
                             "control or invisible characters",
                             0),
              0u)
        << r.body;
  }
  net::HttpResponse r = SetLimits(R"({"projects": {"none": {"members": ["nobody"]}}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Error(r).rfind("limits.projects.none: `gpupool limits set` reads 'none'", 0), 0u)
      << r.body;
  r = SetLimits(R"x({"projects": {"(none)": {"max_gpus": 1}}})x");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Error(r).rfind("limits.projects.(none): '(none)' is how /metrics", 0), 0u) << r.body;
  // Look-alike letters of two scripts: "v\u0456sion" (Cyrillic) lists like "vision".
  r = SetLimits(R"({"projects": {"v\u0456sion": {"max_gpus": 1}}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Error(r).rfind("limits.projects: a project name mixes Latin, Greek or Cyrillic", 0), 0u)
      << r.body;
  r = SetLimits(R"({"projects": {"team/vision": {"members": ["nobody"]}, "caf\u00e9": {},
                                 "\u0437\u0440\u0435\u043d\u0438\u0435": {}}})");
  EXPECT_EQ(r.status, 200) << r.body;
  // A name in one script that prints like another entry's: all-Cyrillic "\u0441\u043e\u0441\u043e"
  // lists like "coco"; other capitals too. Against the entries there and those it adds.
  r = SetLimits(R"({"projects": {"coco": {"max_gpus": 4}}})");
  ASSERT_EQ(r.status, 200) << r.body;
  for (const std::string adds :
       {R"("\u0441\u043e\u0441\u043e": {"max_gpus": 1})", R"("C0C0": {"max_gpus": 1})",
        R"("apple": {"max_gpus": 1}, "\uff41pple": {"max_gpus": 1})"}) {
    r = SetLimits(R"({"projects": {"coco": {"max_gpus": 4}, )" + adds + "}}");
    EXPECT_EQ(r.status, 400) << adds;
    EXPECT_EQ(Error(r).rfind("limits.projects: a new project name prints like that of another "
                             "entry",
                             0),
              0u)
        << r.body;
    EXPECT_EQ(Error(r).find("\xd1\x81"), std::string::npos) << "the name is echoed: " << r.body;
  }
  EXPECT_EQ(controller_->GetLimits().limits.projects.size(), 1u);
}

// The red team, a later pass: under enforce-projects none, with no entries, nobody named
// "\u0441\u043e\u0441\u043e" (all Cyrillic, so not of two scripts), which listed like root's
// "coco" in the queue, usage and the dashboard. Refused once a job charges "coco" (also
// after a restart, which loads it), whatever the enforcement; the name is not echoed.
TEST_F(ApiProjectsTest, ANameThatPrintsLikeAJobsProjectIsRefusedWhateverTheEnforcement) {
  Start(ProjectEnforcement::kNone);
  const std::string cyrillic = R"(, "project": "\u0441\u043e\u0441\u043e")";
  ASSERT_EQ(Submit(R"(, "project": "coco")", 0).status, 201);
  for (int restart = 0; restart < 2; ++restart) {
    for (const std::string& look_alike : {cyrillic, std::string(R"(, "project": "COCO")")}) {
      net::HttpResponse r = Submit(look_alike);
      EXPECT_EQ(r.status, 400) << r.body;
      EXPECT_EQ(Error(r).rfind("project: the project name prints like that of another project", 0),
                0u)
          << r.body;
      EXPECT_EQ(Error(r).find("\xd1\x81"), std::string::npos) << "the name is echoed";
    }
    EXPECT_EQ(Jobs(), 1u);
    Start(ProjectEnforcement::kNone);
  }
  EXPECT_EQ(Submit(R"(, "project": "coco")").status, 201);  // the name itself
  // An entry an admin made is usable.
  ASSERT_EQ(SetLimits(R"({"projects": {"\u0441\u043e\u0441\u043e": {"max_gpus": 1}}})").status,
            200);
  EXPECT_EQ(Submit(cyrillic).status, 201);
}

// The red team: without enforcement (the default) a job's project was any text of up to
// the submission's megabyte, kept per job, in accounting and as a /metrics label.
TEST_F(ApiProjectsTest, AJobsProjectIsAShortPrintableNameWhateverTheEnforcement) {
  Start(ProjectEnforcement::kNone);
  for (const std::string& bad : {std::string(65, 'x'), std::string(R"(red\u001b[31m)")}) {
    net::HttpResponse r = Submit(R"(, "project": ")" + bad + R"(")");
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(Error(r).rfind("project: a project name of 1..64 bytes", 0), 0u) << r.body;
  }
  EXPECT_EQ(Jobs(), 0u);
  EXPECT_EQ(Submit(R"(, "project": "any-team")").status, 201);
}

// Lost updates: two admins' read-modify-writes of the limits (`limits set --project p
// --add-member a`, and one for user x) read one revision; the second PUT overwrote the
// first's change. The limits carry a revision (body and ETag) that every write bumps
// and that survives a restart; a PUT naming a revision that moved (If-Match or the
// body's "revision") is 409 and changes nothing, and one naming none overwrites.
TEST_F(ApiProjectsTest, AStaleLimitsWriteIsRefusedAndBothInterleavedChangesLand) {
  auto revision = [](const net::HttpResponse& r) {
    return ParseJson(r.body, "answer").value().value("revision", int64_t{-1});
  };
  net::HttpResponse first = AsUid(0, "GET", "/v1/limits");   // admin A reads
  net::HttpResponse second = AsUid(0, "GET", "/v1/limits");  // admin B reads
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(revision(first), 0);
  EXPECT_EQ(first.headers["ETag"], "\"0\"");
  net::HttpResponse r = SetLimits(R"({"projects": {"vision": {"members": ["root"]}}})", "\"0\"");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(revision(r), 1);
  EXPECT_EQ(r.headers["ETag"], "\"1\"");
  r = SetLimits(R"({"users": {"nobody": {"max_gpus": 2}}})", second.headers["ETag"]);
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(Error(r),
            "the limits changed since they were read: they are at revision 1, not 0 (If-Match, "
            "or the body's \"revision\"); read them again (GET /v1/limits), apply the change to "
            "what that answers and send its revision, or send none to overwrite them");
  // B reads again and applies its change to what it reads, naming the revision in the body.
  r = AsUid(0, "GET", "/v1/limits");
  EXPECT_EQ(revision(r), 1);
  Json both = ParseJson(r.body, "answer").value();
  both["users"]["nobody"]["max_gpus"] = 2;
  r = SetLimits(both.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(revision(r), 2);
  EXPECT_EQ(SetLimits(both.dump()).status, 409);  // read at 1: stale now
  Start(ProjectEnforcement::kMembers);            // a restart keeps them and their revision
  r = AsUid(user_uid_, "GET", "/v1/limits");
  const Json limits = ParseJson(r.body, "answer").value();
  EXPECT_EQ(limits["projects"]["vision"]["members"], Json::parse(R"(["root"])"));
  EXPECT_EQ(limits["users"]["nobody"]["max_gpus"], 2);
  EXPECT_EQ(revision(r), 2);
  EXPECT_EQ(r.headers["ETag"], "\"2\"");
  // No revision, or If-Match *: the PUT overwrites, as before revisions.
  r = SetLimits(R"({"users": {"nobody": {"max_gpus": 3}}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(revision(r), 3);
  r = SetLimits(R"({"users": {"nobody": {"max_gpus": 4}}})", "*");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(revision(r), 4);
  // Malformed or disagreeing revisions are 400 naming the header or field.
  r = SetLimits("{}", "W/\"4\"");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Error(r), "If-Match: W/\"4\": the ETag GET /v1/limits answered, e.g. \"7\" (or *)");
  r = SetLimits(R"({"revision": 3})", "\"4\"");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Error(r),
            "If-Match \"4\" and limits.revision 3 disagree: send the revision GET /v1/limits "
            "answered");
  r = SetLimits(R"({"revision": -1})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("limits.revision"), std::string::npos) << r.body;
  // A revision that went missing in the client is no overwrite (it was one: 200).
  r = SetLimits(R"({"revision": null})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Error(r),
            "limits.revision: null: send the revision GET /v1/limits answered, or leave the field "
            "out to overwrite the limits");
  EXPECT_EQ(revision(AsUid(0, "GET", "/v1/limits")), 4);  // none of those wrote
}

// The limits' revision moved in the store without the leader: a write of its own whose
// answer was lost with the connection, or the database edited or restored by hand. The
// leader held its old revision and answered it to every GET, so a PUT naming it was 409
// ("at revision 1, not 1") at every try, and `limits set` gave up, until a restart. The
// refused PUT now makes the leader hold the store's limits: the 409 names the stored
// revision, GET answers it, and a PUT at it lands.
TEST_F(ApiProjectsTest, LimitsMovedInTheStoreAreFollowedNotRefusedUntilARestart) {
  ASSERT_EQ(SetLimits(R"({"users": {"nobody": {"max_gpus": 1}}})", "\"0\"").status, 200);
  ASSERT_EQ(store_->PutSettingIf("limits", R"({"users": {"nobody": {"max_gpus": 5}}})", 1).value(),
            2);
  net::HttpResponse stale = AsUid(0, "GET", "/v1/limits");
  EXPECT_EQ(stale.headers["ETag"], "\"1\"");  // what it holds, until a write finds out
  net::HttpResponse r = SetLimits(R"({"users": {"nobody": {"max_gpus": 2}}})", "\"1\"");
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(Error(r).find("they are at revision 2, not 1"), std::string::npos) << r.body;
  r = AsUid(0, "GET", "/v1/limits");
  EXPECT_EQ(r.headers["ETag"], "\"2\"");
  EXPECT_EQ(ParseJson(r.body, "answer").value()["users"]["nobody"]["max_gpus"], 5);
  EXPECT_EQ(controller_->GetLimits().limits.ForUser("nobody").max_gpus, 5);  // enforced
  r = SetLimits(R"({"users": {"nobody": {"max_gpus": 2}}})", r.headers["ETag"]);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["ETag"], "\"3\"");
  EXPECT_EQ(store_->GetSettingRecord("limits")->revision, 3);
  // Stored limits that do not parse (a hand edit): the held ones stay enforced, at the
  // stored revision, and a write replaces them, with that revision or without one.
  ASSERT_EQ(store_->PutSettingIf("limits", "{", 3).value(), 4);
  r = SetLimits(R"({"users": {"nobody": {"max_gpus": 6}}})", "\"3\"");
  EXPECT_NE(Error(r).find("they are at revision 4, not 3"), std::string::npos) << r.body;
  r = AsUid(0, "GET", "/v1/limits");
  EXPECT_EQ(r.headers["ETag"], "\"4\"");
  EXPECT_EQ(ParseJson(r.body, "answer").value()["users"]["nobody"]["max_gpus"], 2);
  ASSERT_EQ(SetLimits(R"({"users": {"nobody": {"max_gpus": 6}}})").status, 200);
  EXPECT_EQ(store_->GetSettingRecord("limits").value(),
            (store::SettingRecord{
                R"({"default":{},"users":{"nobody":{"max_gpus":6}},"projects":{}})", 5}));
}

// A store whose settings writes are applied and then answered as if the connection broke
// (Unavailable: the outcome unknown to the writer), while `lose` is set.
class LosesSettingsAnswers final : public store::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<int64_t> PutSettingIf(std::string_view k, std::string_view v, int64_t expected) override {
    Result<int64_t> r = ForwardingStore::PutSettingIf(k, v, expected);
    if (lose && r.ok()) return Status::Unavailable("postgresql: server closed the connection");
    return r;
  }
  bool lose = false;
};

// A limits write that reached the store but whose answer was lost: the PUT fails (503),
// and the leader holds what the store has, not the limits from before it.
TEST_F(ApiProjectsTest, ALimitsWriteWhoseAnswerWasLostIsReadBack) {
  auto lossy = std::make_unique<LosesSettingsAnswers>(std::move(store_));
  LosesSettingsAnswers* lose = lossy.get();
  store_ = std::move(lossy);
  Start(ProjectEnforcement::kMembers);
  lose->lose = true;
  net::HttpResponse r = SetLimits(R"({"users": {"nobody": {"max_gpus": 7}}})", "\"0\"");
  EXPECT_EQ(r.status, 503);
  r = AsUid(0, "GET", "/v1/limits");
  EXPECT_EQ(r.headers["ETag"], "\"1\"");
  EXPECT_EQ(ParseJson(r.body, "answer").value()["users"]["nobody"]["max_gpus"], 7);
  EXPECT_EQ(controller_->GetLimits().limits.ForUser("nobody").max_gpus, 7);
}

// A store that lands another settings write (`first`, at the revision the next write
// expects) just before the next one: a second admin's write landing between a limits
// PUT's checks and its compare-and-set, or on another controller.
class AnotherWriteLandsFirst final : public store::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<int64_t> PutSettingIf(std::string_view k, std::string_view v, int64_t expected) override {
    if (std::optional<std::string> other = std::exchange(first, std::nullopt)) {
      Result<int64_t> landed = ForwardingStore::PutSettingIf(k, *other, expected);
      if (!landed.ok()) return landed.status();
    }
    return ForwardingStore::PutSettingIf(k, v, expected);
  }
  std::optional<std::string> first;
};

// The red team: PUT /v1/limits checked the names it adds against the limits it read
// before writing. Project 'nobody' (made before that account existed: members root only)
// may stay while unchanged; admin B deleted it while admin A's overwrite, which kept it
// unchanged, was on its way: A's write re-made it, named after user nobody and without
// them, which neither order of the two writes allows. So with a user row whose account is
// gone, and with a revision this controller had not seen. The names are checked against
// what the write replaces: 400, and B's write stands.
TEST_F(ApiProjectsTest, ALimitsWriteIsCheckedAgainstAWriteThatLandedBeforeIt) {
  auto racy = std::make_unique<AnotherWriteLandsFirst>(std::move(store_));
  AnotherWriteLandsFirst* race = racy.get();
  store_ = std::move(racy);
  const std::string project = R"("projects": {"nobody": {"members": ["root"]}})";
  const std::string user = R"("users": {"nosuchuser-gp": {"max_gpus": 1}})";
  int64_t at = 0;  // the revision of both, which the controller holds
  auto hold_both = [&] {
    const int64_t was = store_->GetSettingRecord("limits").value().revision;
    at = store_->PutSettingIf("limits", "{" + project + ", " + user + "}", was).value();
    Start(ProjectEnforcement::kMembers);
  };
  hold_both();
  ASSERT_EQ(at, 1);
  race->first = "{" + user + "}";  // B deletes the project
  net::HttpResponse r =
      SetLimits(R"({"projects": {"nobody": {"members": ["root"], "max_gpus": 1}}, )" + user + "}");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Error(r).rfind("limits.projects.nobody.members: 'nobody' is also a login name", 0), 0u)
      << r.body;
  EXPECT_EQ(store_->GetSettingRecord("limits")->revision, at + 1);  // B's write only
  EXPECT_EQ(controller_->GetLimits().limits.ForProject("nobody"), nullptr);
  hold_both();
  race->first = "{" + project + "}";  // B deletes the user row
  r = SetLimits("{" + project + R"(, "users": {"nosuchuser-gp": {"max_gpus": 2}}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Error(r).rfind("limits.users.nosuchuser-gp: there is no user 'nosuchuser-gp'", 0), 0u)
      << r.body;
  EXPECT_EQ(store_->GetSettingRecord("limits")->revision, at + 1);
  EXPECT_TRUE(controller_->GetLimits().limits.users.empty());
  // B's write on another controller, at the revision A names: the controller follows
  // the store before checking, rather than checking against the limits it held.
  hold_both();
  ASSERT_EQ(store_->PutSettingIf("limits", "{}", at).value_or(-1), at + 1);
  const std::string moved = "\"" + std::to_string(at + 1) + "\"";
  r = SetLimits(R"({"projects": {"nobody": {"members": ["root"], "max_gpus": 1}}})", moved);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(store_->GetSettingRecord("limits")->revision, at + 1);
  EXPECT_EQ(AsUid(0, "GET", "/v1/limits").headers["ETag"], moved);  // followed
  EXPECT_EQ(SetLimits(R"({"users": {"nobody": {"max_gpus": 1}}})", moved).status, 200);
}

}  // namespace
}  // namespace gpupool::controller
