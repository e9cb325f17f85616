// Which kinds of caller may use which endpoints, consulted for every request after
// authentication, so that no handler decides it on its own. The rules are the access
// column of the route table (api/route_table.h); docs/security.md ("Caller kinds") is the
// same table in words. Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "controller/api/route_table.h"
#include "controller/auth.h"

namespace gpupool::controller {

// Whether `method path` answers anyone, before and without authentication: GET /healthz
// and /readyz (load balancers, systemd) and GET /v1/openapi.json (the API's schema). They
// carry no job or user data. So do the dashboard's page and assets (GET / and /ui/*) and
// its sign-in and sign-out (POST /ui/login, /ui/logout), which check what they are given.
bool IsPublic(std::string_view method, std::string_view path);

// Ok when `who` may call with `access`; kPermissionDenied naming the caller's kind, what
// it may use instead and how to get the right credential otherwise. `call` ("METHOD
// /path") is for the message.
Status CheckAccess(const Identity& who, const api::Access& access, std::string_view call);

// CheckAccess with the rule of `method path` (api::AccessOf): its route's, or for a path
// no route answers the rule of the routes nearest to it, so an unknown path is allowed to
// whom its neighbours allow (users and admins, for most), who then get 404.
Status MayCall(const Identity& who, std::string_view method, std::string_view path);

// For an agent endpoint: the node `who` acts for. `*node` is the node the request names
// (empty: none). A node token acts only for its own node: an empty `*node` becomes it,
// another is kPermissionDenied naming both. Root on the Unix socket acts for any node
// (`*node` is left as it is). Any other caller is kPermissionDenied.
Status ActAsNode(const Identity& who, std::string* node);

}  // namespace gpupool::controller
