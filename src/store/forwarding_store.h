// ForwardingStore: a Store that hands every call to another one. Tests derive from it to
// watch or hold the calls they are about (a gate on some writes, a count of
// transactions) and inherit the rest, so a call added to Store is forwarded in one place.
// The telemetry calls and SetFence keep Store's defaults, as the wrappers did before.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/store.h"

namespace gpupool::store {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(std::unique_ptr<Store> inner)
      : owned_(std::move(inner)), inner_(owned_.get()) {}
  // Forwards to `inner`, which it does not own: `inner` outlives this store.
  explicit ForwardingStore(Store* inner) : inner_(inner) {}

  Result<std::vector<jobs::Job>> InsertJobs(std::vector<jobs::Job> jobs, InsertAs as) override {
    return inner_->InsertJobs(std::move(jobs), as);
  }
  Result<std::optional<int64_t>> FindSubmitKey(uint32_t uid, std::string_view key) override {
    return inner_->FindSubmitKey(uid, key);
  }
  Result<jobs::Job> GetJob(int64_t id) override { return inner_->GetJob(id); }
  Result<std::vector<jobs::Job>> ListJobs(const JobFilter& f) override {
    return inner_->ListJobs(f);
  }
  Status UpdateJobs(const std::vector<JobUpdate>& updates,
                    std::vector<JobConflict>* conflicts) override {
    return inner_->UpdateJobs(updates, conflicts);
  }
  Result<std::vector<PreemptHoldRecord>> ListPreemptHolds() override {
    return inner_->ListPreemptHolds();
  }
  Status DeletePreemptHold(int64_t p) override { return inner_->DeletePreemptHold(p); }
  Status PutNode(const NodeRecord& n) override { return inner_->PutNode(n); }
  Result<std::vector<NodeRecord>> ListNodes() override { return inner_->ListNodes(); }
  Status PutToken(const TokenRecord& t) override { return inner_->PutToken(t); }
  Result<std::optional<TokenRecord>> FindToken(std::string_view h) override {
    return inner_->FindToken(h);
  }
  Result<std::vector<TokenRecord>> ListTokens() override { return inner_->ListTokens(); }
  Status DeleteToken(std::string_view h) override { return inner_->DeleteToken(h); }
  Status TouchToken(std::string_view h, int64_t t) override { return inner_->TouchToken(h, t); }
  Status PutEnvironment(const EnvironmentRecord& e) override { return inner_->PutEnvironment(e); }
  Result<std::optional<EnvironmentRecord>> FindEnvironment(std::string_view name,
                                                           std::string_view version) override {
    return inner_->FindEnvironment(name, version);
  }
  Result<std::vector<EnvironmentRecord>> ListEnvironments() override {
    return inner_->ListEnvironments();
  }
  Status DeleteEnvironment(std::string_view name, std::string_view version) override {
    return inner_->DeleteEnvironment(name, version);
  }
  Status PutSetting(std::string_view k, std::string_view v) override {
    return inner_->PutSetting(k, v);
  }
  Result<std::optional<std::string>> GetSetting(std::string_view k) override {
    return inner_->GetSetting(k);
  }
  Result<SettingRecord> GetSettingRecord(std::string_view k) override {
    return inner_->GetSettingRecord(k);
  }
  Result<int64_t> PutSettingIf(std::string_view k, std::string_view v, int64_t expected) override {
    return inner_->PutSettingIf(k, v, expected);
  }

 protected:
  Store* inner() { return inner_; }

 private:
  std::unique_ptr<Store> owned_;  // null when `inner_` is not owned
  Store* inner_;
};

}  // namespace gpupool::store
