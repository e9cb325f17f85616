#include "net/http.h"

#include "common/strings.h"

namespace gpupool::net {

std::string HttpRequest::Header(std::string_view name) const {
  auto it = headers.find(std::string(name));
  return it == headers.end() ? std::string() : it->second;
}

std::string HttpRequest::Query(std::string_view name, std::string fallback) const {
  auto it = query.find(std::string(name));
  if (it == query.end()) return fallback;  // moved: a ?: with it->second would copy it
  return it->second;
}

std::string ServerAddress::ToString() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  return "http://" + host + ":" + std::to_string(port);
}

Result<ServerAddress> ParseServerAddress(std::string_view text) {
  const std::string_view original = text;
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("server address '" + std::string(original) +
                                   "': " + std::string(why) +
                                   "; use unix:/path/to/gpupool.sock or http://HOST:PORT");
  };
  ServerAddress a;
  if (StartsWith(text, "unix:")) {
    text.remove_prefix(5);
    while (StartsWith(text, "//")) text.remove_prefix(1);  // unix:///x -> /x
    if (text.empty() || text.front() != '/') return bad("the socket path must be absolute");
    a.kind = ServerAddress::Kind::kUnix;
    a.path = std::string(text);
    return a;
  }
  if (StartsWith(text, "https://")) return bad("https is not supported yet");
  if (StartsWith(text, "http://")) text.remove_prefix(7);
  while (!text.empty() && text.back() == '/') text.remove_suffix(1);
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad("expected HOST:PORT");
  auto port = ParseInt64(text.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535) return bad("the port must be 1..65535");
  a.kind = ServerAddress::Kind::kTcp;
  a.host = std::string(text.substr(0, colon));
  a.port = static_cast<int>(*port);
  return a;
}

Result<std::vector<ServerAddress>> ParseServerAddressList(std::string_view text) {
  const char* const kForms =
      "give one or more of unix:/path/to/gpupool.sock or http://HOST:PORT, separated by commas";
  if (Trim(text).empty()) {
    return Status::InvalidArgument(std::string("the server address list is empty; ") + kForms);
  }
  const std::vector<std::string> elements = Split(text, ',');
  std::vector<ServerAddress> out;
  for (size_t i = 0; i < elements.size(); ++i) {
    const std::string_view element = Trim(elements[i]);
    if (element.empty()) {
      return Status::InvalidArgument("server address list: element " + std::to_string(i + 1) +
                                     " of " + std::to_string(elements.size()) + " is empty; " +
                                     kForms);
    }
    // Its message names the bad element and the accepted forms.
    Result<ServerAddress> a = ParseServerAddress(element);
    if (!a.ok()) return a.status();
    out.push_back(std::move(a).value());
  }
  return out;
}

std::string ServerAddressListToString(const std::vector<ServerAddress>& addresses) {
  std::string out;
  for (const ServerAddress& a : addresses) {
    if (!out.empty()) out += ',';
    out += a.ToString();
  }
  return out;
}

}  // namespace gpupool::net
