#include "controller/auth.h"

#include <grp.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <system_error>
#include <vector>

namespace gpupool::controller {
namespace {

std::string Hex(const unsigned char* data, size_t n) {
  static const char* const kHex = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out += kHex[data[i] >> 4];
    out += kHex[data[i] & 15];
  }
  return out;
}

// getgrnam_r into `buf`, grown while the entry does not fit (a directory service's group of
// thousands of members). NotFound: no such group; Unavailable: the lookup itself failed.
Result<const struct group*> FindGroup(const std::string& name, size_t buffer_bytes,
                                      std::vector<char>* buf, struct group* gr) {
  constexpr size_t kMaxBuffer = size_t{64} << 20;
  buf->resize(std::max<size_t>(buffer_bytes, 1));
  for (;;) {
    struct group* found = nullptr;
    const int rc = getgrnam_r(name.c_str(), gr, buf->data(), buf->size(), &found);
    if (rc == ERANGE && buf->size() < kMaxBuffer) {
      buf->resize(buf->size() * 2);
      continue;
    }
    // POSIX lets "not found" be reported as one of these too (getgrnam_r(3)).
    if (found == nullptr && (rc == 0 || rc == ENOENT || rc == ESRCH)) {
      return Status::NotFound("no group '" + name + "'");
    }
    if (found == nullptr) {
      return Status::Unavailable("looking up group '" + name +
                                 "': " + std::error_code(rc, std::generic_category()).message());
    }
    return found;
  }
}

bool InGroup(const std::string& user, gid_t primary, const std::string& group) {
  if (group.empty()) return false;
  std::vector<char> buf;
  struct group gr {};
  Result<const struct group*> found = FindGroup(group, 16384, &buf, &gr);
  if (!found.ok()) return false;
  if ((*found)->gr_gid == primary) return true;
  for (char** m = (*found)->gr_mem; m != nullptr && *m != nullptr; ++m) {
    if (user == *m) return true;
  }
  return false;
}

}  // namespace

std::string HashToken(const std::string& token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(token.data(), token.size(), digest, &len, EVP_sha256(), nullptr);
  return Hex(digest, len);
}

Result<std::pair<std::string, std::string>> NewToken() {
  unsigned char raw[32];
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (!urandom.read(reinterpret_cast<char*>(raw), sizeof raw)) {
    return Status::Unavailable("cannot read /dev/urandom to make a token");
  }
  std::string token = "gpt_" + Hex(raw, sizeof raw);
  std::string hash = HashToken(token);
  return std::make_pair(std::move(token), std::move(hash));
}

Caller CallerForUid(uint32_t uid, uint32_t gid, const AuthOptions& options) {
  Caller c;
  c.uid = uid;
  c.gid = gid;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    c.user = found->pw_name;
    c.gid = found->pw_gid;
  } else {
    c.user = "uid" + std::to_string(uid);
  }
  c.admin = uid == 0 || InGroup(c.user, c.gid, options.admin_group);
  return c;
}

Status CheckAdminGroup(const std::string& group, size_t buffer_bytes) {
  if (group.empty()) return Status::Ok();
  std::vector<char> buf;
  struct group gr {};
  Result<const struct group*> found = FindGroup(group, buffer_bytes, &buf, &gr);
  if (found.ok()) return Status::Ok();
  if (found.status().code() != StatusCode::kNotFound) return found.status();
  return Status::InvalidArgument("--admin-group: no group '" + group +
                                 "' on this machine, so nobody but root would be an admin: "
                                 "create it (sudo groupadd " +
                                 group + ") or fix the name (getent group lists the groups)");
}

std::string_view CallerKindName(CallerKind kind) {
  switch (kind) {
    case CallerKind::kUser:
      return "user";
    case CallerKind::kAdmin:
      return "admin";
    case CallerKind::kNode:
      return "node";
    case CallerKind::kMetrics:
      return "metrics";
  }
  return "unknown";
}

Result<Identity> Authenticate(const net::HttpRequest& request, store::Store& store,
                              const AuthOptions& options, int64_t now_us) {
  Identity id;
  // A token, when given, names the caller on either transport (the local agent of
  // `gpupool up` uses a node token on the Unix socket); otherwise the socket's peer does.
  if (request.peer && request.Header("authorization").empty()) {
    id.caller = CallerForUid(request.peer->uid, request.peer->gid, options);
    id.kind = id.caller.admin ? CallerKind::kAdmin : CallerKind::kUser;
    id.any_local_agent = request.peer->uid == 0;
    return id;
  }
  const std::string header = request.Header("authorization");
  const std::string prefix = "Bearer ";
  if (header.compare(0, prefix.size(), prefix) != 0 || header.size() == prefix.size()) {
    return Status::PermissionDenied(
        "this API needs a token over TCP: ask an admin for one (`gpupool token create --user "
        "NAME`) and pass it with --token or GPUPOOL_TOKEN, or use the local Unix socket");
  }
  const std::string hash = HashToken(header.substr(prefix.size()));
  GP_ASSIGN_OR_RETURN(std::optional<store::TokenRecord> rec, store.FindToken(hash));
  if (!rec) {
    return Status::PermissionDenied(
        "unknown or revoked token: ask an admin for a new one (`gpupool token create`)");
  }
  if (rec->expires_us != 0 && now_us >= rec->expires_us) {
    return Status::PermissionDenied("this " + rec->kind + " token for " + rec->user +
                                    " has expired: ask an admin for a new one (`gpupool token "
                                    "create --expires ...`)");
  }
  // Coarse on purpose: one write a minute per token at most, however often it polls. A
  // failed write loses only that precision, so it does not fail the request.
  if (now_us - rec->last_used_us >= kTokenUseResolutionUs) (void)store.TouchToken(hash, now_us);
  if (rec->kind == "node") {
    id.kind = CallerKind::kNode;
    id.node = rec->user;
    id.caller.user = "node:" + rec->user;
    id.caller.uid = kNodeCallerUid;
    id.caller.gid = kNodeCallerUid;
    id.caller.admin = false;
    return id;
  }
  if (rec->kind == "metrics") {
    // A service account: no account on this host; it acts as no user (it reads aggregates
    // only, and no job is its own).
    id.kind = CallerKind::kMetrics;
    id.caller.user = "metrics:" + rec->user;
    id.caller.uid = kNodeCallerUid;
    id.caller.gid = kNodeCallerUid;
    id.caller.admin = false;
    return id;
  }
  if (rec->kind != "user") {
    return Status::PermissionDenied("the token's kind '" + rec->kind +
                                    "' is unknown to this gpupool: ask an admin for a new token");
  }
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwnam_r(rec->user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return Status::PermissionDenied("the token's user '" + rec->user +
                                    "' has no account on the controller host");
  }
  id.caller = CallerForUid(found->pw_uid, found->pw_gid, options);
  id.kind = id.caller.admin ? CallerKind::kAdmin : CallerKind::kUser;
  return id;
}

}  // namespace gpupool::controller
