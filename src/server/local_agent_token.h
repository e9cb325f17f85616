// The node token of the local agent that `gpupool up` runs. It is kept in a 0600 file in
// the agent's state directory so that every start reuses it: one node token per host,
// however often the pool restarts (before, each start added one).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "store/store.h"

namespace gpupool::server {

// The token in the file at `path` when the store still knows it as a node token for
// `node` that has not expired at `now_us` and the file is ours and private; otherwise a
// new node token for `node`, written to `path` (mode 0600, replaced atomically) and to the
// store, and the record of the old one (expired, another host name's, or readable by
// others) deleted. kUnavailable when the file cannot be written, kInternal when the store
// fails.
Result<std::string> LocalAgentToken(store::Store& store, const std::string& path,
                                    const std::string& node, int64_t now_us);

}  // namespace gpupool::server
