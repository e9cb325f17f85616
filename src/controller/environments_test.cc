#include "controller/environments.h"

#include <gtest/gtest.h>

#include <set>

#include "common/clock.h"
#include "controller/api.h"
#include "controller/controller.h"
#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

using jobs::Job;
using jobs::JobState;

// Images and directories known to the test, with what they need.
class TableInspector final : public EnvInspector {
 public:
  Result<jobs::EnvNeeds> InspectImage(const std::string& ref) override {
    ++image_calls;
    auto it = images.find(ref);
    if (it == images.end()) return Status::NotFound("image '" + ref + "' is not here");
    return it->second;
  }
  Result<std::string> ImageId(const std::string& ref) override {
    if (!images.contains(ref)) return Status::NotFound("image '" + ref + "' is not here");
    auto it = ids.find(ref);
    return it == ids.end() ? "id-of-" + ref : it->second;
  }
  Result<DirInspection> InspectDir(const std::string& dir, const DirReader& reader) override {
    readers.push_back(reader);
    auto it = dirs.find(dir);
    if (it == dirs.end()) return Status::NotFound("'" + dir + "' does not exist");
    if (!reader.as_root && private_dirs.contains(dir)) {
      return Status::PermissionDenied("'" + dir + "' is not readable by user " + reader.user);
    }
    return DirInspection{it->second, Digest(dir)};
  }
  Result<std::string> DigestDir(const std::string& dir) override {
    if (!dirs.contains(dir)) return Status::NotFound("'" + dir + "' does not exist");
    return Digest(dir);
  }
  std::string Digest(const std::string& dir) {
    return "sha256:" + dir + "@" + std::to_string(changes[dir]);
  }
  std::map<std::string, jobs::EnvNeeds> images;
  std::map<std::string, std::string> ids;  // ref -> id (default "id-of-REF")
  std::map<std::string, jobs::EnvNeeds> dirs;
  std::set<std::string> private_dirs;  // readable only as root
  std::map<std::string, int> changes;  // dir -> how often it changed
  std::vector<DirReader> readers;
  int image_calls = 0;
};

jobs::EnvNeeds Cuda(const std::string& source, const std::string& cuda,
                    const std::string& min_driver, std::vector<std::string> sass) {
  jobs::EnvNeeds n;
  n.source = source;
  n.cuda = cuda;
  n.min_driver = min_driver;
  n.sass = std::move(sass);
  return n;
}

protocol::Registration Reg(const std::string& name, gpu::NodeInfo info) {
  protocol::Registration r;
  r.node = name;
  r.info = std::move(info);
  r.cpu_milli = 8000;
  r.memory_mib = 8192;
  return r;
}

gpu::NodeInfo Node(const std::string& host, const std::string& driver, const std::string& cuda,
                   int cap_major) {
  gpu::NodeInfo n;
  n.hostname = host;
  n.nvidia = gpu::DriverInfo{driver, cuda, {}, {}};
  for (int i = 0; i < 2; ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = i;
    g.name = cap_major >= 9 ? "NVIDIA H100 80GB HBM3" : "NVIDIA A100-SXM4-80GB";
    g.uuid = "GPU-" + host + "-" + std::to_string(i);
    g.memory_total_bytes = uint64_t{80} << 30;
    g.compute_capability = gpu::ComputeCapability{cap_major, 0};
    n.gpus.push_back(g);
  }
  return n;
}

class EnvironmentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    controller_ = Controller::Create(store_.get(), &clock_, {}).value();
    inspector_.images["localhost/cuda124:1"] =
        Cuda("image localhost/cuda124:1 (abc)", "12.4", "550.54.14", {"sm_80", "sm_90"});
    inspector_.images["localhost/hopper:1"] =
        Cuda("image localhost/hopper:1 (def)", "12.2", "535.54.03", {"sm_90a"});
    inspector_.images["localhost/cuda99:1"] =
        Cuda("image localhost/cuda99:1 (999)", "13.0", "580.65.06", {"sm_80"});
    inspector_.dirs["/opt/envs/torch-1.13"] =
        Cuda("directory /opt/envs/torch-1.13", "11.7", "515.43.04", {"sm_80"});
    envs_ = std::make_unique<Environments>(store_.get(), &inspector_, &clock_);
    alice_ = {"alice", 1000, 1000, false};
    bob_ = {"bob", 1001, 1001, false};
    admin_ = {"root", 0, 0, true};
  }
  // old: driver 535 (CUDA 12.2), A100; new: driver 550 (CUDA 12.4), H100.
  void TwoNodes() {
    ASSERT_TRUE(
        controller_->RegisterNode(Reg("old", Node("old", "535.104.05", "12.2", 8)), "").ok());
    ASSERT_TRUE(
        controller_->RegisterNode(Reg("new", Node("new", "550.54.15", "12.4", 9)), "").ok());
  }
  Job ImageJob(const std::string& image) {
    Job j;
    j.command = {"python3", "train.py"};
    j.image = image;
    j.request.gpus = 1;
    j.request.cpu_milli = 100;
    return j;
  }

  ManualClock clock_{1'700'000'000'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> controller_;
  TableInspector inspector_;
  std::unique_ptr<Environments> envs_;
  Caller alice_;
  Caller bob_;
  Caller admin_;
};

TEST_F(EnvironmentsTest, ParseEnvRef) {
  auto ok = ParseEnvRef("torch:2.4", "environment");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->first, "torch");
  EXPECT_EQ(ok->second, "2.4");
  for (const char* bad : {"torch", "torch:", ":2", "to rch:1", "torch:2/4", "-x:1"}) {
    Result<std::pair<std::string, std::string>> r = ParseEnvRef(bad, "environment");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("is not NAME:VERSION"), std::string::npos);
  }
}

TEST_F(EnvironmentsTest, ParseEnvRefTakesOneProtectedPrefix) {
  auto site = ParseEnvRef("site/torch:2.4", "environment");
  ASSERT_TRUE(site.ok()) << site.status().ToString();
  EXPECT_EQ(site->first, "site/torch");
  EXPECT_EQ(site->second, "2.4");
  for (const char* bad : {"a/b/c:1", "/torch:1", "site/:1", "site//torch:1", "-s/torch:1"}) {
    EXPECT_FALSE(ParseEnvRef(bad, "environment").ok()) << bad;
  }
}

TEST_F(EnvironmentsTest, NameBelongsToWhoeverAddedItFirst) {
  ASSERT_TRUE(envs_->Add("torch:1.13", "dir", "/opt/envs/torch-1.13", bob_).ok());
  Status theft = envs_->Add("torch:2.5", "image", "localhost/cuda124:1", alice_).status();
  ASSERT_EQ(theft.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(theft.message().find("environment name torch belongs to bob (who added torch:1.13)"),
            std::string::npos)
      << theft.message();
  EXPECT_NE(theft.message().find("e.g. alice-torch:2.5"), std::string::npos) << theft.message();
  // Admins do not add versions of a user's name either; the owner does.
  EXPECT_EQ(envs_->Add("torch:2.6", "image", "localhost/cuda124:1", admin_).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(envs_->Add("torch:2.5", "image", "localhost/cuda124:1", bob_).ok());
  EXPECT_EQ(envs_->List()->size(), 2u);
}

TEST_F(EnvironmentsTest, ProtectedSiteNamesAreForAdminsOnly) {
  Status s = envs_->Add("site/torch:2.4", "image", "localhost/cuda124:1", alice_).status();
  ASSERT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("protected site name"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("e.g. torch:2.4"), std::string::npos) << s.message();
  ASSERT_TRUE(envs_->Add("site/torch:2.4", "image", "localhost/cuda124:1", admin_).ok());
  Caller ops{"ops", 1500, 1500, true};  // any admin adds versions of a site name
  EXPECT_TRUE(envs_->Add("site/torch:2.5", "image", "localhost/hopper:1", ops).ok());
  EXPECT_EQ(envs_->Add("site/torch:2.6", "image", "localhost/hopper:1", alice_).status().code(),
            StatusCode::kPermissionDenied);
  Job j = ImageJob("");
  j.environment = "site/torch:2.4";
  ASSERT_TRUE(envs_->Resolve(&j).ok());
  EXPECT_EQ(j.environment, "site/torch:2.4");
}

TEST_F(EnvironmentsTest, DirectoryIsReadWithTheCallersPermissions) {
  inspector_.private_dirs.insert("/opt/envs/torch-1.13");
  Status s = envs_->Add("torch:1.13", "dir", "/opt/envs/torch-1.13", bob_).status();
  ASSERT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("not readable by user bob"), std::string::npos) << s.message();
  ASSERT_FALSE(inspector_.readers.empty());
  EXPECT_EQ(inspector_.readers.back().uid, 1001u);
  EXPECT_EQ(inspector_.readers.back().gid, 1001u);
  EXPECT_FALSE(inspector_.readers.back().as_root);
  EXPECT_EQ(envs_->NeedsOf("dir", "/opt/envs/torch-1.13", bob_).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(envs_->NeedsOf("dir", "/opt/envs/torch-1.13", admin_).ok());
  EXPECT_TRUE(inspector_.readers.back().as_root);
  EXPECT_TRUE(envs_->List()->empty());
}

TEST_F(EnvironmentsTest, DirectoryEnvironmentChangedSinceRegistrationIsRefused) {
  ASSERT_TRUE(envs_->Add("torch:1.13", "dir", "/opt/envs/torch-1.13", bob_).ok());
  EXPECT_EQ(envs_->Get("torch:1.13")->dir_digest, "sha256:/opt/envs/torch-1.13@0");
  Job j = ImageJob("");
  j.environment = "torch:1.13";
  ASSERT_TRUE(envs_->Resolve(&j).ok());
  EXPECT_EQ(j.env_dir, "/opt/envs/torch-1.13");
  ++inspector_.changes["/opt/envs/torch-1.13"];  // bob edits bin/python
  Job k = ImageJob("");
  k.environment = "torch:1.13";
  Status s = envs_->Resolve(&k);
  ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "environment torch:1.13 changed since it was registered (its directory "
            "/opt/envs/torch-1.13 differs): ask its owner (bob) to register a new version");
  // A record from before digests cannot be checked: refused, saying what to do.
  store::EnvironmentRecord old{"legacy", "1", "dir", "/opt/envs/torch-1.13", "{}", "bob", 1};
  ASSERT_TRUE(store_->PutEnvironment(old).ok());
  Job l = ImageJob("");
  l.environment = "legacy:1";
  Status o = envs_->Resolve(&l);
  EXPECT_EQ(o.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(o.message().find("register it again as a new version"), std::string::npos)
      << o.message();
}

TEST_F(EnvironmentsTest, ImageEnvironmentRunsTheIdRecordedAtRegistration) {
  ASSERT_TRUE(envs_->Add("torch:2.4", "image", "localhost/cuda124:1", bob_).ok());
  EXPECT_EQ(envs_->Get("torch:2.4")->image_id, "id-of-localhost/cuda124:1");
  inspector_.ids["localhost/cuda124:1"] = "id-of-something-else";  // re-tagged afterwards
  Job j = ImageJob("");
  j.environment = "torch:2.4";
  ASSERT_TRUE(envs_->Resolve(&j).ok());
  EXPECT_EQ(j.image, "id-of-localhost/cuda124:1");
  // Records from before ids were recorded run their reference, as before.
  store::EnvironmentRecord old{
      "legacy", "1", "image", "localhost/cuda124:1", R"({"source":"image localhost/cuda124:1"})",
      "bob",    1};
  ASSERT_TRUE(store_->PutEnvironment(old).ok());
  Job l = ImageJob("");
  l.environment = "legacy:1";
  ASSERT_TRUE(envs_->Resolve(&l).ok());
  EXPECT_EQ(l.image, "localhost/cuda124:1");
}

TEST_F(EnvironmentsTest, ImageJobGetsItsNeedsAndRunsOnlyWhereTheDriverAllows) {
  TwoNodes();
  Job j = ImageJob("localhost/cuda124:1");
  ASSERT_TRUE(envs_->Resolve(&j).ok());
  EXPECT_EQ(j.needs.cuda, "12.4");
  Result<Job> submitted = controller_->Submit(j, alice_);
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  Job placed = controller_->Get(submitted->id, alice_).value();
  ASSERT_EQ(placed.state, JobState::kAssigned);
  EXPECT_EQ(placed.placement.at(0).node, "new");
  // A second one waits for "new" (old's driver is too old), and says why.
  Job k = ImageJob("localhost/cuda124:1");
  k.request.gpus = 2;
  ASSERT_TRUE(envs_->Resolve(&k).ok());
  Result<Job> second = controller_->Submit(k, alice_);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  Job waiting = controller_->Get(second->id, alice_).value();
  EXPECT_EQ(waiting.state, JobState::kPending)
      << (waiting.placement.empty() ? "" : waiting.placement[0].node) << " "
      << waiting.placement.size();
  EXPECT_NE(waiting.pending_reason.find("on the 1 node that can run its environment"),
            std::string::npos)
      << waiting.pending_reason;
}

TEST_F(EnvironmentsTest, SubmitRefusesAnImageNoNodeCanRunWithEachNodesReason) {
  TwoNodes();
  Job j = ImageJob("localhost/cuda99:1");
  ASSERT_TRUE(envs_->Resolve(&j).ok());
  Result<Job> r = controller_->Submit(j, alice_);
  ASSERT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("image localhost/cuda99:1 (999)"), std::string::npos) << m;
  EXPECT_NE(m.find("needs CUDA 13.0 -> driver >= 580.65.06; node old has 535.104.05"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("node new has 550.54.15"), std::string::npos) << m;
  // Hopper-only SASS: only the H100 node.
  Job h = ImageJob("localhost/hopper:1");
  ASSERT_TRUE(envs_->Resolve(&h).ok());
  Result<Job> hs = controller_->Submit(h, alice_);
  ASSERT_TRUE(hs.ok());
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  EXPECT_EQ(controller_->Get(hs->id, alice_)->placement.at(0).node, "new");
}

TEST_F(EnvironmentsTest, UninspectableImageIsAcceptedUnchecked) {
  TwoNodes();
  Job j = ImageJob("registry.example/only-on-nodes:1");
  ASSERT_TRUE(envs_->Resolve(&j).ok());
  EXPECT_TRUE(j.needs.empty());
  EXPECT_TRUE(controller_->Submit(j, alice_).ok());
}

TEST_F(EnvironmentsTest, NamedEnvironmentsLiveSideBySideAndAreImmutable) {
  TwoNodes();
  ASSERT_TRUE(envs_->Add("torch:2.4", "image", "localhost/cuda124:1", alice_).ok());
  ASSERT_TRUE(envs_->Add("torch:1.13", "dir", "/opt/envs/torch-1.13", alice_).ok());
  EXPECT_EQ(envs_->Add("torch:2.4", "image", "localhost/hopper:1", alice_).status().code(),
            StatusCode::kAlreadyExists);
  Status missing = envs_->Add("torch:3", "image", "localhost/nope:1", alice_).status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("cannot inspect image 'localhost/nope:1'"), std::string::npos)
      << missing.message();
  EXPECT_EQ(envs_->Add("torch:4", "dir", "relative/path", alice_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(envs_->List()->size(), 2u);

  Job a = ImageJob("");
  a.environment = "torch:2.4";
  ASSERT_TRUE(envs_->Resolve(&a).ok());
  EXPECT_EQ(a.image, "id-of-localhost/cuda124:1");  // pinned to the id
  EXPECT_EQ(a.needs.cuda, "12.4");
  EXPECT_NE(a.needs.source.find("environment torch:2.4"), std::string::npos);
  Job b = ImageJob("");
  b.environment = "torch:1.13";
  ASSERT_TRUE(envs_->Resolve(&b).ok());
  EXPECT_EQ(b.image, "");
  EXPECT_EQ(b.env_dir, "/opt/envs/torch-1.13");
  EXPECT_EQ(b.needs.cuda, "11.7");

  Job both = ImageJob("localhost/hopper:1");
  both.environment = "torch:2.4";
  EXPECT_EQ(envs_->Resolve(&both).code(), StatusCode::kInvalidArgument);
  Job unknown = ImageJob("");
  unknown.environment = "torch:9";
  Status s = envs_->Resolve(&unknown);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("gpupool env list"), std::string::npos);

  // Removal is refused while a queued job uses the version; other versions stay usable.
  Result<Job> queued = controller_->Submit(a, alice_);
  ASSERT_TRUE(queued.ok()) << queued.status().ToString();
  auto in_use = [this](const std::string& ref) { return controller_->JobsUsingEnvironment(ref); };
  Status refused = envs_->Remove("torch:2.4", "alice", false, in_use);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("used by 1 queued or running job (" +
                                   std::to_string(queued->id) + ")"),
            std::string::npos)
      << refused.message();
  EXPECT_EQ(envs_->Remove("torch:1.13", "bob", false, in_use).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(envs_->Remove("torch:1.13", "alice", false, in_use).ok());
  ASSERT_TRUE(controller_->Cancel(queued->id, alice_).ok());
  EXPECT_TRUE(envs_->Remove("torch:2.4", "root", true, in_use).ok());
  EXPECT_TRUE(envs_->List()->empty());
}

TEST_F(EnvironmentsTest, MountsAreForContainersAndMustBeAbsolute) {
  Job p = ImageJob("");
  p.mounts = {{"/data", "/data", true}};
  EXPECT_EQ(envs_->Resolve(&p).code(), StatusCode::kInvalidArgument);
  Job c = ImageJob("localhost/cuda124:1");
  c.mounts = {{"data", "/data", false}};
  EXPECT_EQ(envs_->Resolve(&c).message(), "mounts[0].source: 'data' must be an absolute path");
  c.mounts = {{"/data", "/", false}};
  EXPECT_EQ(envs_->Resolve(&c).message(), "mounts[0].target: cannot mount over the container's /");
  c.mounts = {{"/data/../etc", "/x", false}};
  EXPECT_FALSE(envs_->Resolve(&c).ok());
  c.mounts = {{"/data", "/data", true}};
  EXPECT_TRUE(envs_->Resolve(&c).ok());
}

TEST_F(EnvironmentsTest, ApiServesEnvironmentsAndChecks) {
  TwoNodes();
  Api api(controller_.get(), store_.get(), &clock_, AuthOptions{}, &inspector_);
  auto call = [&](const std::string& method, const std::string& path, const std::string& body) {
    net::HttpRequest r;
    r.method = method;
    r.path = path;
    r.body = body;
    r.peer = net::PeerCredentials{};  // root on the Unix socket
    r.peer->uid = 0;
    r.peer->gid = 0;
    return api.Handle(r);
  };
  EXPECT_EQ(
      call("POST", "/v1/environments", R"({"name":"t:1","image":"localhost/cuda124:1"})").status,
      201);
  EXPECT_EQ(
      call("POST", "/v1/environments", R"({"name":"t:1","image":"localhost/cuda124:1"})").status,
      409);
  EXPECT_EQ(call("POST", "/v1/environments", R"({"name":"t:2"})").status, 400);
  net::HttpResponse list = call("GET", "/v1/environments", "");
  EXPECT_EQ(list.status, 200);
  EXPECT_NE(list.body.find(R"("name":"t:1")"), std::string::npos) << list.body;
  net::HttpResponse check =
      call("POST", "/v1/environments/check", R"({"image":"localhost/cuda99:1"})");
  EXPECT_EQ(check.status, 200);
  EXPECT_NE(check.body.find(R"("runnable":false)"), std::string::npos) << check.body;
  EXPECT_NE(check.body.find("node old has 535.104.05"), std::string::npos) << check.body;
  net::HttpResponse one =
      call("POST", "/v1/environments/check", R"({"environment":"t:1","node":"new"})");
  EXPECT_NE(one.body.find(R"("runnable":true)"), std::string::npos) << one.body;
  EXPECT_EQ(call("POST", "/v1/environments/check", R"({"environment":"t:1","node":"x"})").status,
            404);
  // Submit through the API: refused at once, with the reason.
  net::HttpResponse refused = call(
      "POST", "/v1/jobs",
      R"({"command":["true"],"image":"localhost/cuda99:1","request":{"gpus":1,"cpu_milli":100}})");
  EXPECT_EQ(refused.status, 409);
  EXPECT_NE(refused.body.find("driver >= 580.65.06"), std::string::npos) << refused.body;
  EXPECT_EQ(call("POST", "/v1/jobs", R"({"command":["true"],"needs":{"source":"x"}})").status, 400);
  // Issue 15 A.5, "--env nosuch:1 exits 2": an unknown environment is a missing thing,
  // 404 (the client exits 3), not a usage error.
  net::HttpResponse nosuch =
      call("POST", "/v1/jobs", R"({"command":["true"],"environment":"nosuch:1"})");
  EXPECT_EQ(nosuch.status, 404) << nosuch.body;
  EXPECT_NE(nosuch.body.find("nosuch:1"), std::string::npos) << nosuch.body;
  EXPECT_EQ(call("DELETE", "/v1/environments/t:1", "").status, 200);
  EXPECT_EQ(call("DELETE", "/v1/environments/t:1", "").status, 404);

  // Names: a user (no passwd entry: "uid54321") may not take root's name or a site name.
  auto as_user = [&](const std::string& method, const std::string& path, const std::string& body) {
    net::HttpRequest r;
    r.method = method;
    r.path = path;
    r.body = body;
    r.peer = net::PeerCredentials{};
    r.peer->uid = 54321;
    r.peer->gid = 54321;
    return api.Handle(r);
  };
  EXPECT_EQ(
      call("POST", "/v1/environments", R"({"name":"t:3","image":"localhost/cuda124:1"})").status,
      201);
  net::HttpResponse taken =
      as_user("POST", "/v1/environments", R"({"name":"t:4","image":"localhost/cuda124:1"})");
  EXPECT_EQ(taken.status, 403);
  EXPECT_NE(taken.body.find("belongs to root"), std::string::npos) << taken.body;
  EXPECT_EQ(
      as_user("POST", "/v1/environments", R"({"name":"site/t:1","image":"localhost/cuda124:1"})")
          .status,
      403);
  EXPECT_EQ(call("POST", "/v1/environments", R"({"name":"site/t:1","image":"localhost/cuda124:1"})")
                .status,
            201);
  net::HttpResponse site = as_user("GET", "/v1/environments/site/t:1", "");
  EXPECT_EQ(site.status, 200);
  EXPECT_NE(site.body.find(R"("image_id":"id-of-localhost/cuda124:1")"), std::string::npos)
      << site.body;
}

}  // namespace
}  // namespace gpupool::controller
