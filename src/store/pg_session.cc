#include "store/pg_session.h"

#include <cstdlib>

namespace gpupool::store::internal {

std::string OneLine(const char* msg) {
  std::string s = msg == nullptr ? "" : msg;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  return s.empty() ? "unknown error" : s;
}

Result<PGconn*> Connect(const std::string& conninfo, const std::string& target,
                        const char* session_options) {
  {
    char* err = nullptr;
    PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
    if (err != nullptr) PQfreemem(err);
    if (opts == nullptr) {
      return Status::InvalidArgument(
          "the PostgreSQL connection string is malformed (not shown: it may hold a password): "
          "write it as postgresql://USER@HOST/DB or host=HOST dbname=DB");
    }
    PQconninfoFree(opts);
  }
  // Keywords are applied in order: the connection string may override connect_timeout
  // and the options, and names the application only if it says nothing about it.
  const char* timeout = std::getenv("PGCONNECT_TIMEOUT");
  const char* keys[] = {"connect_timeout", "options", "dbname", "fallback_application_name",
                        nullptr};
  const char* values[] = {timeout != nullptr ? timeout : "10", session_options, conninfo.c_str(),
                          "gpupool", nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (conn == nullptr) return Status::Unavailable("libpq: out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string msg = OneLine(PQerrorMessage(conn));
    PQfinish(conn);
    return Status::Unavailable("cannot connect to the PostgreSQL store " + target + ": " + msg +
                               ": check the --store connection string, that the server runs, "
                               "and the password in PGPASSFILE or ~/.pgpass");
  }
  return conn;
}

}  // namespace gpupool::store::internal
