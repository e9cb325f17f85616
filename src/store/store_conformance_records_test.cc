// Conformance tests for Store implementations (StoreTest, store_conformance_test.h;
// instantiated in store_conformance_test.cc) on what is not a job: settings, telemetry
// points, nodes, tokens and environments; the limits with their project associations.
#include "store/store_conformance_test.h"

namespace gpupool::store::conformance_test {
namespace {

TEST_P(StoreTest, SettingsAreReplacedWhole) {
  EXPECT_FALSE(store_->GetSetting("limits")->has_value());
  ASSERT_TRUE(store_->PutSetting("limits", R"({"users": {}})").ok());
  ASSERT_TRUE(store_->PutSetting("limits", R"({"users": {"a": {}}})").ok());
  EXPECT_EQ(store_->GetSetting("limits")->value(), R"({"users": {"a": {}}})");
  EXPECT_FALSE(store_->GetSetting("other")->has_value());
}

// A setting's revision: 0 while never set, one more at every write (PutSetting's too);
// PutSettingIf writes only at the revision it expects, and a writer that read an older
// one is refused (IsConflict, naming both) with nothing written: of two admins' edits
// read at one revision, the second is refused, not lost.
TEST_P(StoreTest, SettingsCompareAndSetRefusesAStaleRevision) {
  EXPECT_EQ(store_->GetSettingRecord("limits").value(), SettingRecord{});
  Status stale = store_->PutSettingIf("limits", "x", 1).status();
  EXPECT_TRUE(IsConflict(stale)) << stale.ToString();
  EXPECT_EQ(stale.message(),
            "setting limits changed since it was read: it is at revision 0, not 1");
  ASSERT_EQ(store_->PutSettingIf("limits", R"({"users": {}})", 0).value(), 1);
  stale = store_->PutSettingIf("limits", "lost", 0).status();  // read before the first write
  EXPECT_TRUE(IsConflict(stale)) << stale.ToString();
  EXPECT_EQ(stale.message(),
            "setting limits changed since it was read: it is at revision 1, not 0");
  ASSERT_TRUE(store_->PutSetting("limits", R"({"users": {"a": {}}})").ok());
  EXPECT_TRUE(IsConflict(store_->PutSettingIf("limits", "lost", 1).status()));
  EXPECT_EQ(store_->GetSettingRecord("limits").value(),
            (SettingRecord{R"({"users": {"a": {}}})", 2}));
  EXPECT_EQ(store_->PutSettingIf("limits", R"({"users": {"b": {}}})", 2).value(), 3);
  EXPECT_EQ(store_->GetSetting("limits")->value(), R"({"users": {"b": {}}})");
  EXPECT_EQ(store_->GetSettingRecord("other").value(), SettingRecord{});  // each its own
  EXPECT_EQ(store_->PutSettingIf("limits", "x", -1).status().code(), StatusCode::kInvalidArgument);
  if (GetParam() == "sqlite-memory") return;
  // Another store on the same database (a restart, or another controller on PostgreSQL)
  // reads the revision and compares against it.
  auto other = OpenStore(path_);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ((*other)->GetSettingRecord("limits").value(),
            (SettingRecord{R"({"users": {"b": {}}})", 3}));
  ASSERT_EQ((*other)->PutSettingIf("limits", R"({"users": {"c": {}}})", 3).value(), 4);
  EXPECT_TRUE(IsConflict(store_->PutSettingIf("limits", "lost", 3).status()));
  EXPECT_EQ(store_->GetSettingRecord("limits").value(),
            (SettingRecord{R"({"users": {"c": {}}})", 4}));
}

// Associations (a project's members, a user's default project) are kept in the limits
// setting, which the store keeps as opaque text: it comes back byte for byte after the
// store is opened again (a controller restart), names of several bytes (UTF-8) too. What
// the text means is sched's (LimitsJsonTest.MembersAndDefaultProjectsRoundTripAndAreChecked).
TEST_P(StoreTest, ProjectMembershipIsKeptWithTheLimitsAcrossAReopen) {
  const std::string limits =
      R"({"projects": {"vision": {"max_gpus": 16, "members": ["alice", "bob", "z)"
      "\xc3\xa9"  // é
      R"(lie"]}},)"
      R"( "users": {"alice": {"default_project": "vision"}}})";
  ASSERT_TRUE(store_->PutSetting("limits", limits).ok());
  if (GetParam() != "sqlite-memory") {
    store_.reset();
    auto s = OpenStore(path_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  Result<std::optional<std::string>> stored = store_->GetSetting("limits");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ(**stored, limits);
}

TEST_P(StoreTest, TelemetryPointsAreReplacedListedInOrderAndExpire) {
  const TelemetryRecord gpu_a{"gpu", "n1/0", 120'000, 150.5, 3, 90.25, 4096, 0, 1};
  const TelemetryRecord gpu_b{"gpu", "n1/0", 60'000, 10, 2, 6, 100, 0, 1};
  const TelemetryRecord job{"job", "42", 60'000, 80, 2, 50, 2048, 7.5, 2};
  ASSERT_TRUE(store_->PutTelemetry({gpu_a, gpu_b, job}).ok());
  Result<std::vector<TelemetryRecord>> all = store_->ListTelemetry({});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, (std::vector<TelemetryRecord>{gpu_b, gpu_a, job}));  // scope, key, time

  // A point written again (a late sample) replaces the old one.
  TelemetryRecord later = gpu_b;
  later.util_sum = 20.125;
  later.samples = 3;
  ASSERT_TRUE(store_->PutTelemetry({later}).ok());
  all = store_->ListTelemetry({});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, (std::vector<TelemetryRecord>{later, gpu_a, job}));
  EXPECT_EQ(store_->ListTelemetry({.since_ms = 100'000})->size(), 1u);
  EXPECT_TRUE(store_->PutTelemetry({}).ok());

  // Retention: points before the bound go.
  Result<int64_t> deleted = store_->DeleteTelemetryBefore(120'000);
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_EQ(*deleted, 2);
  EXPECT_EQ(*store_->ListTelemetry({}), (std::vector<TelemetryRecord>{gpu_a}));
  EXPECT_EQ(*store_->DeleteTelemetryBefore(0), 0);
}

TEST_P(StoreTest, TelemetryQueriesPickKeysAndMergeSteps) {
  // Two GPUs of n1, one of n10 (a prefix of n1's "n1/" must not match it), one job.
  const std::vector<TelemetryRecord> points = {
      {"gpu", "n1/0", 60'000, 100, 2, 70, 1000, 0, 1},
      {"gpu", "n1/0", 120'000, 40, 2, 30, 3000, 0, 1},
      {"gpu", "n1/0", 360'000, 50, 1, 50, 500, 0, 1},
      {"gpu", "n1/1", 60'000, 10, 1, 10, 200, 0, 1},
      {"gpu", "n10/0", 60'000, 99, 1, 99, 9999, 0, 1},
      {"job", "42", 60'000, 80, 2, 50, 2048, 7.5, 2},
      {"job", "42", 240'000, 20, 1, 20, 1024, 2.5, 1},
      {"job", "7", 60'000, 5, 1, 5, 1, 0.5, 1},
  };
  ASSERT_TRUE(store_->PutTelemetry(points).ok());

  // One key, a time range.
  Result<std::vector<TelemetryRecord>> r = store_->ListTelemetry(
      {.since_ms = 60'000, .until_ms = 360'000, .scope = "gpu", .key = "n1/0"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<TelemetryRecord>{points[0], points[1]}));

  // A node's GPUs by prefix, merged per 5 minutes: sums, highest peak, memory and GPUs.
  r = store_->ListTelemetry({.scope = "gpu", .key_prefix = "n1/", .step_ms = 300'000});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<TelemetryRecord>{{"gpu", "n1/0", 0, 140, 4, 70, 3000, 0, 1},
                                              {"gpu", "n1/0", 300'000, 50, 1, 50, 500, 0, 1},
                                              {"gpu", "n1/1", 0, 10, 1, 10, 200, 0, 1}}));

  // The keys merged: memory and GPUs add up over keys.
  r = store_->ListTelemetry(
      {.scope = "gpu", .key_prefix = "n1/", .step_ms = 60'000, .merge_keys = true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<TelemetryRecord>{{"gpu", "", 60'000, 110, 3, 70, 1200, 0, 2},
                                              {"gpu", "", 120'000, 40, 2, 30, 3000, 0, 1},
                                              {"gpu", "", 360'000, 50, 1, 50, 500, 0, 1}}));

  // Every job's whole range: one record per job.
  r = store_->ListTelemetry({.scope = "job", .step_ms = kTelemetryWholeRange});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<TelemetryRecord>{{"job", "42", 0, 100, 3, 50, 2048, 10, 2},
                                              {"job", "7", 0, 5, 1, 5, 1, 0.5, 1}}));

  // A step that is not whole minutes, or merged keys without a step, is refused.
  EXPECT_EQ(store_->ListTelemetry({.step_ms = 90'000}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ListTelemetry({.merge_keys = true}).status().code(),
            StatusCode::kInvalidArgument);
  // A key with SQL in it is a value, not SQL.
  r = store_->ListTelemetry({.key = "42' OR '1'='1"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->empty());
}

TEST_P(StoreTest, NodesAndTokens) {
  NodeRecord n{"gpu01", "{}", "unix:/x", 8000, 65536, 1, 2, false, "10.0.0.7", "1.1"};
  ASSERT_TRUE(store_->PutNode(n).ok());
  n.last_heartbeat_us = 5;
  n.draining = true;  // `gpupool node drain`, with its reason
  n.drain_reason = "disk swap (root)";
  n.gpu_health_json = R"({"GPU-1": {"state": "cordoned"}})";  // docs/health.md
  n.agent_id = "5f0c9a2e41d7b388";                            // the agent that registered it
  ASSERT_TRUE(store_->PutNode(n).ok());
  auto nodes = store_->ListNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0], n);

  TokenRecord t{"abc123", "alice", "user", 7};
  ASSERT_TRUE(store_->PutToken(t).ok());
  EXPECT_FALSE(store_->PutToken(t).ok());  // duplicate hash
  EXPECT_EQ(store_->FindToken("abc123")->value(), t);
  EXPECT_FALSE(store_->FindToken("nope")->has_value());
  EXPECT_EQ(store_->ListTokens()->size(), 1u);
  EXPECT_TRUE(store_->DeleteToken("abc123").ok());
  EXPECT_EQ(store_->DeleteToken("abc123").code(), StatusCode::kNotFound);
}

TEST_P(StoreTest, TokensKeepTheirExpiryAndLastUse) {
  TokenRecord never{"h-never", "alice", "user", 10};
  TokenRecord expiring{"h-expiring", "gpu7", "node", 11, /*expires_us=*/5000};
  ASSERT_TRUE(store_->PutToken(never).ok());
  ASSERT_TRUE(store_->PutToken(expiring).ok());
  EXPECT_EQ(store_->FindToken("h-expiring")->value(), expiring);
  EXPECT_EQ(store_->FindToken("h-never")->value().expires_us, 0);
  EXPECT_EQ(store_->FindToken("h-never")->value().last_used_us, 0);

  ASSERT_TRUE(store_->TouchToken("h-never", 4242).ok());
  EXPECT_EQ(store_->FindToken("h-never")->value().last_used_us, 4242);
  EXPECT_EQ(store_->FindToken("h-expiring")->value(), expiring);  // only the one touched
  EXPECT_EQ(store_->TouchToken("h-gone", 1).code(), StatusCode::kNotFound);

  auto list = store_->ListTokens();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  never.last_used_us = 4242;
  EXPECT_EQ((*list)[0], never);  // oldest first
  EXPECT_EQ((*list)[1], expiring);
}

TEST_P(StoreTest, EnvironmentsAreImmutableAndListedInOrder) {
  EnvironmentRecord a{"torch", "2.4", "image", "localhost/torch:2.4", R"({"source":"x"})",
                      "alice", 10};
  EnvironmentRecord b{"torch", "1.13", "dir", "/opt/envs/torch-1.13", "{}", "bob", 11};
  EnvironmentRecord c{"jax", "0.4", "image", "localhost/jax:0.4", "{}", "alice", 12};
  a.image_id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";  // pinned
  b.dir_digest = "sha256:00ff";
  for (const auto* e : {&a, &b, &c}) ASSERT_TRUE(store_->PutEnvironment(*e).ok());
  EnvironmentRecord again = a;
  again.location = "localhost/other:1";
  Status dup = store_->PutEnvironment(again);
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(dup.message().find("torch:2.4 already exists"), std::string::npos);
  auto found = store_->FindEnvironment("torch", "2.4");
  ASSERT_TRUE(found.ok());
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ(**found, a);  // the first registration stands
  EXPECT_FALSE(store_->FindEnvironment("torch", "9")->has_value());
  auto list = store_->ListEnvironments();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0], c);
  EXPECT_EQ((*list)[1], b);  // "1.13" < "2.4" as text
  EXPECT_EQ((*list)[2], a);
  EXPECT_TRUE(store_->DeleteEnvironment("torch", "1.13").ok());
  EXPECT_EQ(store_->DeleteEnvironment("torch", "1.13").code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ListEnvironments()->size(), 2u);
}

}  // namespace
}  // namespace gpupool::store::conformance_test
