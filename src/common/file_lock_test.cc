#include "common/file_lock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>

extern char** environ;

namespace gpupool {
namespace {

namespace fs = std::filesystem;

class FileLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("file_lock_test." + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "x.lock").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string path_;
};

// The lock is held through a read-only descriptor: one open for writing would keep the
// file system from being remounted read-only (found by the disk watch's test, whose
// remount failed with EBUSY once the agent held its lock).
TEST_F(FileLockTest, TheLockHoldsNoDescriptorOpenForWriting) {
  Result<FileLock> lock = FileLock::TryLock(path_);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  int seen = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec) != fs::path(path_)) continue;
    const int fd = std::stoi(e.path().filename().string());
    ++seen;
    EXPECT_EQ(::fcntl(fd, F_GETFL) & O_ACCMODE, O_RDONLY);
  }
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(LockFileHolder(path_), ::getpid());  // written all the same
}

TEST_F(FileLockTest, SecondLockIsRefusedNamingTheHolderUntilTheFirstGoes) {
  Result<FileLock> first = FileLock::TryLock(path_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->held());
  EXPECT_EQ(LockFileHolder(path_), ::getpid());
  Result<FileLock> second = FileLock::TryLock(path_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(), "pid " + std::to_string(::getpid()));
  *first = FileLock();  // released
  EXPECT_TRUE(FileLock::TryLock(path_).ok());
}

TEST_F(FileLockTest, AMovedLockStaysHeld) {
  Result<FileLock> first = FileLock::TryLock(path_);
  ASSERT_TRUE(first.ok());
  FileLock moved = std::move(*first);
  EXPECT_FALSE(first->held());
  EXPECT_FALSE(FileLock::TryLock(path_).ok());
}

// A FIFO in the lock file's place (planted, or left by a mistake) is refused at once: a
// blocking open would hang the daemon's start until someone opened its other end.
TEST_F(FileLockTest, AFifoInItsPlaceIsRefusedWithoutWaiting) {
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  auto tried = std::async(std::launch::async, [&] { return FileLock::TryLock(path_); });
  if (tried.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Unblock it (a writer for its read-only open) so that the test can end.
    const int w = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    tried.wait();
    if (w >= 0) ::close(w);
    FAIL() << "TryLock blocked on a FIFO";
  }
  Result<FileLock> lock = tried.get();
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lock.status().message().find("is not a regular file: remove it"), std::string::npos)
      << lock.status().message();
}

TEST_F(FileLockTest, AFileNamingNoPidGivesAnotherProcess) {
  Result<FileLock> first = FileLock::TryLock(path_);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(::truncate(path_.c_str(), 0), 0);
  Result<FileLock> second = FileLock::TryLock(path_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(), "another process");
  EXPECT_EQ(LockFileHolder(path_), 0);
}

TEST_F(FileLockTest, AnUnopenableFileIsUnavailable) {
  Result<FileLock> l = FileLock::TryLock((dir_ / "missing" / "x.lock").string());
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kUnavailable);
}

// A program the holder starts (a job's supervisor) does not inherit the lock: once the
// holder lets go, the lock is free although the program still runs.
TEST_F(FileLockTest, ProgramsStartedByTheHolderDoNotHoldIt) {
  Result<FileLock> first = FileLock::TryLock(path_);
  ASSERT_TRUE(first.ok());
  pid_t child = 0;
  const char* argv[] = {"sleep", "30", nullptr};  // killed below: no grandchild left behind
  ASSERT_EQ(::posix_spawnp(&child, "sleep", nullptr, nullptr, const_cast<char**>(argv), environ),
            0);
  *first = FileLock();
  Result<FileLock> again = FileLock::TryLock(path_);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

// The lock dies with its process (kill -9): the next start takes it.
TEST_F(FileLockTest, TheLockDiesWithItsProcess) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Result<FileLock> l = FileLock::TryLock(path_);
    const char c = l.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  Result<FileLock> refused = FileLock::TryLock(path_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "pid " + std::to_string(child));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(FileLock::TryLock(path_).ok());
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace gpupool
