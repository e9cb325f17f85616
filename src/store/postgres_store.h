// PostgreSQL implementation of Store (postgres_store.cc), over libpq.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "store/store.h"

namespace gpupool::store {

// Connects with a libpq connection string (`postgresql://...` or `host=... dbname=...`)
// and brings the schema up to date (its versions are recorded in the table
// schema_version). Passwords come from the string, PGPASSWORD or PGPASSFILE, as libpq
// reads them; messages never show them. Unavailable when the server cannot be reached.
// The store holds kPostgresStoreConnections connections (store_pool.h): writes of
// different jobs, reads and polls go out side by side, and a slow statement holds one of
// them. A controller also holds one for its lease (OpenPostgresLeaseStore).
inline constexpr int kPostgresStoreConnections = 8;
Result<std::unique_ptr<Store>> OpenPostgresStore(const std::string& conninfo);

// The connection string without its password, for messages: "host=/run/pg dbname=gpupool
// user=gp". A string libpq cannot parse is not shown at all (it may hold a password).
std::string RedactConninfo(const std::string& conninfo);

}  // namespace gpupool::store
