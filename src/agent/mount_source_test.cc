#include "agent/mount_source.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/file_util.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

class MountSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-mount-source-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);  // nobody traverses it
    fs::create_directories(dir_ + "/real/sub");
    std::ofstream(dir_ + "/real/sub/file") << "mine\n";
    ::chmod((dir_ + "/real/sub/file").c_str(), 0644);
    fs::create_symlink(dir_ + "/real", dir_ + "/dirlink");
    fs::create_symlink(dir_ + "/real/sub/file", dir_ + "/real/filelink");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Runs as whoever runs the test, in this process.
  MountUser Me() const { return {"me", ::geteuid(), ::getegid(), {::getegid()}}; }
  // As root: the walk runs in a child that became nobody.
  MountUser Nobody() const { return {"nobody", kNobody, kNobody, {kNobody}}; }
  std::vector<MountUser> Users() const {
    std::vector<MountUser> out = {Me()};
    if (::geteuid() == 0) out.push_back(Nobody());
    return out;
  }

  std::string dir_;
};

bool SameObject(int fd, const std::string& path) {
  struct stat a;
  struct stat b;
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

TEST_F(MountSourceTest, OpensTheFileOrDirectoryItNames) {
  for (const MountUser& who : Users()) {
    for (const std::string& path :
         {dir_ + "/real/sub/file", dir_ + "/real/sub", dir_ + "//real/./sub/"}) {
      Result<int> fd = OpenMountSource(path, who, /*write=*/false);
      ASSERT_TRUE(fd.ok()) << who.user << " " << path << ": " << fd.status().ToString();
      EXPECT_TRUE(SameObject(*fd, path)) << path;
      EXPECT_EQ(::fcntl(*fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
      ::close(*fd);
    }
  }
}

// Links are followed with the user's ids: a path through them opens their target, and
// the check is on that target (a link to a file of root's is refused).
TEST_F(MountSourceTest, ASymlinkLeadsOnlyWhereTheUserMayGo) {
  const std::string secret = dir_ + "/real/secret";
  std::ofstream(secret) << "root only\n";
  ::chmod(secret.c_str(), 0600);
  fs::create_symlink(secret, dir_ + "/real/secretlink");
  for (const MountUser& who : Users()) {
    for (const std::string& path : {dir_ + "/real/filelink", dir_ + "/dirlink/sub/file"}) {
      Result<int> fd = OpenMountSource(path, who, false);
      ASSERT_TRUE(fd.ok()) << who.user << " " << path << ": " << fd.status().ToString();
      EXPECT_TRUE(SameObject(*fd, dir_ + "/real/sub/file")) << path;
      ::close(*fd);
    }
  }
  if (::geteuid() != 0) return;
  Result<int> fd = OpenMountSource(dir_ + "/real/secretlink", Nobody(), false);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("is not readable by user 'nobody' (uid 65534)"),
            std::string::npos)
      << fd.status().message();
}

TEST_F(MountSourceTest, MissingAndRelativePathsAreRefused) {
  Result<int> fd = OpenMountSource(dir_ + "/real/none", Me(), false);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("does not exist"), std::string::npos);
  fd = OpenMountSource(dir_ + "/real/sub/file/below", Me(), false);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("does not exist"), std::string::npos);
  fd = OpenMountSource("data", Me(), false);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("not an absolute path"), std::string::npos);
}

TEST_F(MountSourceTest, AccessIsTheUsersNotRoots) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (opens as another user)";
  const std::string secret = dir_ + "/real/secret";
  std::ofstream(secret) << "root only\n";
  ::chmod(secret.c_str(), 0600);
  Result<int> fd = OpenMountSource(secret, Nobody(), false);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("is not readable by user 'nobody' (uid 65534)"),
            std::string::npos)
      << fd.status().message();
  // Root itself may.
  fd = OpenMountSource(secret, Me(), false);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  ::close(*fd);
  // Readable is not writable.
  fd = OpenMountSource(dir_ + "/real/sub/file", Nobody(), /*write=*/true);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("is not readable and writable by user 'nobody'"),
            std::string::npos)
      << fd.status().message();
  // A directory nobody cannot enter hides what is below it.
  ::chmod((dir_ + "/real").c_str(), 0700);
  fd = OpenMountSource(dir_ + "/real/sub/file", Nobody(), false);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("not readable by user 'nobody'"), std::string::npos)
      << fd.status().message();
}

// What is mounted is the object that was opened, whatever the path names by then.
TEST_F(MountSourceTest, AStagedMountIsTheObjectOpenedNotThePathsLaterTarget) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (bind mounts)";
  const std::string file = dir_ + "/real/sub/file";
  const std::string other = dir_ + "/real/other";
  std::ofstream(other) << "someone else's\n";
  Result<int> fd = OpenMountSource(file, Nobody(), false);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  Result<int> dir_fd = OpenMountSource(dir_ + "/real/sub", Nobody(), false);
  ASSERT_TRUE(dir_fd.ok()) << dir_fd.status().ToString();
  // The user swaps the path for a link to another file after the check.
  ASSERT_EQ(::rename(file.c_str(), (dir_ + "/real/moved").c_str()), 0);
  ASSERT_EQ(::symlink(other.c_str(), file.c_str()), 0);

  const std::string stage = dir_ + "/stage";
  {
    StagedMounts staged(stage);
    Result<std::string> path = staged.Add(*fd);
    if (!path.ok() &&
        path.status().message().find("Operation not permitted") != std::string::npos) {
      GTEST_SKIP() << "no mount permission here: " << path.status().message();
    }
    ASSERT_TRUE(path.ok()) << path.status().ToString();
    EXPECT_EQ(*path, stage + "/0");
    EXPECT_TRUE(SameObject(*fd, *path));
    EXPECT_EQ(ReadFileToString(*path).value_or(""), "mine\n");
    Result<std::string> dpath = staged.Add(*dir_fd);
    ASSERT_TRUE(dpath.ok()) << dpath.status().ToString();
    EXPECT_EQ(*dpath, stage + "/1");
    EXPECT_TRUE(fs::is_directory(*dpath));
    EXPECT_TRUE(fs::exists(*dpath + "/file"));  // the link, as the user left it
    // The stage is root's alone.
    struct stat st;
    ASSERT_EQ(::stat(stage.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700u);
    ASSERT_TRUE(staged.Clear().ok());
    EXPECT_FALSE(fs::exists(stage));
    // Cleared, the files behind the mounts are untouched.
    EXPECT_EQ(ReadFileToString(dir_ + "/real/moved").value_or(""), "mine\n");
    // Left mounted by a shim that died: the next one clears it.
    ASSERT_TRUE(staged.Add(*fd).ok());
    ASSERT_TRUE(StagedMounts(stage).Clear().ok());
    EXPECT_FALSE(fs::exists(stage));
  }
  EXPECT_FALSE(fs::exists(stage));
  EXPECT_EQ(ReadFileToString("/proc/self/mounts").value_or("").find(stage), std::string::npos);
  ::close(*fd);
  ::close(*dir_fd);
}

}  // namespace
}  // namespace gpupool::agent
