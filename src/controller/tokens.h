// Rules for API tokens that the token endpoints (api.cc) and `gpupool up` share: which
// names a token may be made for, and how an admin names a token to revoke it. Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "store/store.h"

namespace gpupool::controller {

// The id `gpupool token list` shows: the first 12 hex digits of the token's hash.
inline constexpr size_t kTokenIdDigits = 12;
std::string TokenId(const store::TokenRecord& token);

// 1-64 letters, digits, '.', '_' or '-', starting with a letter or a digit.
bool IsNodeName(std::string_view name);
// A portable POSIX user name: 1-32 letters, digits, '.', '_' or '-', not starting with '-'.
bool IsPosixUserName(std::string_view name);
// Whether this host has an account of that name (getpwnam).
bool HasPosixAccount(const std::string& name);

// Whether a token of `kind` ("user", "node" or "metrics") may be made for `name`: a node
// name for kind node; a service's name of the same form for kind metrics (a service
// account: no account on this host needed); for user, a POSIX user name with an account
// on this host (getpwnam). kInvalidArgument naming the field and the fix otherwise.
Status ValidateTokenSubject(std::string_view kind, std::string_view name);

// The one token whose id starts with `id` (kTokenIdDigits to 64 hex digits).
// kInvalidArgument for a malformed id or one that matches several tokens, kNotFound when
// none matches; kInternal when the store fails.
Result<store::TokenRecord> FindTokenById(store::Store& store, std::string_view id);

}  // namespace gpupool::controller
