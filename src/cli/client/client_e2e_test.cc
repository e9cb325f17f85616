// End to end: the real commands, through the real HttpClient, against a real in-process
// HttpServer on a temporary Unix socket that plays a canned gpupool server.

#include "cli/client/client_e2e_test.h"

#include <gtest/gtest.h>

namespace gpupool::cli {
namespace {

using net::HttpRequest;
using net::HttpResponse;

TEST_F(ClientE2eTest, SubmitSendsTheRightBodyAndPrintsTheId) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 17}})"); });
  RunResult r = Run({"submit", "--gpu-share", "0.25", "--time", "90m", "--env", "A=1", "--",
                     "python", "-c", "print(1)", "--gpus", "9"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Submitted job 17\n");
  EXPECT_EQ(r.err, "");
  auto reqs = Requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].path, "/v1/jobs");
  // Every submission carries a fresh idempotency key (128 random bits in hex), last.
  const std::string key = SubmitKeyOf(reqs[0].body);
  EXPECT_EQ(key.size(), 32u) << reqs[0].body;
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos) << key;
  std::string body = reqs[0].body;
  const std::string field = R"(,"submit_key":")" + key + "\"";
  if (const size_t at = body.find(field); at != std::string::npos) body.erase(at, field.size());
  EXPECT_EQ(body, R"js({"command":["python","-c","print(1)","--gpus","9"],"env":{"A":"1"},)js"
                  R"("workdir":")" +
                      dir_.string() +
                      R"(","request":{"gpus":1,"gpu_milli":250,"cpu_milli":1000,"memory_bytes":0,)"
                      R"("tasks":1},"time_limit_s":5400,"output":"gpupool-%j.out"})");
}

// sbatch's words through the real command: a script's short options, --hold and
// --dependency with an array element, which is asked of the server before the submission.
TEST_F(ClientE2eTest, SubmitTakesSbatchsWordsAndAsksForAnElementsId) {
  Serve([](const HttpRequest& r) {
    if (r.method == "GET" && r.path == "/v1/jobs/12_3") {
      return JsonAnswer(200, R"({"job": {"id": 15, "array_id": 12, "array_index": 3}})");
    }
    if (r.method == "GET") return JsonAnswer(404, R"({"error": "array 12 has no element 9"})");
    return JsonAnswer(201, R"({"job": {"id": 17}})");
  });
  const std::string script = WriteScript("train.sh",
                                         "#!/bin/sh\n"
                                         "#GPUPOOL -J resnet -t 2:00:00 -c 4\n"
                                         "#GPUPOOL -d afterok:12_3\n"
                                         "exec true\n",
                                         true);
  RunResult r = Run({"submit", "-H", "-G", "1", "--dependency=afterany:11", "train.sh"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Submitted job 17\n");
  auto reqs = Requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].method + " " + reqs[0].path, "GET /v1/jobs/12_3");
  EXPECT_EQ(reqs[1].method + " " + reqs[1].path, "POST /v1/jobs");
  const std::string& body = reqs[1].body;
  EXPECT_NE(body.find(R"("name":"resnet")"), std::string::npos) << body;
  EXPECT_NE(body.find(R"("gpus":1,"gpu_milli":1000,"cpu_milli":4000)"), std::string::npos) << body;
  EXPECT_NE(body.find(R"("time_limit_s":7200,"hold":true,"dependencies":[)"
                      R"({"job_id":15,"kind":"after-ok"},{"job_id":11,"kind":"after-any"}])"),
            std::string::npos)
      << body;

  // An element the server does not know: its answer, named by the option, exit 3; nothing
  // is submitted.
  r = Run({"submit", "--after-ok", "12_9", "--", "true"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "gpupool: --after-ok 12_9: array 12 has no element 9\n");
  EXPECT_EQ(Requests().size(), 3u);
  // A partition is refused before anything is sent.
  r = Run({"submit", "-p", "gpu", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--partition gpu: gpupool has no partitions"), std::string::npos) << r.err;
  EXPECT_EQ(Requests().size(), 3u);
}

TEST_F(ClientE2eTest, SubmitOutlastsAServerThatIsBrieflyAwayAndKeepsItsKey) {
  // The server is briefly away: killed, it left its socket behind and nobody listens
  // there (connections are refused), and it comes back a little later. A socket that does
  // not exist at all fails at once instead (NoPoolTest in tests/cli/slurm_views_test.py).
  {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    ASSERT_LT(socket_.size(), sizeof addr.sun_path);
    std::memcpy(addr.sun_path, socket_.c_str(), socket_.size() + 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    close(fd);  // the file stays; nothing listens
  }
  std::thread late([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 21}})"); });
  });
  RunResult r = Run({"submit", "--", "true"});
  late.join();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Submitted job 21\n");
  ASSERT_EQ(Requests().size(), 1u);
  EXPECT_NE(Requests()[0].body.find("\"submit_key\":\""), std::string::npos);
  // Two submissions get two keys.
  ASSERT_EQ(Run({"submit", "--", "true"}).code, 0);
  ASSERT_EQ(Requests().size(), 2u);
  EXPECT_EQ(SubmitKeyOf(Requests()[1].body).size(), 32u);
  EXPECT_NE(SubmitKeyOf(Requests()[0].body), SubmitKeyOf(Requests()[1].body));
}

TEST_F(ClientE2eTest, SubmitJsonPrintsTheServersAnswer) {
  Serve(
      [](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 3, "z": 1, "a": 2}})"); });
  RunResult r = Run({"submit", "--json", "--", "true"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"job\": {\"id\": 3, \"z\": 1, \"a\": 2}}\n");
}

TEST_F(ClientE2eTest, SubmitAnswerWithoutAnIdIsAFailure) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {}})"); });
  RunResult r = Run({"submit", "--", "true"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gpupool: the server accepted the job but its answer has no job id\n");
  server_->Stop();
  server_.reset();
  Serve([](const HttpRequest&) { return JsonAnswer(201, "<html>not json</html>"); });
  r = Run({"submit", "--", "true"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("gpupool: the server's answer to POST /v1/jobs: invalid JSON"),
            std::string::npos)
      << r.err;
}

TEST_F(ClientE2eTest, SubmitScriptReadsDirectivesAndTheCommandLineWins) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 5}})"); });
  WriteScript("train.sh",
              "#!/bin/bash\n#GPUPOOL --gpus 2 --name fromscript\n#GPUPOOL --mem 1G\necho hi\n",
              true);
  RunResult r = Run({"submit", "--gpus", "4", "train.sh", "--lr", "0.1", "--gpus", "1"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Submitted job 5\n");
  auto reqs = Requests();
  ASSERT_EQ(reqs.size(), 1u);
  Json body = Json::parse(reqs[0].body);
  EXPECT_EQ(body["command"],
            Json::array({(dir_ / "train.sh").string(), "--lr", "0.1", "--gpus", "1"}));
  EXPECT_EQ(body["name"], "fromscript");
  EXPECT_EQ(body["request"]["gpus"], 4);
  EXPECT_EQ(body["request"]["memory_bytes"], 1u << 30);
}

TEST_F(ClientE2eTest, SubmitScriptProblemsAreUsageErrorsBeforeAnyRequest) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 5}})"); });
  WriteScript("noexec.sh", "#!/bin/sh\ntrue\n", false);
  RunResult r = Run({"submit", "noexec.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: script 'noexec.sh' is not executable: run chmod +x noexec.sh, or submit it "
            "as -- bash noexec.sh\n");
  r = Run({"submit", "missing.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("gpupool: script 'missing.sh': no such file; to run a program"),
            std::string::npos)
      << r.err;
  WriteScript("crlf.sh", "#!/bin/bash\r\n#GPUPOOL --gpus 1\r\necho crlf\r\n", true);
  r = Run({"submit", "crlf.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: script 'crlf.sh' has DOS line breaks (\\r\\n, line 1) where the shell "
            "expects Unix ones (\\n): convert it with dos2unix crlf.sh\n");
  WriteScript("bad.sh", "#!/bin/sh\n#GPUPOOL --gpus 2 --frobnicate\ntrue\n", true);
  r = Run({"submit", "bad.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("gpupool: bad.sh:2: #GPUPOOL line: "), std::string::npos) << r.err;
  WriteScript("share.sh", "#!/bin/sh\n#GPUPOOL --gpu-share 1.5\ntrue\n", true);
  r = Run({"submit", "share.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: share.sh:2: #GPUPOOL line: --gpu-share 1.5: a share must be in (0, 1]\n");
  r = Run({"submit", "--gpus", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("nothing to run"), std::string::npos);
  EXPECT_TRUE(Requests().empty());
}

TEST_F(ClientE2eTest, BadOptionValueIsExit2WithNoRequest) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 1}})"); });
  RunResult r = Run({"submit", "--gpu-share", "1.5", "--", "x"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gpupool: --gpu-share 1.5: a share must be in (0, 1]\n");
  EXPECT_EQ(Run({"submit", "--no-such-option", "--", "x"}).code, 2);
  EXPECT_EQ(Run({"show", "abc"}).code, 2);
  EXPECT_EQ(Run({"queue", "--state", "DONE"}).code, 2);
  EXPECT_EQ(Run({"usage", "--since", "last tuesday"}).code, 2);
  EXPECT_EQ(Run({"usage", "--by", "team"}).code, 2);
  EXPECT_EQ(Run({"token", "create", "--user", "a", "--kind", "admin"}).code, 2);
  EXPECT_TRUE(Requests().empty());
}

TEST_F(ClientE2eTest, ServerRefusalsMapToExitCodesWithTheServersMessage) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/jobs/99") return JsonAnswer(404, R"({"error": "no job 99"})");
    if (r.path == "/v1/jobs/7") return JsonAnswer(403, R"({"error": "job 7 belongs to bob"})");
    if (r.path == "/v1/tokens") return JsonAnswer(401, R"({"error": "no token given"})");
    if (r.path == "/v1/jobs") return JsonAnswer(400, R"({"error": "request.gpus: too many"})");
    return JsonAnswer(500, R"({"error": "database is locked"})");
  });
  RunResult r = Run({"show", "99"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "gpupool: no job 99\n");
  EXPECT_EQ(r.out, "");
  r = Run({"show", "7", "--json"});
  EXPECT_EQ(r.code, 4);
  EXPECT_EQ(r.err, "gpupool: job 7 belongs to bob\n");
  EXPECT_EQ(Run({"token", "list"}).code, 4);
  r = Run({"submit", "--", "x"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gpupool: request.gpus: too many\n");
  r = Run({"nodes"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gpupool: database is locked\n");
}

TEST_F(ClientE2eTest, NoServerIsExit5) {
  RunResult r = Run({"queue"});  // nothing listens on the socket
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.err.find("gpupool: cannot reach the gpupool server at unix:"), std::string::npos)
      << r.err;
  env_["GPUPOOL_SERVER"] = "unix:" + (dir_ / "elsewhere.sock").string();
  r = Run({"whoami"}, /*with_server_flag=*/false);
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.err.find("elsewhere.sock"), std::string::npos) << r.err;
  // A list: every controller is named with why it gave no answer.
  env_["GPUPOOL_SERVER"] = "unix:" + (dir_ / "c1.sock").string() + ", unix:" + socket_;
  r = Run({"whoami"}, /*with_server_flag=*/false);
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.err.find("c1.sock (cannot connect"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(socket_ + " (cannot connect"), std::string::npos) << r.err;
}

// Several controllers: the first is down, the second a standby that knows no leader for a
// while (a takeover) and then names it. The submission's retries ride over the takeover
// with one submit_key and end at the leader.
TEST_F(ClientE2eTest, ServerListFindsTheLeaderAndSubmitRidesOverATakeover) {
  const std::string leader_socket = (dir_ / "leader.sock").string();
  std::mutex leader_mu;
  std::vector<std::string> leader_bodies;
  net::HttpServerOptions opts;
  opts.unix_socket_path = leader_socket;
  auto leader = net::StartHttpServer(opts, [&](const HttpRequest& r) {
    std::lock_guard<std::mutex> lock(leader_mu);
    leader_bodies.push_back(r.body);
    return JsonAnswer(201, R"({"job": {"id": 21}})");
  });
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  std::atomic<int> standby_answers{0};
  Serve([&](const HttpRequest&) {
    const std::string known = ++standby_answers <= 2 ? "" : "unix:" + leader_socket;
    return JsonAnswer(503, Json{{"error", "this controller is a standby; the leader is " + known},
                                {"leader", known}}
                               .dump());
  });
  env_["GPUPOOL_SERVER"] = "unix:" + (dir_ / "down.sock").string() + ",unix:" + socket_;
  RunResult r = Run({"submit", "--", "true"}, /*with_server_flag=*/false);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Submitted job 21\n");
  (*leader)->Stop();  // its handler's state lives on this stack
  server_->Stop();
  std::vector<HttpRequest> at_standby = Requests();
  ASSERT_EQ(at_standby.size(), 3u);
  ASSERT_EQ(leader_bodies.size(), 1u);
  const std::string key = SubmitKeyOf(leader_bodies[0]);
  EXPECT_EQ(key.size(), 32u);
  for (const HttpRequest& q : at_standby) EXPECT_EQ(SubmitKeyOf(q.body), key);
}

TEST_F(ClientE2eTest, EnvironmentChoosesServerAndTokenAndFlagsOverrideIt) {
  Serve(
      [](const HttpRequest& r) {
        return JsonAnswer(200, Json{{"user", "alice"},
                                    {"uid", 1000},
                                    {"admin", false},
                                    {"auth", r.Header("authorization")}}
                                   .dump());
      },
      /*tcp=*/true);
  env_["GPUPOOL_SERVER"] = "http://127.0.0.1:" + std::to_string(server_->tcp_port());
  env_["GPUPOOL_TOKEN"] = "gpt_env";
  RunResult r = Run({"whoami"}, false);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "alice (uid 1000)\n");
  r = Run({"whoami", "--json", "--token", "gpt_flag"}, false);
  EXPECT_NE(r.out.find("Bearer gpt_flag"), std::string::npos) << r.out;
  env_["GPUPOOL_SERVER"] = "unix:/nonexistent/x.sock";
  r = Run({"whoami"});  // --server unix:<the canned socket> wins over the environment
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(ClientE2eTest, QueueSendsFiltersAndRendersTheTable) {
  Serve([](const HttpRequest&) {
    return JsonAnswer(200, R"({"jobs": [{"id": 4, "user": "bob", "name": "n", "state":
      "PENDING", "request": {"gpus": 1, "gpu_milli": 500}, "submit_time_us": 1793491140000000,
      "pending_reason": "no idle GPU"}]})");
  });
  // -a is --all, as docs/slurm.md maps squeue -a (QueueAllAsAUser... runs --all itself).
  RunResult r = Run({"queue", "-a", "--user", "bob", "--state", "pending,Running"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "ID  USER  NAME  STATE    GPUS  NODES   TIME  REASON\n"
            " 4  bob   n     PENDING   0.5  -      1m00s  no idle GPU\n");
  r = Run({"queue"});
  auto reqs = Requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].path, "/v1/jobs");
  EXPECT_EQ(reqs[0].Query("state"), "PENDING,RUNNING");
  EXPECT_EQ(reqs[0].Query("all"), "1");
  EXPECT_EQ(reqs[0].Query("user"), "bob");
  EXPECT_EQ(reqs[0].Query("active"), "");
  EXPECT_EQ(reqs[1].Query("active"), "1");
  EXPECT_EQ(reqs[1].Query("all"), "");
}

// Issue 15 A.5: "queue --all from a non-admin silently shows only their own jobs".
TEST_F(ClientE2eTest, QueueAllAsAUserSaysTheJobsAreTheirOwn) {
  Serve([](const HttpRequest&) { return JsonAnswer(200, R"({"jobs": [], "all_refused": true})"); });
  RunResult r = Run({"queue", "--all"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "gpupool: --all lists everyone's jobs for admins only; these are your own\n");
}

TEST_F(ClientE2eTest, CancelReportsEachAndFailsIfAnyFailed) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/jobs/1/cancel") return JsonAnswer(200, R"({"job": {"state": "CANCELLED"}})");
    if (r.path == "/v1/jobs/2/cancel") return JsonAnswer(200, R"({"job": {"state": "RUNNING"}})");
    return JsonAnswer(409, R"js({"error": "job 3 has already ended (SUCCEEDED)"})js");
  });
  RunResult r = Run({"cancel", "1", "3", "2"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "Cancelled job 1\nCancelling job 2 (RUNNING; it is being stopped)\n");
  EXPECT_EQ(r.err, "gpupool: job 3 has already ended (SUCCEEDED)\n");  // its id once
  EXPECT_EQ(Requests().size(), 3u);
  r = Run({"cancel", "1", "2"});
  EXPECT_EQ(r.code, 0) << r.err;
}

// A job whose stdout grows in three pieces, one more each time the client has read all.
// With `headers`, answers carry X-Gpupool-Next-Offset and, at the end, X-Gpupool-Eof and
// the job never reports an end state (so only the header can stop the client); without,
// the job reports SUCCEEDED once the last piece is out.
class LogServer {
 public:
  explicit LogServer(bool headers) : headers_(headers) {}
  HttpResponse operator()(const HttpRequest& r) {
    std::lock_guard<std::mutex> lock(mu_);
    if (r.path == "/v1/jobs/8") {
      const bool ended = !headers_ && served_ == kPieces.size();
      return JsonAnswer(
          200, ended ? R"({"job": {"state": "SUCCEEDED"}})" : R"({"job": {"state": "RUNNING"}})");
    }
    HttpResponse resp;
    resp.content_type = "text/plain";
    const auto offset = static_cast<size_t>(std::stoll(r.Query("offset", "0")));
    offsets_.push_back(offset);
    std::string all;
    for (size_t i = 0; i < served_; ++i) all += kPieces[i];
    if (offset >= all.size() && served_ < kPieces.size()) all += kPieces[served_++];
    resp.body = offset < all.size() ? all.substr(offset) : "";
    if (headers_) {
      resp.headers["X-Gpupool-Next-Offset"] = std::to_string(offset + resp.body.size());
      if (served_ == kPieces.size() && offset + resp.body.size() == all.size()) {
        resp.headers["X-Gpupool-Eof"] = "1";
      }
    }
    return resp;
  }
  std::vector<size_t> offsets() {
    std::lock_guard<std::mutex> lock(mu_);
    return offsets_;
  }
  inline static const std::vector<std::string> kPieces = {"epoch 1\n", "epoch 2\n", "done\n"};

 private:
  bool headers_;
  std::mutex mu_;
  size_t served_ = 0;
  std::vector<size_t> offsets_;
};

TEST_F(ClientE2eTest, LogsFollowReadsOffsetsUntilTheEofHeader) {
  auto logs = std::make_shared<LogServer>(true);
  Serve([logs](const HttpRequest& r) { return (*logs)(r); });
  {
    // The header path needs net::HttpClient to hand back response headers.
    net::HttpClient probe(net::ParseServerAddress("unix:" + socket_).value());
    auto resp = probe.Get("/v1/jobs/9/logs?offset=0");
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    ASSERT_FALSE(resp->headers.empty());
  }
  auto logs2 = std::make_shared<LogServer>(true);
  server_->Stop();
  server_.reset();
  Serve([logs2](const HttpRequest& r) { return (*logs2)(r); });
  RunResult r = Run({"logs", "8", "-f"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "epoch 1\nepoch 2\ndone\n");
  EXPECT_EQ(logs2->offsets(), (std::vector<size_t>{0, 8, 16}));
  for (const auto& req : Requests()) {
    if (req.path == "/v1/jobs/8/logs") {
      EXPECT_EQ(req.Query("wait_ms"), "100");
      EXPECT_EQ(req.Query("stream"), "stdout");
    }
  }
}

TEST_F(ClientE2eTest, LogsFollowWithoutHeadersEndsWithTheJob) {
  auto logs = std::make_shared<LogServer>(false);
  Serve([logs](const HttpRequest& r) { return (*logs)(r); });
  RunResult r = Run({"logs", "8", "--follow"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "epoch 1\nepoch 2\ndone\n");
  // Offsets advance by what was read; after the job ended, one last read, then stop.
  EXPECT_EQ(logs->offsets(), (std::vector<size_t>{0, 8, 16, 21, 21}));
}

TEST_F(ClientE2eTest, LogsWithoutFollowPrintsWhatIsThereAndStops) {
  Serve([](const HttpRequest& r) {
    HttpResponse resp;
    resp.content_type = "text/plain";
    const std::string all = "err line\n";
    const auto offset = static_cast<size_t>(std::stoll(r.Query("offset", "0")));
    resp.body = offset < all.size() ? all.substr(offset) : "";
    EXPECT_EQ(r.Query("stream"), "stderr");
    EXPECT_EQ(r.Query("wait_ms"), "");
    return resp;
  });
  RunResult r = Run({"logs", "8", "--stderr"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "err line\n");
}

// Issue 25: bytes of an ended job's log that the server could not get from the node are
// a 503 (never an early end): `logs` asks again, and prints the whole log.
TEST_F(ClientE2eTest, LogsAsksAgainForBytesTheServerCouldNotGetNow) {
  auto offsets = std::make_shared<std::vector<std::string>>();
  auto mu = std::make_shared<std::mutex>();
  Serve([offsets, mu](const HttpRequest& r) {
    std::lock_guard<std::mutex> lock(*mu);
    const std::string all = "rank 0\nrank 1\n";
    const std::string offset = r.Query("offset", "0");
    offsets->push_back(offset);
    const size_t busy = static_cast<size_t>(std::count(offsets->begin(), offsets->end(), "7"));
    if (offset == "7" && busy <= 2) {
      return JsonAnswer(503,
                        R"({"error": "cannot read the log '/s/jobs/1/stdout.log' from byte 7: )"
                        R"(node n2 did not send the log within 5000 ms, and this machine )"
                        R"(has no copy; try again"})");
    }
    HttpResponse resp;
    resp.content_type = "text/plain";
    const size_t from = static_cast<size_t>(std::stoll(offset));
    resp.body = all.substr(from, 7);
    resp.headers["X-Gpupool-Next-Offset"] = std::to_string(from + resp.body.size());
    resp.headers["X-Gpupool-Eof"] = from + resp.body.size() == all.size() ? "1" : "0";
    return resp;
  });
  RunResult r = Run({"logs", "8", "--task", "2"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "rank 0\nrank 1\n");
  EXPECT_EQ(*offsets, (std::vector<std::string>{"0", "7", "7", "7"}));
}

TEST_F(ClientE2eTest, LogsThatStayUnreadableFailSayingWhy) {
  Serve([](const HttpRequest& r) {
    if (r.Query("offset", "0") != "0") {
      return JsonAnswer(503, R"({"error": "cannot read the log: node n2 is down, and this )"
                             R"(machine has no copy; try again"})");
    }
    HttpResponse resp;
    resp.content_type = "text/plain";
    resp.body = "rank 0\n";
    resp.headers["X-Gpupool-Next-Offset"] = "7";
    resp.headers["X-Gpupool-Eof"] = "0";
    return resp;
  });
  RunResult r = Run({"logs", "8"});
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.out, "rank 0\n");  // what could be read, then the failure, not an early end
  EXPECT_NE(r.err.find("node n2 is down"), std::string::npos) << r.err;
}

TEST_F(ClientE2eTest, LogsOfSomeoneElsesJobIsExit4) {
  Serve([](const HttpRequest&) {
    return JsonAnswer(403, R"({"error": "the logs of job 8 are readable by its owner only"})");
  });
  RunResult r = Run({"logs", "8"});
  EXPECT_EQ(r.code, 4);
  EXPECT_EQ(r.err, "gpupool: the logs of job 8 are readable by its owner only\n");
}

TEST_F(ClientE2eTest, ArraysAreSubmittedAndCancelledWholeOrByElement) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/jobs") {
      return JsonAnswer(201, R"({"job": {"id": 12, "array_id": 12, "array": "0-99%10"}})");
    }
    if (r.path == "/v1/jobs/12/cancel") {
      return JsonAnswer(200, R"({"job": {"state": "SUCCEEDED"}, "array_cancelled": 97,
        "array": {"id": 12, "elements": 100, "queued": 90, "running": 7}})");
    }
    if (r.path == "/v1/jobs/13/cancel") {  // a server older than the "array" field
      return JsonAnswer(200, R"({"job": {"state": "CANCELLED"}, "array_cancelled": 1})");
    }
    return JsonAnswer(200, R"({"job": {"state": "CANCELLED"}})");
  });
  RunResult r = Run({"submit", "--array", "0-99%10", "--", "true"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Submitted array job 12 (0-99%10; element N is 12_N)\n");
  EXPECT_NE(Requests()[0].body.find(R"("array":"0-99%10")"), std::string::npos);
  // The size is the server's to bound (its max-array-size); the form is checked here.
  r = Run({"submit", "--array", "0-2000000", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--array 0-2000000: '0-2000000' is not an index or a range LOW-HIGH of "
                       "0..1000000"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(Requests().size(), 1u);  // refused before any request
  r = Run({"cancel", "12_5", "12", "13", "12_[7-8,10%2]"});
  EXPECT_EQ(r.code, 0) << r.err;
  // Issue 25.6: how many elements were cancelled in which state, not one ambiguous count.
  EXPECT_EQ(r.out,
            "Cancelled job 12_5\n"
            "Cancelled array 12: 90 queued and 7 running elements (the running ones are being "
            "stopped; 3 had already ended)\n"
            "Cancelled array 13 (1 element still queued or running)\n"
            "Cancelled job 12_7\nCancelled job 12_8\nCancelled job 12_10\n");
  std::vector<std::string> paths;
  for (size_t i = 1; i < Requests().size(); ++i) paths.push_back(Requests()[i].path);
  EXPECT_EQ(paths, (std::vector<std::string>{"/v1/jobs/12_5/cancel", "/v1/jobs/12/cancel",
                                             "/v1/jobs/13/cancel", "/v1/jobs/12_7/cancel",
                                             "/v1/jobs/12_8/cancel", "/v1/jobs/12_10/cancel"}));
  for (const char* bad :
       {"12_x", "12_", "_5", "12_-1", "12_[x]", "12_[3-1]", "12_[1-2", "12_5_6"}) {
    r = Run({"cancel", bad});
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find(std::string("job id '") + bad + "'"), std::string::npos) << r.err;
  }
  EXPECT_EQ(Requests().size(), 7u);  // refused before any request
}

// Issue 25.6: every command that takes a job id takes an array element as `gpupool queue`
// prints it, ARRAY_INDEX, and the server's answer for one the array lacks is shown.
TEST_F(ClientE2eTest, EveryJobCommandTakesAnArrayElementAsQueuePrintsIt) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/jobs/12_3") {
      return JsonAnswer(200, R"({"job": {"id": 15, "state": "SUCCEEDED", "array_id": 12,
        "array_index": 3, "array": "0-4"}})");
    }
    if (r.path == "/v1/jobs/15/logs") {
      HttpResponse resp;
      resp.content_type = "text/plain";
      resp.body = "element 3\n";
      resp.headers["X-Gpupool-Next-Offset"] = "10";
      resp.headers["X-Gpupool-Eof"] = "1";
      return resp;
    }
    if (r.path == "/v1/jobs/12_4/exec") return JsonAnswer(404, R"({"error": "stop here"})");
    if (r.path == "/v1/jobs/12_3/hold" || r.path == "/v1/jobs/12_4/release") {
      return JsonAnswer(200, R"({"job": {"state": "PENDING"}})");
    }
    return JsonAnswer(
        404, R"js({"error": "array 12 has no element 9 (it was submitted with --array 0-4)"})js");
  });
  RunResult r = Run({"show", "12_3"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("element 3 of array 12 (0-4)"), std::string::npos) << r.out;
  r = Run({"logs", "12_3"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "element 3\n");
  r = Run({"hold", "12_3"});
  EXPECT_EQ(r.out, "Held job 12_3\n") << r.err;
  r = Run({"release", "12_4"});
  EXPECT_EQ(r.out, "Released job 12_4\n") << r.err;
  r = Run({"exec", "--job", "12_4", "--", "true"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "gpupool: stop here\n");
  std::vector<std::string> paths;
  for (const HttpRequest& q : Requests()) paths.push_back(q.method + " " + q.path);
  EXPECT_EQ(paths,
            (std::vector<std::string>{"GET /v1/jobs/12_3", "GET /v1/jobs/12_3",
                                      "GET /v1/jobs/15/logs", "POST /v1/jobs/12_3/hold",
                                      "POST /v1/jobs/12_4/release", "POST /v1/jobs/12_4/exec"}));
  for (const char* cmd : {"show", "logs"}) {
    r = Run({cmd, "12_9"});
    EXPECT_EQ(r.code, 3) << cmd;
    EXPECT_EQ(r.err, "gpupool: array 12 has no element 9 (it was submitted with --array 0-4)\n");
  }
  r = Run({"cancel", "12_9"});
  EXPECT_EQ(r.code, 3);  // as show and logs say it (MissingElements)
  EXPECT_EQ(r.err, "gpupool: array 12 has no element 9 (it was submitted with --array 0-4)\n");
  // A range names several jobs: the commands that take one say so.
  r = Run({"show", "12_[1-3]"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: job id '12_[1-3]': name one element of array 12, e.g. 12_0 (cancel, hold "
            "and release take several)\n");
  r = Run({"logs", "x_1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: job id 'x_1': a job id is a positive whole number, e.g. 17, or "
            "ARRAY_INDEX for an element of an array, e.g. 17_3\n");
}

TEST_F(ClientE2eTest, HoldAndReleaseEachJobAndFailIfAnyFailed) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/jobs/7/hold" || r.path == "/v1/jobs/7/release") {
      return JsonAnswer(200, R"({"job": {"id": 7, "state": "PENDING"}})");
    }
    return JsonAnswer(409, R"({"error": "job 8 is RUNNING; only pending jobs are held"})");
  });
  RunResult r = Run({"hold", "7", "8"});
  EXPECT_EQ(r.code, 1);  // 409, as for cancel
  EXPECT_EQ(r.out, "Held job 7\n");
  EXPECT_EQ(r.err, "gpupool: job 8 is RUNNING; only pending jobs are held\n");
  r = Run({"release", "7"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Released job 7\n");
  ASSERT_EQ(Requests().size(), 3u);
  EXPECT_EQ(Requests()[1].path, "/v1/jobs/8/hold");
  EXPECT_EQ(Requests()[2].method, "POST");
  EXPECT_EQ(Run({"hold", "x7"}).code, 2);
}

// Releasing a job that is not held (or holding a held one) changes nothing: the client
// says so plainly, with the job's state, and exits 0 as for a no-op; it printed
// "Released job 9".
TEST_F(ClientE2eTest, ReleasingAJobNotHeldSaysSoPlainly) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/jobs/9/release") {
      return JsonAnswer(200, R"({"job": {"id": 9, "state": "PENDING"}, "changed": false})");
    }
    return JsonAnswer(200, R"({"job": {"id": 9, "state": "PENDING", "held_by": "alice"},
                               "changed": false})");
  });
  RunResult r = Run({"release", "9"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "gpupool: job 9 is not held (PENDING); nothing to release\n");
  r = Run({"hold", "9"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "gpupool: job 9 is held already (PENDING, held by alice); nothing to hold\n");
}

TEST_F(ClientE2eTest, NodeDrainNeedsAReasonAndSaysWhatTheNodeDoesNow) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/nodes/n1/drain") {
      return JsonAnswer(200, R"js({"node": {"name": "n1", "state": "draining",
        "running_jobs": 2, "drain_reason": "fans (root)"}})js");
    }
    if (r.path == "/v1/nodes/n1/resume") {
      return JsonAnswer(200, R"({"node": {"name": "n1", "state": "up", "running_jobs": 2}})");
    }
    return JsonAnswer(403, R"({"error": "only admins drain and resume nodes"})");
  });
  RunResult r = Run({"node", "drain", "n1"});
  EXPECT_EQ(r.code, 2);  // --reason is required
  EXPECT_TRUE(Requests().empty());
  r = Run({"node", "drain", "n1", "--reason", "fans"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "node n1 draining: 2 jobs still run there; nothing new starts (`gpupool node resume "
            "n1` undoes it)\n");
  ASSERT_EQ(Requests().size(), 1u);
  EXPECT_EQ(Requests()[0].method, "POST");
  EXPECT_EQ(Json::parse(Requests()[0].body), Json({{"reason", "fans"}}));
  r = Run({"node", "resume", "n1"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "node n1 up: new jobs start there again\n");
  r = Run({"node", "drain", "n2", "--reason", "x"});
  EXPECT_EQ(r.code, 4);
  EXPECT_NE(r.err.find("only admins drain and resume nodes"), std::string::npos) << r.err;
  // A name is sent as given, escaped: `%6e1` is not n1, nor is `n1?x=1` (found by testing
  // as an operator: both drained n1).
  for (const std::string name : {"%6e1", "n1?x=1", "n1/drain#"}) {
    const size_t before = Requests().size();
    r = Run({"node", "drain", name, "--reason", "x"});
    EXPECT_NE(r.code, 0) << name;
    ASSERT_EQ(Requests().size(), before + 1) << name;
    EXPECT_NE(Requests().back().path, "/v1/nodes/n1/drain") << name;
  }
}

TEST_F(ClientE2eTest, NodesUsageTokensRenderAndSendTheirQueries) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/nodes") {
      return JsonAnswer(200, R"({"nodes": [{"name": "n1", "state": "up", "running_jobs": 1,
        "last_heartbeat_us": 1793491199000000,
        "gpus": [{"name": "H100", "allocated_milli": 250}]}]})");
    }
    if (r.path == "/v1/usage") {
      return JsonAnswer(200, Json{{"since_us", std::stoll(r.Query("since_us", "0"))},
                                  {"until_us", kNow},
                                  {"by", r.Query("by", "user")},
                                  {"rows", Json::array()}}
                                 .dump());
    }
    if (r.method == "POST" && r.path == "/v1/tokens") {
      return JsonAnswer(201, R"({"token": "gpt_secret", "user": "alice", "kind": "user"})");
    }
    if (r.method == "DELETE" && r.path == "/v1/tokens/0123456789ab") {
      return JsonAnswer(200,
                        R"({"revoked": {"id": "0123456789ab", "user": "gpu7", "kind": "node"}})");
    }
    if (r.method == "DELETE") {
      return JsonAnswer(404, R"({"error": "no token has the id abc: see `gpupool token list`"})");
    }
    return JsonAnswer(404, R"({"error": "no route"})");
  });
  RunResult r = Run({"nodes"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "NODE  STATE  ADDRESS    GPUS  CPUS       MEMORY  RUNNING    SEEN  MODELS\n"
            "n1    up     -        0.25/1   0/0  0.0/0.0 GiB        1  1s ago  1x H100\n");
  r = Run({"usage", "--since", "2026-10-01", "--by", "project"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "GPU-hours allocated from 2026-10-01T00:00:00Z to 2026-11-01T00:00:00Z, by project\n"
            "PROJECT  GPU-HOURS  JOBS\n"
            "TOTAL         0.00     0\n");
  r = Run({"token", "create", "--user", "alice"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "gpt_secret\n");
  EXPECT_NE(r.err.find("shown only this once"), std::string::npos);
  auto reqs = Requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[1].Query("since_us"), "1790812800000000");
  EXPECT_EQ(reqs[1].Query("by"), "project");
  EXPECT_EQ(reqs[1].Query("until_us"), "");
  EXPECT_EQ(reqs[2].body, R"({"user":"alice","kind":"user"})");

  r = Run({"token", "create", "--user", "prom", "--kind", "metrics", "--expires", "90d"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Requests().back().body, R"({"user":"prom","kind":"metrics","expires_in_s":7776000})");
  for (const char* bad : {"90", "soon", "0s"}) {
    r = Run({"token", "create", "--user", "prom", "--expires", bad});
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("--expires " + std::string(bad) + ": give how long"), std::string::npos)
        << r.err;
  }
  r = Run({"token", "create", "--user", "x", "--kind", "root"});
  EXPECT_NE(r.err.find("use user, node or metrics"), std::string::npos) << r.err;
  EXPECT_EQ(Requests().size(), 4u);  // refused before any request

  r = Run({"token", "revoke", "0123456789ab"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "revoked node token 0123456789ab of gpu7\n");
  EXPECT_EQ(Requests().back().method, "DELETE");
  r = Run({"token", "revoke", "abc"});
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.err, "gpupool: no token has the id abc: see `gpupool token list`\n");
}

}  // namespace
}  // namespace gpupool::cli
