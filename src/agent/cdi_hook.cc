#include "agent/cdi_hook.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <set>
#include <span>

#include "common/json.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "envcheck/elf_file.h"

namespace gpupool::agent {
namespace {

constexpr const char* kDropIn = "00-gpupool-cdi.conf";

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

std::string Errno(int e) { return std::strerror(e); }

// Opens `path` (a path inside the container) relative to the container's root `root_fd`,
// resolving every component, symbolic links included, inside the root: an absolute link
// or ".." cannot leave it. -1 with errno set on failure.
int OpenInRoot(int root_fd, const std::string& path, uint64_t flags, uint64_t mode = 0) {
  std::string rel = path;
  while (!rel.empty() && rel.front() == '/') rel.erase(0, 1);
  if (rel.empty()) rel = ".";
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.mode = mode;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how));
}

// DT_SONAME of the ELF file open on `fd`; empty when it is not a shared object with one.
Result<std::string> SonameOf(int fd, const std::string& what) {
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return Status::Unavailable("cannot stat " + what + ": " + Errno(errno));
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(what + " is not a regular file");
  if (st.st_size < 64) return std::string();
  void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) return Status::Unavailable("cannot map " + what + ": " + Errno(errno));
  const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(map),
                                       static_cast<size_t>(st.st_size));
  std::string soname;
  if (envcheck::LooksLikeElf(bytes)) {
    Result<envcheck::ElfFile> elf = envcheck::ParseElf(bytes, what);
    if (elf.ok()) soname = elf->soname;
  }
  ::munmap(map, static_cast<size_t>(st.st_size));
  return soname;
}

bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos;
}

// Makes `link` in `dir_fd` a symbolic link to `target`, replacing a link or file of that
// name (atomically, by rename). A directory of that name is left alone (an error).
Status LinkInDir(int dir_fd, const std::string& dir, const std::string& link,
                 const std::string& target) {
  struct stat st;
  if (::fstatat(dir_fd, link.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode)) {
      char buf[PATH_MAX];
      const ssize_t n = ::readlinkat(dir_fd, link.c_str(), buf, sizeof buf);
      if (n >= 0 && std::string_view(buf, static_cast<size_t>(n)) == target) return Status::Ok();
    } else if (!S_ISREG(st.st_mode)) {
      return Status::FailedPrecondition(dir + "/" + link + " exists and is not a file or link");
    }
  }
  const std::string tmp = ".gpupool-cdi-" + link + ".tmp";
  ::unlinkat(dir_fd, tmp.c_str(), 0);
  if (::symlinkat(target.c_str(), dir_fd, tmp.c_str()) != 0 ||
      ::renameat(dir_fd, tmp.c_str(), dir_fd, link.c_str()) != 0) {
    const int e = errno;
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return Status::Unavailable("cannot link " + dir + "/" + link + " -> " + target + ": " +
                               Errno(e));
  }
  return Status::Ok();
}

// Writes `contents` to `name` in `dir_fd` by rename, world-readable: the container's
// processes run as the job's user.
Status WriteInDir(int dir_fd, const std::string& what, const std::string& name,
                  const std::string& contents) {
  const std::string tmp = "." + name + ".tmp";
  ::unlinkat(dir_fd, tmp.c_str(), 0);
  Fd fd(::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.ok()) return Status::Unavailable("cannot write " + what + ": " + Errno(errno));
  const bool written = ::write(fd.get(), contents.data(), contents.size()) ==
                           static_cast<ssize_t>(contents.size()) &&
                       ::fchmod(fd.get(), 0644) == 0;
  if (!written || ::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
    const int e = errno;
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return Status::Unavailable("cannot write " + what + ": " + Errno(e));
  }
  return Status::Ok();
}

// Whether the image's /etc/ld.so.conf reads /etc/ld.so.conf.d (creating the usual
// one-line file when the image has none).
Result<bool> TopLevelConfReadsDropIns(int etc_fd) {
  Fd fd(::openat(etc_fd, "ld.so.conf", O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.ok() && errno == ENOENT) {
    GP_RETURN_IF_ERROR(
        WriteInDir(etc_fd, "/etc/ld.so.conf", "ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n"));
    return true;
  }
  if (!fd.ok()) return false;  // a link or unreadable: pass the directories to ldconfig
  std::string text(size_t{64} * 1024, '\0');
  const ssize_t n = ::read(fd.get(), text.data(), text.size());
  if (n < 0) return false;
  text.resize(static_cast<size_t>(n));
  for (const std::string& line : Split(text, '\n')) {
    const std::string_view l = Trim(line);
    if (StartsWith(l, "include") && l.find("/etc/ld.so.conf.d/") != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

std::string FindLdconfig(const std::string& configured) {
  if (!configured.empty()) return configured;
  for (const char* p : {"/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

}  // namespace

Result<std::string> ContainerRootFromState(std::string_view state_json) {
  GP_ASSIGN_OR_RETURN(Json state,
                      ParseJson(state_json, "the container state on standard input", 1u << 20));
  if (!state.is_object() || !state.contains("bundle") || !state["bundle"].is_string()) {
    return Status::InvalidArgument(
        "the container state on standard input has no \"bundle\" (is this run by a container "
        "runtime as a createContainer hook?)");
  }
  const std::string bundle = state["bundle"].get<std::string>();
  if (bundle.empty() || bundle[0] != '/' || bundle.find('\0') != std::string::npos) {
    return Status::InvalidArgument("the container's bundle '" + bundle +
                                   "' is not an absolute path");
  }
  const std::string config_path = bundle + "/config.json";
  Result<Json> config = ReadJsonFile(config_path, 16u << 20);
  if (!config.ok()) {
    return Status(config.status().code() == StatusCode::kInvalidArgument
                      ? StatusCode::kInvalidArgument
                      : StatusCode::kNotFound,
                  "cannot read the container's OCI config: " + config.status().message());
  }
  const Json* path = nullptr;
  if (config->is_object() && config->contains("root") && (*config)["root"].is_object() &&
      (*config)["root"].contains("path") && (*config)["root"]["path"].is_string()) {
    path = &(*config)["root"]["path"];
  }
  if (path == nullptr || path->get<std::string>().empty()) {
    return Status::InvalidArgument(config_path + " has no root.path");
  }
  std::string root = path->get<std::string>();
  if (root.find('\0') != std::string::npos) {
    return Status::InvalidArgument(config_path + " has a root.path with a NUL byte");
  }
  if (root[0] != '/') root = bundle + "/" + root;
  char resolved[PATH_MAX];
  if (::realpath(root.c_str(), resolved) == nullptr) {
    return Status::NotFound("the container's root file system '" + root +
                            "' cannot be found: " + Errno(errno));
  }
  struct stat st;
  if (::stat(resolved, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("the container's root '" + std::string(resolved) +
                                   "' is not a directory");
  }
  if (std::string_view(resolved) == "/") {
    return Status::FailedPrecondition(
        "the container's root file system is the host's own '/': refusing to change the "
        "host's linker configuration");
  }
  return std::string(resolved);
}

Result<std::vector<std::string>> UpdateContainerLinker(const std::string& root,
                                                       const CdiHookOptions& options) {
  std::vector<std::string> notes;
  Fd root_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.ok()) {
    return Status::NotFound("cannot open the container's root '" + root + "': " + Errno(errno));
  }

  if (Fd probe(OpenInRoot(root_fd.get(), "/", O_RDONLY | O_DIRECTORY)); !probe.ok()) {
    const int e = errno;
    return Status::Unavailable("cannot resolve paths inside the container's root: " + Errno(e) +
                               (e == ENOSYS ? " (openat2 needs Linux 5.6 or later)" : ""));
  }

  // 1. SONAME links beside each library, in the directory the library is in.
  std::vector<std::string> dirs;
  std::set<std::string> seen_dirs;
  for (const std::string& lib : options.libraries) {
    if (lib.empty() || lib[0] != '/' || lib.find('\0') != std::string::npos) {
      return Status::InvalidArgument("the library '" + lib +
                                     "' is not an absolute path inside the container");
    }
    const size_t slash = lib.rfind('/');
    const std::string dir = slash == 0 ? "/" : lib.substr(0, slash);
    const std::string base = lib.substr(slash + 1);
    if (!IsPlainFileName(base)) {
      return Status::InvalidArgument("the library '" + lib + "' does not name a file");
    }
    Fd dir_fd(OpenInRoot(root_fd.get(), dir, O_RDONLY | O_DIRECTORY));
    if (!dir_fd.ok()) {
      const int e = errno;
      std::string note = "skipped " + lib;
      note += ": cannot open " + dir + " in the container: " + Errno(e);
      notes.push_back(std::move(note));
      continue;
    }
    Fd lib_fd(::openat(dir_fd.get(), base.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!lib_fd.ok()) {
      notes.push_back("skipped " + lib + ": " + Errno(errno));
      continue;
    }
    Result<std::string> soname = SonameOf(lib_fd.get(), lib);
    if (!soname.ok()) {
      notes.push_back("skipped " + lib + ": " + soname.status().message());
      continue;
    }
    if (seen_dirs.insert(dir).second) dirs.push_back(dir);
    if (soname->empty()) {
      notes.push_back(lib + " is not a shared library with a SONAME: no link made");
    } else if (!IsPlainFileName(*soname)) {
      notes.push_back(lib + " has the SONAME '" + *soname + "', which is not a file name");
    } else if (*soname != base) {
      if (Status s = LinkInDir(dir_fd.get(), dir, *soname, base); !s.ok()) {
        notes.push_back(s.message());
      }
    }
  }

  // 2. The linker cache. An image without /etc has no dynamic loader configuration to
  // update (a static image, like busybox's); ldconfig could not write its cache there.
  Fd etc_fd(OpenInRoot(root_fd.get(), "/etc", O_RDONLY | O_DIRECTORY));
  if (!etc_fd.ok()) {
    notes.push_back("the image has no /etc: its linker cache was not updated");
    return notes;
  }
  bool cmdline_dirs = true;
  if (!dirs.empty()) {
    if (::mkdirat(etc_fd.get(), "ld.so.conf.d", 0755) != 0 && errno != EEXIST) {
      notes.push_back("cannot create /etc/ld.so.conf.d: " + Errno(errno));
    }
    Fd conf_d(OpenInRoot(root_fd.get(), "/etc/ld.so.conf.d", O_RDONLY | O_DIRECTORY));
    Result<bool> reads = TopLevelConfReadsDropIns(etc_fd.get());
    if (conf_d.ok() && reads.ok()) {
      std::string text = "# Driver libraries mounted by gpupool's CDI spec (gpupool cdi-hook)\n";
      for (const std::string& d : dirs) text += d + "\n";
      Status s =
          WriteInDir(conf_d.get(), std::string("/etc/ld.so.conf.d/") + kDropIn, kDropIn, text);
      if (!s.ok()) notes.push_back(s.message());
      // With the drop-in read, ldconfig orders the directories as the image's own
      // configuration does (a CUDA forward-compatibility directory keeps its precedence).
      cmdline_dirs = !s.ok() || !*reads;
    } else if (!reads.ok()) {
      notes.push_back(reads.status().message());
    }
  }
  const std::string ldconfig = FindLdconfig(options.ldconfig);
  if (ldconfig.empty()) {
    return Status::Unavailable(
        "no ldconfig on the host (/sbin/ldconfig, /usr/sbin/ldconfig) to update the "
        "container's linker cache with");
  }
  // -r: ldconfig chroots into the container before it reads or writes anything.
  std::vector<std::string> argv = {ldconfig, "-r", root};
  if (cmdline_dirs) argv.insert(argv.end(), dirs.begin(), dirs.end());
  SpawnOptions spawn;
  spawn.search_path = false;
  Result<CommandResult> r = RunCommandCapture(argv, 60'000, spawn, {});
  if (!r.ok()) return Status::Unavailable("cannot run " + ldconfig + ": " + r.status().message());
  if (!r->Succeeded()) {
    return Status::Unavailable("updating the container's linker cache failed: " +
                               r->Failure(argv, 60'000));
  }
  return notes;
}

}  // namespace gpupool::agent
