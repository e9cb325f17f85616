#include "store/open_store.h"

#include <libpq-fe.h>

#include <string_view>

#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace gpupool::store {
namespace {

constexpr std::string_view kSqlitePrefix = "sqlite:";

// Whether `spec` begins with a libpq keyword and '=' ("host=db1 dbname=gpupool").
bool StartsWithConninfoKeyword(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos) return false;
  size_t b = spec.find_first_not_of(" \t");
  size_t e = spec.find_last_not_of(" \t", eq - 1);
  if (b == std::string::npos || e == std::string::npos || e < b) return false;
  const std::string key = spec.substr(b, e - b + 1);
  PQconninfoOption* defaults = PQconndefaults();
  if (defaults == nullptr) return false;
  bool known = false;
  for (const PQconninfoOption* o = defaults; o->keyword != nullptr; ++o) {
    if (key == o->keyword) known = true;
  }
  PQconninfoFree(defaults);
  return known;
}

// "word:" at the start, as in "mysql://..." or a mistyped "postgresq://...": a scheme
// this factory does not know rather than a file name.
bool HasScheme(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos || colon == 0) return false;
  for (size_t i = 0; i < colon; ++i) {
    const char c = spec[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (i > 0 && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'));
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool IsPostgresSpec(const std::string& spec) {
  return spec.rfind("postgresql://", 0) == 0 || spec.rfind("postgres://", 0) == 0 ||
         StartsWithConninfoKeyword(spec);
}

std::string DescribeStoreSpec(const std::string& spec) {
  if (IsPostgresSpec(spec)) return "postgresql " + RedactConninfo(spec);
  if (spec.rfind(kSqlitePrefix, 0) == 0) return "sqlite " + spec.substr(kSqlitePrefix.size());
  return "sqlite " + spec;
}

Result<std::unique_ptr<Store>> OpenStore(const std::string& spec) {
  if (spec.empty()) {
    return Status::InvalidArgument(
        "the store spec is empty: give sqlite:PATH, a file path, or a PostgreSQL connection "
        "string (postgresql://USER@HOST/DB)");
  }
  if (IsPostgresSpec(spec)) return OpenPostgresStore(spec);
  std::string path = spec;
  if (spec.rfind(kSqlitePrefix, 0) == 0) {
    path = spec.substr(kSqlitePrefix.size());
  } else if (HasScheme(spec)) {
    return Status::InvalidArgument(
        "the store spec '" + spec.substr(0, spec.find(':')) +
        ":...' names no known store: write sqlite:PATH, postgresql://USER@HOST/DB or "
        "host=HOST dbname=DB (a file whose name holds ':' as sqlite:PATH or ./PATH)");
  }
  if (path.empty()) {
    return Status::InvalidArgument("the store spec '" + spec +
                                   "' names no file: write sqlite:PATH, for example "
                                   "sqlite:/var/lib/gpupool/gpupool.db");
  }
  return OpenSqliteStore(path);
}

}  // namespace gpupool::store
