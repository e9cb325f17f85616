#include "envcheck/tree_digest.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace gpupool::envcheck {
namespace {

namespace fs = std::filesystem;

class TreeDigestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gp-digest-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ + "/env/bin");
    Write("env/bin/python", "#!/bin/sh\n");
    ::chmod((root_ + "/env/bin/python").c_str(), 0755);
    fs::create_symlink("python", root_ + "/env/bin/python3");
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(root_ + "/" + rel) << text;
  }
  std::string Digest() {
    Result<TreeDigest> d = DigestTree(root_ + "/env", {}, "user test");
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? d->digest : "";
  }
  std::string root_;
};

TEST_F(TreeDigestTest, StableWhileNothingChanges) {
  const std::string a = Digest();
  EXPECT_EQ(a.rfind("sha256:", 0), 0u);
  EXPECT_EQ(a.size(), 7u + 64u);
  EXPECT_EQ(Digest(), a);
  EXPECT_EQ(DigestTree(root_ + "/env", {}, "user test")->entries, 3u);
}

TEST_F(TreeDigestTest, ChangesWithContentModeLinksAndNewFiles) {
  std::string last = Digest();
  auto changed = [&](const char* what) {
    const std::string now = Digest();
    EXPECT_NE(now, last) << what;
    last = now;
  };
  Write("env/bin/python", "#!/bin/sh\necho evil\n");
  changed("rewritten file");
  ::chmod((root_ + "/env/bin/python").c_str(), 0700);
  changed("chmod");
  fs::remove(root_ + "/env/bin/python3");
  fs::create_symlink("/bin/sh", root_ + "/env/bin/python3");
  changed("retargeted symlink");
  Write("env/bin/extra", "");
  changed("new file");
  // Same size, mtime set back: the kernel's change time still moves.
  Write("env/bin/python", "#!/bin/sh\necho EVIL\n");
  changed("same-size rewrite");
}

TEST_F(TreeDigestTest, RefusesTreesOverTheEntryLimitAndMissingRoots) {
  for (int i = 0; i < 20; ++i) Write("env/f" + std::to_string(i), "");
  WalkLimits small;
  small.max_entries = 10;
  Result<TreeDigest> d = DigestTree(root_ + "/env", small, "user test");
  ASSERT_EQ(d.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(d.status().message().find("more than 10 files"), std::string::npos)
      << d.status().message();
  EXPECT_EQ(DigestTree(root_ + "/nope", {}, "user test").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(DigestTree(root_ + "/env/bin/python", {}, "user test").status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(TreeDigestTest, UnreadableDirectoryIsAnErrorNamingTheReader) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every directory";
  fs::create_directories(root_ + "/env/private");
  ::chmod((root_ + "/env/private").c_str(), 0);
  Result<TreeDigest> d = DigestTree(root_ + "/env", {}, "user test");
  ::chmod((root_ + "/env/private").c_str(), 0700);
  ASSERT_EQ(d.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(d.status().message().find("is not readable by user test"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::envcheck
