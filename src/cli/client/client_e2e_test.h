// The fixture of the CLI's end-to-end tests (client_e2e_test.cc, cancel_e2e_test.cc): the
// real commands, through the real HttpClient, against a real in-process HttpServer on a
// temporary Unix socket that plays a canned gpupool server.
#pragma once
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/client/client_commands.h"
#include "common/json.h"
#include "net/http_client.h"
#include "net/http_server.h"

namespace gpupool::cli {

using net::HttpRequest;
using net::HttpResponse;

constexpr int64_t kNow = 1'793'491'200'000'000;  // 2026-11-01T00:00:00Z

inline HttpResponse JsonAnswer(int status, const std::string& body) {
  HttpResponse r;
  r.status = status;
  r.body = body;
  return r;
}

struct RunResult {
  int code = -1;
  std::string out;
  std::string err;
};

// The submit_key of a submission's body, "" when it has none.
inline std::string SubmitKeyOf(const std::string& body) {
  const std::string field = R"("submit_key":")";
  const size_t at = body.find(field);
  if (at == std::string::npos) return "";
  const size_t from = at + field.size();
  return body.substr(from, body.find('"', from) - from);
}

class ClientE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gpupool-cli-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    socket_ = (dir_ / "gpupool.sock").string();
  }
  void TearDown() override {
    if (server_) server_->Stop();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Starts the canned server; `handler` answers every request and each is recorded.
  void Serve(std::function<HttpResponse(const HttpRequest&)> handler, bool tcp = false) {
    net::HttpServerOptions opts;
    opts.unix_socket_path = socket_;
    if (tcp) opts.tcp_host = "127.0.0.1";
    auto s = net::StartHttpServer(opts, [this, handler](const HttpRequest& r) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(r);
      }
      return handler(r);
    });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }

  std::vector<HttpRequest> Requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

  // Runs `gpupool ARGS...` as main() does, with the client commands only.
  RunResult Run(std::vector<std::string> args, bool with_server_flag = true) {
    if (with_server_flag && !args.empty()) {
      // --server goes on the leaf subcommand, before its positionals.
      size_t at = 1;
      if (args[0] == "token" || args[0] == "node" || (args[0] == "limits" && args.size() > 1)) {
        at = 2;
      }
      args.insert(args.begin() + static_cast<std::ptrdiff_t>(at), {"--server", "unix:" + socket_});
    }
    CLI::App app{"gpupool"};
    app.require_subcommand(1);
    CommandContext ctx;
    std::ostringstream out, err;
    ClientEnvironment env;
    env.out = &out;
    env.err = &err;
    env.getenv = [this](const std::string& name) {
      auto it = env_.find(name);
      return it == env_.end() ? std::string() : it->second;
    };
    env.now_us = [] { return kNow; };
    env.cwd = [this] { return dir_.string(); };
    env.uid = 1000;
    env.log_wait_ms = 100;
    env.log_retry_pause_ms = 10;
    env.wait_poll_max_ms = 5;
    RegisterClientCommands(app, ctx, env);
    RunResult r;
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    try {
      app.parse(reversed);
      r.code = ctx.exit_code;
    } catch (const CLI::ParseError& e) {
      r.code = app.exit(e, out, err) == 0 ? 0 : 2;
    }
    r.out = out.str();
    r.err = err.str();
    return r;
  }

  std::string WriteScript(const std::string& name, const std::string& text, bool executable) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    chmod(path.c_str(), executable ? 0755 : 0644);
    return path;
  }

  std::filesystem::path dir_;
  std::string socket_;
  std::map<std::string, std::string> env_;
  std::unique_ptr<net::HttpServer> server_;
  std::mutex mu_;
  std::vector<HttpRequest> requests_;
};

}  // namespace gpupool::cli
