#include "store/postgres_test_server.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace gpupool::store {
namespace {

namespace fs = std::filesystem;

std::string BinDir() {
  const char* env = std::getenv("GPUPOOL_PG_BINDIR");
  return env != nullptr && *env != '\0' ? env : "/usr/lib/postgresql/15/bin";
}

struct Account {
  bool switch_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Who runs the server: ourselves, or, as root, an unprivileged account.
Result<Account> ServerAccount() {
  if (::geteuid() != 0) return Account{};
  for (const char* name : {"postgres", "nobody"}) {
    if (const passwd* pw = ::getpwnam(name)) return Account{true, pw->pw_uid, pw->pw_gid};
  }
  return Status::Unavailable(
      "the test runs as root and neither the postgres nor the nobody account exists to run "
      "PostgreSQL as: apt-get install postgresql-15 creates postgres");
}

// Starts argv[0] with `argv`, as `account`, in `dir`, output to `log`.
Result<pid_t> Spawn(const std::vector<std::string>& argv, const Account& account,
                    const std::string& dir, const std::string& log, bool die_with_parent) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::Internal("fork failed");
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (account.switch_user && (::setgroups(0, nullptr) != 0 || ::setgid(account.gid) != 0 ||
                                ::setuid(account.uid) != 0)) {
      ::_exit(126);
    }
    // Set after the user change, which clears it: the server ends with the test binary.
    if (die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGQUIT);
      if (::getppid() != parent) ::_exit(1);
    }
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

std::string ReadLog(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A data directory initdb finished, owned by `owner` alone (not someone else's in /tmp).
bool IsTemplate(const std::string& dir, uid_t owner) {
  struct stat st {};
  return ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == owner &&
         (st.st_mode & 077) == 0 && ::access((dir + "/PG_VERSION").c_str(), F_OK) == 0 &&
         ::access((dir + "/global/pg_control").c_str(), F_OK) == 0;
}

std::unique_ptr<PostgresTestServer>& SharedSlot() {
  static auto* slot = new std::unique_ptr<PostgresTestServer>();
  return *slot;
}

// Stops the shared server after the last test (and before gtest's own teardown).
class PostgresEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { SharedSlot().reset(); }
};
[[maybe_unused]] ::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new PostgresEnvironment);

}  // namespace

Result<std::unique_ptr<PostgresTestServer>> PostgresTestServer::Start() {
  const std::string bin = BinDir();
  if (::access((bin + "/initdb").c_str(), X_OK) != 0 ||
      ::access((bin + "/postgres").c_str(), X_OK) != 0) {
    return Status::Unavailable("PostgreSQL 15 is not installed (no " + bin +
                               "/initdb): apt-get install postgresql-15, or run "
                               "scripts/install-deps.sh; GPUPOOL_PG_BINDIR names another");
  }
  GP_ASSIGN_OR_RETURN(Account account, ServerAccount());
  // A server in RAM (tmpfs) starts from its copied template in a tenth of the time.
  const bool shm = ::access("/dev/shm", W_OK | X_OK) == 0;
  std::string tmpl =
      ((shm ? fs::path("/dev/shm") : fs::temp_directory_path()) / "gpupool-pg-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return Status::Internal("cannot make a temporary directory for PostgreSQL");
  }
  std::unique_ptr<PostgresTestServer> server(new PostgresTestServer());
  server->dir_ = tmpl;
  if (account.switch_user && ::chown(tmpl.c_str(), account.uid, account.gid) != 0) {
    return Status::Internal("cannot hand " + tmpl + " to the PostgreSQL account");
  }
  const std::string data = tmpl + "/data";
  const std::string log = tmpl + "/server.log";

  // initdb takes about a second, a copy of its output a third of that: ctest runs every
  // test case in a process of its own, so the first one leaves a template for the rest.
  const uid_t owner = account.switch_user ? account.uid : ::geteuid();
  const std::string cached =
      (fs::temp_directory_path() / ("gpupool-pg-template-15-1-uid" + std::to_string(::geteuid())))
          .string();
  int status = 0;
  if (IsTemplate(cached, owner)) {
    GP_ASSIGN_OR_RETURN(pid_t cp, Spawn({"/bin/cp", "-a", cached, data}, Account{}, tmpl, log,
                                        /*die_with_parent=*/false));
    ::waitpid(cp, &status, 0);
  }
  if (!IsTemplate(data, owner)) {
    std::error_code ec;
    fs::remove_all(data, ec);
    GP_ASSIGN_OR_RETURN(pid_t initdb, Spawn({bin + "/initdb", "-D", data, "-U", "gpupool",
                                             "--auth=trust", "--no-sync", "--no-instructions", "-E",
                                             "UTF8", "--locale=C", "--wal-segsize=1"},
                                            account, tmpl, log, /*die_with_parent=*/false));
    ::waitpid(initdb, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return Status::Internal("initdb failed: " + ReadLog(log));
    }
    // Best effort: a copy renamed into place, so no process sees half a template.
    const std::string partial = cached + ".partial-" + std::to_string(::getpid());
    GP_ASSIGN_OR_RETURN(pid_t cp, Spawn({"/bin/cp", "-a", data, partial}, Account{}, tmpl, log,
                                        /*die_with_parent=*/false));
    ::waitpid(cp, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        ::rename(partial.c_str(), cached.c_str()) != 0) {
      fs::remove_all(partial, ec);
    }
  }
  GP_ASSIGN_OR_RETURN(
      server->pid_,
      Spawn({bin + "/postgres", "-D", data, "-k", tmpl, "-c", "listen_addresses=", "-c",
             "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c",
             "shared_buffers=16MB", "-c", "max_connections=40", "-c", "max_wal_size=256MB"},
            account, tmpl, log, /*die_with_parent=*/true));
  const std::string admin = server->ConnInfo("postgres");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (PQping(admin.c_str()) != PQPING_OK) {
    if (::waitpid(server->pid_, &status, WNOHANG) == server->pid_) {
      server->pid_ = -1;
      return Status::Internal("postgres exited at start: " + ReadLog(log));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Internal("postgres did not accept connections in 30 s: " + ReadLog(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return server;
}

PostgresTestServer::~PostgresTestServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGQUIT);  // immediate shutdown: the data is thrown away anyway
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

std::string PostgresTestServer::ConnInfo(const std::string& db) const {
  return "host=" + dir_ + " port=5432 user=gpupool dbname=" + db;
}

Result<std::string> PostgresTestServer::CreateDatabase() {
  const std::string name = "test" + std::to_string(++databases_);
  PGconn* conn = PQconnectdb(ConnInfo("postgres").c_str());
  // A name made of a counter (identifiers cannot be parameters).
  PGresult* r = PQexec(conn, ("CREATE DATABASE " + name).c_str());
  const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  std::string err = PQerrorMessage(conn);
  PQclear(r);
  PQfinish(conn);
  if (!ok) return Status::Internal("CREATE DATABASE " + name + ": " + err);
  return ConnInfo(name);
}

Result<PostgresTestServer*> SharedPostgresTestServer() {
  static Status failed;
  if (!failed.ok()) return failed;
  if (!SharedSlot()) {
    auto s = PostgresTestServer::Start();
    if (!s.ok()) {
      failed = s.status();
      return failed;
    }
    SharedSlot() = std::move(s).value();
  }
  return SharedSlot().get();
}

}  // namespace gpupool::store
