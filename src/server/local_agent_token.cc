#include "server/local_agent_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "controller/auth.h"

namespace gpupool::server {
namespace {

struct TokenFile {
  std::string token;    // "" when there is none: no file, a symbolic link, not ours
  bool leaked = false;  // others could read it: the token must not be used any more
};

TokenFile ReadTokenFile(const std::string& path) {
  TokenFile out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
      st.st_size < 4096) {
    out.leaked = (st.st_mode & 077) != 0;
    out.token.resize(static_cast<size_t>(st.st_size));
    const ssize_t n = ::read(fd, out.token.data(), out.token.size());
    out.token.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  ::close(fd);
  while (!out.token.empty() && (out.token.back() == '\n' || out.token.back() == ' ')) {
    out.token.pop_back();
  }
  return out;
}

Status WriteTokenFile(const std::string& path, const std::string& token) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".new";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Status::Unavailable("cannot write the local agent's token to '" + tmp +
                               "': " + std::strerror(errno) +
                               ": check that the state directory is writable");
  }
  const std::string data = token + "\n";
  const bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(ok ? errno : err);
    ::unlink(tmp.c_str());
    return Status::Unavailable("cannot write the local agent's token to '" + path + "': " + why +
                               ": check that the state directory is writable");
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> LocalAgentToken(store::Store& store, const std::string& path,
                                    const std::string& node, int64_t now_us) {
  const TokenFile old = ReadTokenFile(path);
  if (!old.token.empty()) {
    const std::string hash = controller::HashToken(old.token);
    GP_ASSIGN_OR_RETURN(std::optional<store::TokenRecord> rec, store.FindToken(hash));
    if (rec && !old.leaked && rec->kind == "node" && rec->user == node &&
        (rec->expires_us == 0 || now_us < rec->expires_us)) {
      return old.token;
    }
    // Expired, made for another host name, or readable by others: revoke it.
    if (rec) GP_RETURN_IF_ERROR(store.DeleteToken(hash));
  }
  GP_ASSIGN_OR_RETURN(auto fresh, controller::NewToken());
  GP_RETURN_IF_ERROR(WriteTokenFile(path, fresh.first));
  GP_RETURN_IF_ERROR(store.PutToken({fresh.second, node, "node", now_us}));
  return fresh.first;
}

}  // namespace gpupool::server
