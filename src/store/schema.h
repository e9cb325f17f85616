// The stores' schemas (internal to src/store): each store's migrations, applied in order
// from the version a database is at. A migration is never changed once released: a
// database that ran it keeps what it did; a change is a new one at the end.
#pragma once

#include <span>

namespace gpupool::store::internal {

// SQLite's; PRAGMA user_version records how far a file got.
std::span<const char* const> SqliteMigrations();

// PostgreSQL's own list; the one-row table schema_version records how far a database
// got. Its version 1 is the schema the SQLite store reached at its version 8.
std::span<const char* const> PostgresMigrations();

}  // namespace gpupool::store::internal
