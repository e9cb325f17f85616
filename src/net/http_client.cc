#include "net/http_client.h"

#include <curl/curl.h>

#include <memory>
#include <mutex>
#include <string_view>

#include "common/strings.h"

namespace gpupool::net {
namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Collects "Name: value" response header lines, names lower-cased like the server's.
size_t CollectHeader(char* data, size_t size, size_t n, void* out) {
  const std::string_view line(data, size * n);
  if (const size_t colon = line.find(':'); colon != std::string_view::npos) {
    auto* headers = static_cast<std::map<std::string, std::string>*>(out);
    (*headers)[ToLower(Trim(line.substr(0, colon)))] = std::string(Trim(line.substr(colon + 1)));
  }
  return size * n;
}

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

}  // namespace

HttpClient::HttpClient(ServerAddress address, std::string bearer_token)
    : address_(std::move(address)), bearer_token_(std::move(bearer_token)) {
  GlobalInit();
}

std::string UrlEncode(const std::string& s) {
  static const char* const kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<HttpResponse> HttpClient::Send(const std::string& method, const std::string& path,
                                      const std::string& body, int timeout_ms) const {
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return Status::Internal("curl_easy_init failed");
  std::string url;
  if (address_.kind == ServerAddress::Kind::kUnix) {
    curl_easy_setopt(curl.get(), CURLOPT_UNIX_SOCKET_PATH, address_.path.c_str());
    url = "http://localhost" + path;
  } else {
    url = "http://" + address_.host + ":" + std::to_string(address_.port) + path;
  }
  HttpResponse resp;
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
  if (!bearer_token_.empty()) {
    headers = curl_slist_append(headers, ("Authorization: Bearer " + bearer_token_).c_str());
  }
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_guard(headers,
                                                                           curl_slist_free_all);
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms));
  curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &resp.body);
  curl_easy_setopt(curl.get(), CURLOPT_HEADERFUNCTION, &CollectHeader);
  curl_easy_setopt(curl.get(), CURLOPT_HEADERDATA, &resp.headers);
  if (method == "POST" || method == "PUT" || !body.empty()) {
    curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  const CURLcode rc = curl_easy_perform(curl.get());
  if (rc != CURLE_OK) {
    std::string hint = address_.kind == ServerAddress::Kind::kUnix
                           ? ": is `gpupool up` running? (set --server or GPUPOOL_SERVER)"
                           : ": is the server running and reachable?";
    return Status::Unavailable("cannot reach the gpupool server at " + address_.ToString() + ": " +
                               curl_easy_strerror(rc) + hint);
  }
  long code = 0;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &code);
  resp.status = static_cast<int>(code);
  char* ctype = nullptr;
  curl_easy_getinfo(curl.get(), CURLINFO_CONTENT_TYPE, &ctype);
  if (ctype != nullptr) resp.content_type = ctype;
  return resp;
}

}  // namespace gpupool::net
