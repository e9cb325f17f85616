#include "controller/tokens.h"

#include <pwd.h>

#include <vector>

namespace gpupool::controller {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

}  // namespace

bool HasPosixAccount(const std::string& name) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  return getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr;
}

std::string TokenId(const store::TokenRecord& token) {
  return token.token_hash.substr(0, kTokenIdDigits);
}

bool IsNodeName(std::string_view name) {
  if (name.empty() || name.size() > 64 || !IsAlnum(name.front())) return false;
  for (char c : name) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

bool IsPosixUserName(std::string_view name) {
  if (name.empty() || name.size() > 32 || name.front() == '-') return false;
  for (char c : name) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

Status ValidateTokenSubject(std::string_view kind, std::string_view name) {
  const std::string n(name);
  if (kind == "node") {
    if (!IsNodeName(name)) {
      return Status::InvalidArgument(
          "user: '" + n +
          "' is not a node name: give the agent's node name (1-64 letters, digits, '.', '_' or "
          "'-', starting with a letter or a digit), as `gpupool agent --node-name` uses it");
    }
    return Status::Ok();
  }
  if (kind == "metrics") {
    // A service account (a Prometheus, a Grafana): named, but no account on this host.
    if (!IsNodeName(name)) {
      return Status::InvalidArgument(
          "user: '" + n +
          "' is not a metrics token's name: give the service's name (1-64 letters, digits, "
          "'.', '_' or '-', starting with a letter or a digit), e.g. prometheus");
    }
    return Status::Ok();
  }
  if (kind != "user") {
    return Status::InvalidArgument("kind: use user, node or metrics");
  }
  if (!IsPosixUserName(name)) {
    return Status::InvalidArgument(
        "user: '" + n +
        "' is not a valid user name (1-32 letters, digits, '.', '_' or '-', not starting "
        "with '-'): give the login name of an account on the controller host");
  }
  if (!HasPosixAccount(n)) {
    return Status::InvalidArgument("user: there is no account '" + n +
                                   "' on the controller host: give an existing login name, or "
                                   "create the account first (useradd " +
                                   n + ")");
  }
  return Status::Ok();
}

Result<store::TokenRecord> FindTokenById(store::Store& store, std::string_view id) {
  bool hex = id.size() >= kTokenIdDigits && id.size() <= 64;
  for (char c : id) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex) {
    return Status::InvalidArgument("token id '" + std::string(id) + "': give the " +
                                   std::to_string(kTokenIdDigits) +
                                   "-hex-digit id that `gpupool token list` shows");
  }
  GP_ASSIGN_OR_RETURN(std::vector<store::TokenRecord> tokens, store.ListTokens());
  std::vector<store::TokenRecord> matches;
  for (store::TokenRecord& t : tokens) {
    if (t.token_hash.compare(0, id.size(), id) == 0) matches.push_back(std::move(t));
  }
  if (matches.empty()) {
    return Status::NotFound("no token has the id " + std::string(id) +
                            ": see `gpupool token list` (it may be revoked already)");
  }
  if (matches.size() > 1) {
    return Status::InvalidArgument("token id " + std::string(id) + " matches " +
                                   std::to_string(matches.size()) +
                                   " tokens; nothing was revoked: give more hex digits of it");
  }
  return std::move(matches.front());
}

}  // namespace gpupool::controller
