#include "agent/output_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kOutputNobody = 65534;

std::string SlurpOutput(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-output-file-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 01777);  // shared, sticky: like /tmp
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // As root the open runs with nobody's ids; otherwise as whoever runs the test.
  OutputUser Who() const {
    if (::geteuid() == 0) return {"nobody", kOutputNobody, kOutputNobody, {kOutputNobody}};
    return {"me", ::geteuid(), ::getegid(), {::getegid()}};
  }
  std::string dir_;
};

TEST_F(OutputFileTest, CreatesTheFileAsTheUserAndEmptiesTheirOwn) {
  const std::string path = dir_ + "/gpupool-7.out";
  Result<int> fd = OpenOutputFile(path, Who());
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  ASSERT_EQ(::write(*fd, "one\n", 4), 4);
  struct stat st {};
  ASSERT_EQ(::fstat(*fd, &st), 0);
  EXPECT_EQ(st.st_uid, Who().uid);
  ::close(*fd);
  Result<int> again = OpenOutputFile(path, Who());  // a rerun starts it afresh
  ASSERT_TRUE(again.ok()) << again.status().message();
  ASSERT_EQ(::write(*again, "two\n", 4), 4);
  ::close(*again);
  EXPECT_EQ(SlurpOutput(path), "two\n");
}

// A requeued job's later attempt appends: what the earlier attempt wrote (its checkpoint's
// last words) is kept.
TEST_F(OutputFileTest, ALaterAttemptAppendsToTheEarlierOnesOutput) {
  const std::string path = dir_ + "/gpupool-11.out";
  Result<int> first = OpenOutputFile(path, Who());
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_EQ(::write(*first, "attempt 1: checkpoint saved\n", 28), 28);
  ::close(*first);
  Result<int> second = OpenOutputFile(path, Who(), /*keep=*/true);
  ASSERT_TRUE(second.ok()) << second.status().message();
  ASSERT_EQ(::write(*second, "attempt 2\n", 10), 10);
  ::close(*second);
  EXPECT_EQ(SlurpOutput(path), "attempt 1: checkpoint saved\nattempt 2\n");
}

TEST_F(OutputFileTest, RefusesALinkAnotherUserPlanted) {
  const std::string victim = dir_ + "/victim";
  std::ofstream(victim) << "keep me\n";
  ::chmod(victim.c_str(), 0666);
  const std::string path = dir_ + "/gpupool-8.out";
  fs::create_symlink(victim, path);
  Result<int> fd = OpenOutputFile(path, Who());
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("symbolic link"), std::string::npos)
      << fd.status().message();
  EXPECT_EQ(SlurpOutput(victim), "keep me\n");
}

TEST_F(OutputFileTest, RefusesFifosOtherUsersFilesAndHardLinks) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  EXPECT_FALSE(OpenOutputFile(fifo, Who()).ok());  // and does not hang
  if (::geteuid() == 0) {
    // Root's file, writable by all, is not the job's to empty.
    const std::string roots = dir_ + "/roots";
    std::ofstream(roots) << "root's\n";
    ::chmod(roots.c_str(), 0666);
    Result<int> fd = OpenOutputFile(roots, Who());
    ASSERT_FALSE(fd.ok());
    EXPECT_NE(fd.status().message().find("belongs to uid 0"), std::string::npos);
    EXPECT_EQ(SlurpOutput(roots), "root's\n");
  }
  const std::string mine = dir_ + "/mine";
  Result<int> made = OpenOutputFile(mine, Who());
  ASSERT_TRUE(made.ok());
  ASSERT_EQ(::write(*made, "x\n", 2), 2);
  ::close(*made);
  ASSERT_EQ(::link(mine.c_str(), (dir_ + "/second").c_str()), 0);
  Result<int> linked = OpenOutputFile(dir_ + "/second", Who());
  ASSERT_FALSE(linked.ok());
  EXPECT_NE(linked.status().message().find("hard links"), std::string::npos);
  EXPECT_EQ(SlurpOutput(mine), "x\n");
}

// What another user planted is named, with its owner, however the kernel refused the
// open (ELOOP for a link under O_NOFOLLOW; EACCES where fs.protected_* is on).
TEST_F(OutputFileTest, ARefusalNamesWhatWasPlantedAndItsOwner) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to plant as another user";
  const std::string link = dir_ + "/gpupool-9.out";
  fs::create_symlink(dir_ + "/elsewhere", link);
  ASSERT_EQ(::lchown(link.c_str(), 4242, 4242), 0);
  const std::string fifo = dir_ + "/gpupool-10.out";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  ASSERT_EQ(::chown(fifo.c_str(), 4242, 4242), 0);
  Result<int> fd = OpenOutputFile(link, Who());
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find(
                ": it is a symbolic link, owned by uid 4242, which gpupool does not follow; "
                "remove it or choose another -o/-e"),
            std::string::npos)
      << fd.status().message();
  fd = OpenOutputFile(fifo, Who());
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find(": it is a FIFO or socket, owned by uid 4242; remove it"),
            std::string::npos)
      << fd.status().message();
}

TEST_F(OutputFileTest, ADirectoryTheUserCannotWriteIsRefusedNamingIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  const std::string closed = dir_ + "/closed";
  ASSERT_EQ(::mkdir(closed.c_str(), 0755), 0);  // root's
  Result<int> fd = OpenOutputFile(closed + "/o.out", Who());
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("Permission denied"), std::string::npos)
      << fd.status().message();
  EXPECT_NE(fd.status().message().find("user 'nobody'"), std::string::npos);
  // The shim's own ids are back: root can create there again.
  const int again = ::open((closed + "/root.out").c_str(), O_WRONLY | O_CREAT, 0600);
  EXPECT_GE(again, 0);
  if (again >= 0) ::close(again);
  EXPECT_TRUE(OpenOutputFile("/dev/null", Who()).ok());
}

}  // namespace
}  // namespace gpupool::agent
