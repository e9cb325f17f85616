#include "sched/admission/project_access.h"

#include <gtest/gtest.h>

namespace gpupool::sched {
namespace {

Limits VisionForAlice() {
  Limits l;
  l.projects["vision"].members = {"alice"};
  l.projects["vision"].max_gpus = 16;
  l.projects["batch"].max_running = 4;  // an entry without members
  return l;
}

std::string Admit(const Limits& l, ProjectEnforcement mode, const std::string& user,
                  std::string project) {
  Status s = AdmitProject(l, mode, user, &project);
  return s.ok() ? "ok " + project : s.message();
}

TEST(ProjectAccessTest, WithoutEnforcementAnyProjectIsTakenAsToday) {
  const Limits l = VisionForAlice();
  EXPECT_EQ(Admit(l, ProjectEnforcement::kNone, "bob", "vision"), "ok vision");
  EXPECT_EQ(Admit(l, ProjectEnforcement::kNone, "bob", "made-up"), "ok made-up");
  EXPECT_EQ(Admit(l, ProjectEnforcement::kNone, "bob", ""), "ok ");
}

// Security: bob dodged fair share by project, and the project's limits, with a project
// no one made; under "known" and "members" that is refused naming the field and the fix.
TEST(ProjectAccessTest, AMadeUpProjectIsRefusedUnderEnforcement) {
  const Limits l = VisionForAlice();
  for (ProjectEnforcement mode : {ProjectEnforcement::kKnown, ProjectEnforcement::kMembers}) {
    const std::string why = Admit(l, mode, "bob", "made-up");
    EXPECT_EQ(why.rfind("project (--project): there is no project 'made-up'", 0), 0u) << why;
    EXPECT_NE(why.find("gpupool limits set --project made-up --add-member bob"), std::string::npos)
        << why;
    EXPECT_NE(why.find("you are a member of no project"), std::string::npos) << why;
  }
}

// The red team: under "none" bob named "v\u0456sion" (a Cyrillic \u0456), which lists like
// alice's "vision" in the queue and usage. Refused under every mode when submitting, unless
// an admin made an entry of that name; one script alone is a name like any other.
TEST(ProjectAccessTest, ANameMixingLookAlikeScriptsIsRefusedUnlessAnAdminMadeIt) {
  Limits l = VisionForAlice();
  const std::string lookalike = "v\xd1\x96sion";
  for (ProjectEnforcement mode :
       {ProjectEnforcement::kNone, ProjectEnforcement::kKnown, ProjectEnforcement::kMembers}) {
    const std::string why = Admit(l, mode, "bob", lookalike);
    EXPECT_EQ(why.rfind("project: a project name mixes Latin, Greek or Cyrillic letters", 0), 0u)
        << why;
    EXPECT_EQ(why.find(lookalike), std::string::npos) << "the name is echoed";
  }
  EXPECT_EQ(Admit(l, ProjectEnforcement::kNone, "bob",
                  "\xd0\xb7\xd1\x80\xd0\xb5\xd0\xbd\xd0\xb8\xd0\xb5"),
            "ok \xd0\xb7\xd1\x80\xd0\xb5\xd0\xbd\xd0\xb8\xd0\xb5");
  // Queued before the rule: the project gate does not hold it.
  std::string queued = lookalike;
  EXPECT_TRUE(AdmitProject(l, ProjectEnforcement::kNone, "bob", &queued, false).ok());
  l.projects[lookalike].members = {"bob"};
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "bob", lookalike), "ok " + lookalike);
}

// The red team, a later pass: under "none" bob named "\u0441\u043e\u0441\u043e" (all
// Cyrillic), which passes the mixed-script rule and lists like "coco" in the queue, usage
// and the dashboard. Refused when it prints like an entry's name or a listed one (jobs'
// projects), whatever the mode, unless an admin made an entry of that very name.
TEST(ProjectAccessTest, ANameThatPrintsLikeAnothersIsRefusedUnlessAnAdminMadeIt) {
  Limits l = VisionForAlice();
  l.projects["coco"].max_gpus = 4;
  const std::string cyrillic = "\xd1\x81\xd0\xbe\xd1\x81\xd0\xbe";  // сосо
  for (ProjectEnforcement mode :
       {ProjectEnforcement::kNone, ProjectEnforcement::kKnown, ProjectEnforcement::kMembers}) {
    for (const std::string& name : {cyrillic, std::string("C0C0"), std::string("Vision")}) {
      const std::string why = Admit(l, mode, "bob", name);
      EXPECT_EQ(why.rfind("project: the project name prints like that of another project", 0), 0u)
          << why;
      EXPECT_NE(why.find("gpupool limits set --project"), std::string::npos) << why;
      EXPECT_EQ(why.find(name), std::string::npos) << "the name is echoed";
    }
  }
  EXPECT_EQ(Admit(l, ProjectEnforcement::kNone, "bob", "coco"), "ok coco");  // the entry itself
  // The names a controller lists (its jobs' projects): "apple" has no entry.
  ProjectNames listed = ProjectNames::Of(l);
  listed.Add("apple");
  std::string apple = "\xd0\xb0\xd1\x80\xd1\x80\xd3\x8f\xd0\xb5";  // аррӏе, all Cyrillic
  Status s = AdmitProject(l, ProjectEnforcement::kNone, "bob", &apple, true, &listed);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  std::string same = "apple";  // the listed name itself
  EXPECT_TRUE(AdmitProject(l, ProjectEnforcement::kNone, "bob", &same, true, &listed).ok());
  // One's own name is one's own group; queued before the rule, the gate does not hold it.
  EXPECT_EQ(Admit(l, ProjectEnforcement::kNone, "C0C0", "C0C0"), "ok C0C0");
  std::string queued = cyrillic;
  EXPECT_TRUE(AdmitProject(l, ProjectEnforcement::kNone, "bob", &queued, false).ok());
  l.projects[cyrillic].members = {"bob"};
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "bob", cyrillic), "ok " + cyrillic);
}

// Security: bob named alice's project to use its limits and share; under "members" only
// its members may (admins too: AdmitProject knows no admins).
TEST(ProjectAccessTest, AnotherTeamsProjectIsRefusedToNonMembers) {
  const Limits l = VisionForAlice();
  const std::string why = Admit(l, ProjectEnforcement::kMembers, "bob", "vision");
  EXPECT_EQ(why.rfind("project (--project): bob is not a member of project 'vision'", 0), 0u)
      << why;
  EXPECT_NE(why.find("`gpupool limits set --project vision --add-member bob`"), std::string::npos);
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "alice", "vision"), "ok vision");
  const std::string batch = Admit(l, ProjectEnforcement::kMembers, "alice", "batch");
  EXPECT_NE(batch.find("alice is not a member of project 'batch'"), std::string::npos) << batch;
  EXPECT_NE(batch.find("(your projects: vision)"), std::string::npos) << batch;
  // "known" checks only that the project exists.
  EXPECT_EQ(Admit(l, ProjectEnforcement::kKnown, "bob", "vision"), "ok vision");
}

TEST(ProjectAccessTest, OnesOwnNameAndTheDefaultProjectAreAlwaysTaken) {
  Limits l = VisionForAlice();
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "bob", ""), "ok ");
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "bob", "bob"), "ok bob");
  l.users["alice"].default_project = "vision";
  EXPECT_EQ(Admit(l, ProjectEnforcement::kNone, "alice", ""), "ok vision");
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "alice", ""), "ok vision");
  EXPECT_EQ(Admit(l, ProjectEnforcement::kNone, "alice", "alice"), "ok alice");
}

// The third red team: alice, whom the admin put in project vision (her default),
// named herself (--project alice) to run outside it: under fair share by project a
// group of her own with a fresh share, and none of vision's limits or QoS. Under
// enforcement a user with a default project charges their own name only where an admin
// made it a project they may charge as any other.
TEST(ProjectAccessTest, AUserWithADefaultProjectCannotEscapeItByNamingThemselves) {
  Limits l = VisionForAlice();
  l.users["alice"].default_project = "vision";
  for (ProjectEnforcement mode : {ProjectEnforcement::kKnown, ProjectEnforcement::kMembers}) {
    const std::string why = Admit(l, mode, "alice", "alice");
    EXPECT_EQ(why.rfind("project (--project): 'alice' is your own name, and your jobs charge "
                        "your default project 'vision'",
                        0),
              0u)
        << why;
    EXPECT_NE(why.find("leave --project out, or name one of yours (your projects: vision)"),
              std::string::npos)
        << why;
    EXPECT_EQ(Admit(l, mode, "alice", ""), "ok vision");
  }
  l.projects["alice"].max_gpus = 2;  // her own limits, no members: "known" lets her
  EXPECT_EQ(Admit(l, ProjectEnforcement::kKnown, "alice", "alice"), "ok alice");
  EXPECT_NE(Admit(l, ProjectEnforcement::kMembers, "alice", "alice").find("your own name"),
            std::string::npos);
  l.projects["alice"].members = {"alice"};  // an admin made it hers
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "alice", "alice"), "ok alice");
  // Without a default project her own name is hers, as before.
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "carol", "carol"), "ok carol");
}

// The red team: project 'bob' was made for a team (alice) before the account bob
// existed, so the limits' PUT could not refuse it; bob then charged the team's project
// with --project bob, or with no --project at all. Under "members" he no longer may.
TEST(ProjectAccessTest, ATeamProjectNamedLikeAUserIsNotTheirsUnlessListed) {
  Limits l = VisionForAlice();
  l.projects["bob"].members = {"alice"};
  for (const char* named : {"bob", ""}) {
    const std::string why = Admit(l, ProjectEnforcement::kMembers, "bob", named);
    EXPECT_EQ(why.rfind("project (--project): 'bob' is also a team project", 0), 0u) << why;
    EXPECT_NE(why.find("gpupool limits set --user bob --default-project P"), std::string::npos)
        << why;
  }
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "alice", "bob"), "ok bob");
  EXPECT_EQ(Admit(l, ProjectEnforcement::kKnown, "bob", ""), "ok ");  // known: any entry
  l.users["bob"].default_project = "vision";
  l.projects["vision"].members.insert("bob");
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "bob", ""), "ok vision");
  l.projects["bob"].members.insert("bob");
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "bob", "bob"), "ok bob");
  l.projects["bob"].members.clear();  // bob's own limits, no team: his without a default
  EXPECT_NE(Admit(l, ProjectEnforcement::kMembers, "bob", "bob").find("your own name"),
            std::string::npos);
  l.users["bob"].default_project.clear();
  EXPECT_EQ(Admit(l, ProjectEnforcement::kMembers, "bob", "bob"), "ok bob");
}

TEST(ProjectAccessTest, ModesParseByName) {
  for (ProjectEnforcement e :
       {ProjectEnforcement::kNone, ProjectEnforcement::kKnown, ProjectEnforcement::kMembers}) {
    Result<ProjectEnforcement> back =
        ParseProjectEnforcement(ProjectEnforcementName(e), "--enforce-projects");
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, e);
  }
  Result<ProjectEnforcement> bad = ParseProjectEnforcement("all", "--enforce-projects");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("--enforce-projects 'all': none, known", 0), 0u);
}

}  // namespace
}  // namespace gpupool::sched
