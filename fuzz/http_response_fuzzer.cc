// Fuzz target: HttpClient's parser of a server's answer (ParseHttpResponse: status line,
// headers, Content-Length or chunked body), then StatusFromHttp on it, as every client
// (the CLI, the agent) reads a non-2xx answer. Checks besides "no crash": errors are
// Unavailable with words; a parsed answer has the status line's code, in 100..599, a body
// no longer than the input, and exactly Content-Length bytes when not chunked.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/strings.h"
#include "fuzz/fuzz_check.h"
#include "net/http_client.h"
#include "net/http_status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpupool;
  const std::string_view raw(reinterpret_cast<const char*>(data), size);
  Result<net::HttpResponse> r = net::ParseHttpResponse(raw);
  if (!r.ok()) {
    fuzz::Require(r.status().code() == StatusCode::kUnavailable,
                  "error code of: " + r.status().ToString());
    fuzz::Require(!r.status().message().empty(), "an error without words");
    return 0;
  }
  fuzz::Require(r->status >= 100 && r->status <= 599, "status out of range");
  // The status line's code is the status, whole: "HTTP/1.1 2000 OK" is no 200.
  const std::string_view line = raw.substr(0, raw.find("\r\n"));
  const std::string_view code = line.substr(line.find(' ') + 1);
  fuzz::Require(code.substr(0, code.find(' ')) == std::to_string(r->status),
                "status " + std::to_string(r->status) + " from '" + std::string(line) + "'");
  fuzz::Require(r->body.size() <= size, "a body longer than the answer");
  const auto te = r->headers.find("transfer-encoding");
  const bool chunked =
      te != r->headers.end() && ToLower(te->second).find("chunked") != std::string::npos;
  if (const auto cl = r->headers.find("content-length"); !chunked && cl != r->headers.end()) {
    fuzz::Require(
        ParseInt64(cl->second) == static_cast<int64_t>(r->body.size()),
        "body of " + std::to_string(r->body.size()) + " bytes for Content-Length " + cl->second);
  }
  if (r->status >= 300) {
    const Status s = net::StatusFromHttp(r->status, r->body);
    fuzz::Require(!s.ok() && !s.message().empty(), "StatusFromHttp: " + s.ToString());
  }
  return 0;
}
