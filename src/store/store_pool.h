// A Store over several stores of one database, e.g. one PostgreSQL connection each: every
// call takes a member no other call is using, waiting while all are busy. A slow write
// then holds one connection, not every caller of the store. The members must show each
// other's committed writes (one database); what the callers need of ordering they make
// themselves: the controller never writes one job from two threads at once
// (controller.h), and serialises node and settings writes.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace gpupool::store {

// InvalidArgument for an empty `members`. Fencing (SetFence) applies to every member.
Result<std::unique_ptr<Store>> MakeStorePool(std::vector<std::unique_ptr<Store>> members);

}  // namespace gpupool::store
