#include "net/request_framing.h"

#include "common/strings.h"

namespace gpupool::net {

std::string AmbiguousFraming(const HeaderList& headers) {
  int lengths = 0;
  int encodings = 0;
  std::string encoding;
  for (const auto& [name, value] : headers) {
    const std::string lower = ToLower(name);
    if (lower == "content-length") ++lengths;
    if (lower == "transfer-encoding") {
      ++encodings;
      encoding = value;
    }
  }
  if (lengths > 1) return "the request has more than one Content-Length header";
  if (encodings > 1) return "the request has more than one Transfer-Encoding header";
  if (encodings == 1 && lengths == 1) {
    return "the request has both Content-Length and Transfer-Encoding: send one";
  }
  if (encodings == 1 && ToLower(encoding) != "chunked") {
    return "the request's Transfer-Encoding is not chunked, the only one read: send chunked or "
           "Content-Length";
  }
  return "";
}

}  // namespace gpupool::net
