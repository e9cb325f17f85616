// Who is calling the API: the kernel's word on a Unix socket (SO_PEERCRED), a bearer
// token over TCP. Tokens are random, shown once, and stored only as SHA-256 hashes.
#pragma once

#include <string>

#include "common/status.h"
#include "controller/controller.h"
#include "net/http.h"
#include "store/store.h"

namespace gpupool::controller {

struct AuthOptions {
  std::string admin_group;  // members are admins; uid 0 always is
};

struct Identity {
  Caller caller;
  bool is_node = false;  // authenticated with a node join token (or root on the socket)
};

// kUnavailable is never returned: an unknown or missing token is kPermissionDenied with
// a message saying how to get one.
Result<Identity> Authenticate(const net::HttpRequest& request, store::Store& store,
                              const AuthOptions& options);

// A new random token ("gpt_" + 64 hex digits) and its hash.
Result<std::pair<std::string, std::string>> NewToken();
std::string HashToken(const std::string& token);

// The caller for a local uid (name from the password database; admin per options).
Caller CallerForUid(uint32_t uid, uint32_t gid, const AuthOptions& options);

}  // namespace gpupool::controller
