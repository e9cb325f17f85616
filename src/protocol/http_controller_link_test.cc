// The HTTP ControllerLink against a real HTTP server on a Unix socket: what goes on the
// wire is what the controller's side reads (paths, queries, the log answer), answers map
// to the link's error codes, and Shutdown cuts a long poll short.
#include "protocol/http_controller_link.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "net/http_server.h"

namespace gpupool::protocol {
namespace {

namespace fs = std::filesystem;

class HttpControllerLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "link_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    net::HttpServerOptions o;
    o.unix_socket_path = dir_ + "/c.sock";
    auto server = net::StartHttpServer(o, [this](const net::HttpRequest& r) {
      std::unique_lock lock(mu_);
      requests_.push_back(r);
      seen_.notify_all();
      if (hold_) released_.wait_for(lock, std::chrono::seconds(20), [this] { return !hold_; });
      return answer_;
    });
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    net::ServerAddress addr;
    addr.path = o.unix_socket_path;
    link_ = NewHttpControllerLink(net::HttpClient(addr, "t"));
  }
  void TearDown() override {
    {
      std::lock_guard lock(mu_);
      hold_ = false;
    }
    released_.notify_all();
    server_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Answer(int status, std::string body) {
    std::lock_guard lock(mu_);
    answer_.status = status;
    answer_.body = std::move(body);
  }
  net::HttpRequest Last() {
    std::lock_guard lock(mu_);
    return requests_.back();
  }

  std::string dir_;
  std::unique_ptr<net::HttpServer> server_;
  std::shared_ptr<ControllerLink> link_;
  std::mutex mu_;
  std::condition_variable seen_;
  std::condition_variable released_;
  bool hold_ = false;
  net::HttpResponse answer_;
  std::vector<net::HttpRequest> requests_;
};

// The answer to a log read is what the controller's DecodeLogAnswer reads back, whatever
// the node's name and the bytes hold.
TEST_F(HttpControllerLinkTest, ALogAnswerReadsBackAsSent) {
  Answer(200, R"({"ok": true})");
  LogAnswer a{"node one&two", 12, Status::Ok(), std::string("x\0y=&z", 6), 1234};
  ASSERT_TRUE(link_->AnswerLogRead(a).ok());
  net::HttpRequest r = Last();
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, kLogsPath);
  Result<LogAnswer> got = DecodeLogAnswer([&](const std::string& k) { return r.Query(k); }, r.body);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->node, a.node);
  EXPECT_EQ(got->id, 12);
  EXPECT_EQ(got->data, a.data);
  EXPECT_EQ(got->size, 1234);

  ASSERT_TRUE(link_->AnswerLogRead({"n", 13, Status::PermissionDenied("not a log"), "", 0}).ok());
  r = Last();
  EXPECT_EQ(r.Query("error"), "refused");
  EXPECT_EQ(r.body, "not a log");
}

TEST_F(HttpControllerLinkTest, EveryCallGoesToItsEndpoint) {
  Answer(200, R"({"protocol": "1.3", "address": "10.0.0.9"})");
  Result<RegistrationReply> reply = link_->Register(Registration{});
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->address, "10.0.0.9");
  EXPECT_EQ(reply->kill_wait_s, 0);  // a controller without the setting: the agent's own
  Answer(200, R"({"protocol": "1.3", "address": "10.0.0.9", "kill_wait_s": 45})");
  reply = link_->Register(Registration{});
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->kill_wait_s, 45);
  RegistrationReply sent;
  sent.kill_wait_s = 45;
  EXPECT_NE(DumpJson(EncodeRegistrationReply(sent)).find("\"kill_wait_s\":45"), std::string::npos);
  EXPECT_EQ(Last().path, kRegisterPath);
  Answer(200, "{}");
  ASSERT_TRUE(link_->PollWork("n 1", 250).ok());
  EXPECT_EQ(Last().path, kWorkPath);
  EXPECT_EQ(Last().Query("node"), "n 1");
  EXPECT_EQ(Last().Query("wait_ms"), "250");
  ASSERT_TRUE(link_->PostEvents(EventBatch{}).ok());
  EXPECT_EQ(Last().path, kEventsPath);
  ASSERT_TRUE(link_->PostTelemetry(TelemetryBatch{}).ok());
  EXPECT_EQ(Last().path, kTelemetryPath);
  ASSERT_TRUE(link_->TakeExecInput(77, "n", 5, 100).ok());
  EXPECT_EQ(Last().path, ExecInputPath(77));
  EXPECT_EQ(Last().Query("after"), "5");
  ASSERT_TRUE(link_->PostExecOutput(77, "n", ExecOutput{}, 100).ok());
  EXPECT_EQ(Last().path, ExecOutputPath(77));
}

// A controller that does not know the node (404) is told from one that is away (5xx,
// 429: try again) and from one that refused for good (any other answer).
TEST_F(HttpControllerLinkTest, AnswersMapToTheLinksErrors) {
  const std::pair<int, StatusCode> cases[] = {
      {404, StatusCode::kNotFound},          {503, StatusCode::kUnavailable},
      {429, StatusCode::kUnavailable},       {500, StatusCode::kUnavailable},
      {400, StatusCode::kInvalidArgument},   {403, StatusCode::kPermissionDenied},
      {409, StatusCode::kFailedPrecondition}};
  for (const auto& [http, code] : cases) {
    SCOPED_TRACE(http);
    Answer(http, R"({"error": "because"})");
    Result<Work> w = link_->PollWork("n", 0);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), code);
    EXPECT_EQ(w.status().message(), "controller answered " + std::to_string(http) + ": because");
  }
  Answer(200, "not json");
  EXPECT_EQ(link_->PostEvents(EventBatch{}).code(), StatusCode::kInvalidArgument);
}

// Stopping the agent does not wait for the controller to answer its long poll (it used
// to take up to the poll's 10 s, plus its 10 s of grace with a frozen controller), and
// every later call fails at once.
TEST_F(HttpControllerLinkTest, ShutdownCutsALongPollShort) {
  {
    std::lock_guard lock(mu_);
    hold_ = true;
  }
  Answer(200, "{}");
  std::thread poller([this] {
    const auto start = std::chrono::steady_clock::now();
    Result<Work> w = link_->PollWork("n", 10'000);
    EXPECT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), StatusCode::kUnavailable);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  });
  {
    std::unique_lock lock(mu_);
    EXPECT_TRUE(
        seen_.wait_for(lock, std::chrono::seconds(10), [this] { return !requests_.empty(); }));
  }
  link_->Shutdown();
  poller.join();
  EXPECT_EQ(link_->PostEvents(EventBatch{}).code(), StatusCode::kUnavailable);
}

// A controller that cannot talk to this agent's protocol refuses its registration with
// 409 and its version: the link answers a reply of that version, which the agent's check
// refuses for good. Another 409 stays an error worth another try; a refusal naming a
// version the agent could talk to is not taken for one.
TEST_F(HttpControllerLinkTest, ARegistrationRefusedForItsProtocolAnswersTheControllersVersion) {
  const Version far{kVersion.major + 1, 0};
  Answer(409, DumpJson(EncodeRegistrationRefusal(far, "too far apart")));
  Result<RegistrationReply> reply = link_->Register(Registration{});
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->version.major, far.major);
  EXPECT_EQ(reply->version.minor, far.minor);
  EXPECT_EQ(Last().path, kRegisterPath);

  Answer(409, R"({"error": "the lease was lost: controller c2 leads now"})");
  reply = link_->Register(Registration{});
  EXPECT_EQ(reply.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(reply.status().message(),
            "controller answered 409: the lease was lost: controller c2 leads now");

  Answer(409, DumpJson(EncodeRegistrationRefusal(kVersion, "refused")));
  EXPECT_EQ(link_->Register(Registration{}).status().code(), StatusCode::kFailedPrecondition);
}

// A registration refused because another agent runs the node is AlreadyExists, which the
// agent does not retry; the controller's words come with it.
TEST_F(HttpControllerLinkTest, ARegistrationRefusedForAnotherAgentIsAlreadyExists) {
  Answer(409, DumpJson(EncodeAgentIdRefusal("node n1 is run by another agent")));
  Result<RegistrationReply> reply = link_->Register(Registration{});
  EXPECT_EQ(reply.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(reply.status().message(), "controller answered 409: node n1 is run by another agent");
  EXPECT_FALSE(IsAgentIdRefusal(Json::parse(R"({"refused": "other"})")));
  EXPECT_FALSE(IsAgentIdRefusal(Json::parse(R"(["refused"])")));
}

}  // namespace
}  // namespace gpupool::protocol
