// How a request's body is framed: what libmicrohttpd reads (the first Content-Length, or
// chunks when the first Transfer-Encoding is "chunked", any other coding until the close)
// must be the only reading of the head. Otherwise a handler, which sees the last of each
// header (HttpRequest::headers), or a proxy in front that frames the other way, takes a
// different body than the server did: a smuggled request. RFC 9112 section 6.3 asks for
// 400 and the close; fuzz/http_request_fuzzer.cc found the first case (two
// Content-Lengths: the handler saw a body of 1 byte for a Content-Length of 2).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gpupool::net {

// Every header of a request head, in order, as libmicrohttpd holds them.
using HeaderList = std::vector<std::pair<std::string, std::string>>;

// "" when the body's framing is plain, else why the request is refused: a repeated
// Content-Length or Transfer-Encoding, both of them, or a Transfer-Encoding other than
// "chunked" (the only coding the server reads).
std::string AmbiguousFraming(const HeaderList& headers);

}  // namespace gpupool::net
