#include "envcheck/tree_digest.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace gpupool::envcheck {

int64_t SteadyMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

struct Walk {
  std::string root;
  std::string who;
  WalkLimits limits;
  EVP_MD_CTX* ctx = nullptr;
  uint64_t entries = 0;

  std::string Path(const std::string& rel) const { return rel.empty() ? root : root + "/" + rel; }

  Status Unreadable(const std::string& rel, int err) const {
    if (err == EACCES || err == EPERM) {
      return Status::PermissionDenied("'" + Path(rel) + "' is not readable by " + who +
                                      ": make it readable, or register a directory without it");
    }
    return Status::Unavailable("cannot read '" + Path(rel) + "': " + std::strerror(err));
  }

  void Add(const std::string& rel, const struct stat& st, const std::string& link) {
    char meta[256];
    const int n = std::snprintf(
        meta, sizeof meta, "%o %u %u %lld %llu %lld.%09ld", static_cast<unsigned>(st.st_mode),
        static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_gid),
        static_cast<long long>(st.st_size),          // NOLINT(google-runtime-int)
        static_cast<unsigned long long>(st.st_ino),  // NOLINT(google-runtime-int)
        static_cast<long long>(st.st_ctim.tv_sec), st.st_ctim.tv_nsec);  // NOLINT
    EVP_DigestUpdate(ctx, rel.data(), rel.size());
    EVP_DigestUpdate(ctx, "\0", 1);
    EVP_DigestUpdate(ctx, meta, static_cast<size_t>(std::max(n, 0)));
    EVP_DigestUpdate(ctx, "\0", 1);
    EVP_DigestUpdate(ctx, link.data(), link.size());
    EVP_DigestUpdate(ctx, "\n", 1);
  }

  // Hashes the entries of the directory open as `dir_fd` (at `rel`), depth first, in
  // name order.
  Status Dir(int dir_fd, const std::string& rel, int depth) {
    if (depth > limits.max_depth) {
      return Status::ResourceExhausted("'" + Path(rel) + "' is nested more than " +
                                       std::to_string(limits.max_depth) +
                                       " directories deep: register a shallower directory");
    }
    const int dup_fd = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) return Unreadable(rel, errno);
    std::unique_ptr<DIR, int (*)(DIR*)> d(::fdopendir(dup_fd), &::closedir);
    if (d == nullptr) {
      const int err = errno;
      ::close(dup_fd);
      return Unreadable(rel, err);
    }
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(d.get())) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (entries + names.size() >= limits.max_entries) {
        return Status::ResourceExhausted(
            "'" + root + "' has more than " + std::to_string(limits.max_entries) +
            " files and directories, the limit for an environment: register a smaller "
            "directory (e.g. the environment itself, not its parent)");
      }
      names.push_back(name);
      errno = 0;
    }
    if (errno != 0) return Unreadable(rel, errno);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      if (++entries % 256 == 0 && limits.deadline_ms > 0 && SteadyMillis() > limits.deadline_ms) {
        return Status::ResourceExhausted("reading '" + root +
                                         "' took longer than the limit for an environment: "
                                         "register a smaller directory");
      }
      const std::string child = rel.empty() ? name : rel + "/" + name;
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // went away while we read: the ctime of `rel` says so
        return Unreadable(child, errno);
      }
      std::string link;
      if (S_ISLNK(st.st_mode)) {
        char buf[4096];
        const ssize_t len = ::readlinkat(dir_fd, name.c_str(), buf, sizeof buf);
        if (len < 0) return Unreadable(child, errno);
        link.assign(buf, static_cast<size_t>(len));
      }
      Add(child, st, link);
      if (S_ISDIR(st.st_mode)) {
        Fd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub.get() < 0) return Unreadable(child, errno);
        GP_RETURN_IF_ERROR(Dir(sub.get(), child, depth + 1));
      }
    }
    return Status::Ok();
  }
};

}  // namespace

Result<TreeDigest> DigestTree(const std::string& root, const WalkLimits& limits,
                              const std::string& who) {
  Walk w{root, who, limits};
  struct stat lst {};
  if (::lstat(root.c_str(), &lst) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return Status::NotFound("'" + root + "' does not exist: give an existing directory");
    }
    return w.Unreadable("", errno);
  }
  Fd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOTDIR) return Status::InvalidArgument("'" + root + "' is not a directory");
    return w.Unreadable("", errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return w.Unreadable("", errno);
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (ctx == nullptr || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return Status::Internal("cannot start a SHA-256 digest");
  }
  w.ctx = ctx.get();
  // The path itself (a symlink retargeted to another tree shows) and what it leads to.
  w.Add(".", lst, "");
  w.Add(".", st, "");
  GP_RETURN_IF_ERROR(w.Dir(fd.get(), "", 0));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md, &len) != 1) {
    return Status::Internal("cannot finish a SHA-256 digest");
  }
  static const char kHex[] = "0123456789abcdef";
  std::string hex = "sha256:";
  for (unsigned i = 0; i < len; ++i) {
    hex += kHex[md[i] >> 4];
    hex += kHex[md[i] & 0xf];
  }
  return TreeDigest{hex, w.entries};
}

}  // namespace gpupool::envcheck
