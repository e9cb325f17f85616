#include "controller/auth.h"

#include <grp.h>
#include <gtest/gtest.h>

#include <string>

namespace gpupool::controller {
namespace {

// The name of a group that exists here; with `without_members`, one that lists none.
std::string SomeGroup(bool without_members) {
  std::string name;
  setgrent();
  for (struct group* g = getgrent(); g != nullptr; g = getgrent()) {
    if (!without_members || g->gr_mem == nullptr || *g->gr_mem == nullptr) {
      name = g->gr_name;
      break;
    }
  }
  endgrent();
  return name;
}

// A typo in --admin-group used to start the server silently; the admins then got 403
// (finding 8 of the fifth red-team round).
TEST(CheckAdminGroupTest, AGroupThatDoesNotExistIsAConfigurationMistake) {
  const Status s = CheckAdminGroup("gpupool-admni-no-such-group");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  EXPECT_NE(s.message().find("--admin-group: no group 'gpupool-admni-no-such-group'"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("sudo groupadd gpupool-admni-no-such-group"), std::string::npos)
      << s.message();
}

TEST(CheckAdminGroupTest, NoneOrAnExistingGroupIsFineMembersOrNot) {
  EXPECT_TRUE(CheckAdminGroup("").ok());
  const std::string any = SomeGroup(false);
  ASSERT_FALSE(any.empty());
  EXPECT_TRUE(CheckAdminGroup(any).ok()) << any;
  const std::string empty = SomeGroup(true);
  if (empty.empty()) GTEST_SKIP() << "no group without members here";
  EXPECT_TRUE(CheckAdminGroup(empty).ok()) << empty;
}

// A group entry larger than the first buffer (a directory service's group of thousands)
// is looked up again in a larger one, not taken for a missing group or a failure.
TEST(CheckAdminGroupTest, AnEntryLargerThanTheBufferIsStillFound) {
  const std::string any = SomeGroup(false);
  ASSERT_FALSE(any.empty());
  const Status s = CheckAdminGroup(any, /*buffer_bytes=*/1);
  EXPECT_TRUE(s.ok()) << s.message();
}

}  // namespace
}  // namespace gpupool::controller
