// Who is calling the API: the kernel's word on a Unix socket (SO_PEERCRED), a bearer
// token over TCP. Tokens are random, shown once, and stored only as SHA-256 hashes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "controller/controller.h"
#include "net/http.h"
#include "store/store.h"

namespace gpupool::controller {

struct AuthOptions {
  std::string admin_group;  // members are admins; uid 0 always is
};

// What kind of caller a request comes from (docs/security.md, "Caller kinds"). The kind
// alone decides which endpoints the caller may use (endpoint_access.h).
enum class CallerKind {
  kUser,     // a uid on the Unix socket, or a "user" token
  kAdmin,    // a user who is uid 0 or in the admin group
  kNode,     // a "node" token: an agent, bound to one node
  kMetrics,  // a "metrics" token: reads aggregates only
};
std::string_view CallerKindName(CallerKind kind);

// A node caller's uid and gid: nobody's, never 0. It never reaches a user endpoint anyway.
inline constexpr uint32_t kNodeCallerUid = 65534;

struct Identity {
  CallerKind kind = CallerKind::kUser;
  // kUser, kAdmin: the account the caller acts as. kNode: no account: user "node:NAME",
  // uid and gid kNodeCallerUid, not admin. kMetrics: a service account, no account either:
  // user "metrics:NAME", uid and gid kNodeCallerUid, not admin (no job is its own).
  Caller caller;
  std::string node;              // kNode: the node the token belongs to
  bool any_local_agent = false;  // root on the Unix socket: may also act as any node's agent
};

// How often a token's last use is written to the store at most: agents poll every few
// seconds, and the store should not take a write for each poll.
inline constexpr int64_t kTokenUseResolutionUs = 60'000'000;

// The caller of `request` at time `now_us`. kPermissionDenied (the API answers 401) for a
// missing, malformed, unknown, revoked or expired token and for a token whose user has no
// account here, with a message saying what to do; kInternal when the store fails. Records
// the token's use (Store::TouchToken) when the stored one is kTokenUseResolutionUs old.
Result<Identity> Authenticate(const net::HttpRequest& request, store::Store& store,
                              const AuthOptions& options, int64_t now_us);

// A new random token ("gpt_" + 64 hex digits) and its hash.
Result<std::pair<std::string, std::string>> NewToken();
std::string HashToken(const std::string& token);

// The admin group at start-up: Ok when `group` is empty or exists (members or not);
// InvalidArgument naming --admin-group when the group database has no such group (a typo,
// or a group not created yet: its members would be refused as non-admins); Unavailable
// when the lookup itself failed (a directory service not answering). `buffer_bytes`: the
// first buffer for getgrnam_r, grown as needed (tests start it small).
Status CheckAdminGroup(const std::string& group, size_t buffer_bytes = 16384);

// The caller for a local uid (name from the password database; admin per options).
Caller CallerForUid(uint32_t uid, uint32_t gid, const AuthOptions& options);

}  // namespace gpupool::controller
