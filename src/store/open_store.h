// Opens a Store by its spec, so the daemons name a backend in configuration instead of
// hard-coding one:
//   sqlite:PATH, or a plain PATH             the embedded SQLite store (sqlite_store.cc)
//   postgresql://..., postgres://...         a PostgreSQL server (postgres_store.cc)
//   host=... dbname=... (libpq key=value)    the same, as a libpq key/value string
// Any other "scheme:..." is refused (InvalidArgument) rather than taken for a file name.
// Thread-safe; the store returned is documented in store.h.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "store/store.h"

namespace gpupool::store {

Result<std::unique_ptr<Store>> OpenStore(const std::string& spec);

// Whether `spec` names a PostgreSQL server rather than an SQLite file.
bool IsPostgresSpec(const std::string& spec);

// The spec as messages may show it: a PostgreSQL spec without its password.
std::string DescribeStoreSpec(const std::string& spec);

}  // namespace gpupool::store
