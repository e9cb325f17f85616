// SQLite implementation of Store (sqlite_store.cc). Daemons open their store by spec
// through OpenStore (open_store.h); tests open in-memory stores here directly.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "store/store.h"

namespace gpupool::store {

// Opens (creating if needed) an SQLite store at `path` in WAL mode and brings its schema
// up to date. ":memory:" gives a private in-memory store for tests.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path);

}  // namespace gpupool::store
