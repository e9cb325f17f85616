// Percent-decoding of a request's path and query (libmicrohttpd's unescape callback).
// Network input is hostile: libmicrohttpd's own decoding turned a %00 into a NUL in the
// C string the server reads, so GET /v1/jobs/1%00abc was served as /v1/jobs/1. No path
// or query of the API holds a control byte, so one sent escaped is kept as sent, and
// the request is refused (400) naming it.
#pragma once

#include <cstddef>

namespace gpupool::net {

// Decodes the %XX escapes of the NUL-terminated `s` in place, as libmicrohttpd does (a
// malformed escape stays as it is), except one of a control byte (below 0x20, or 0x7f),
// which stays as sent and sets *control. Returns the new length; `s` stays terminated.
size_t UnescapeUrlPart(char* s, bool* control);

}  // namespace gpupool::net
