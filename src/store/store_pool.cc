#include "store/store_pool.h"

#include <condition_variable>
#include <mutex>
#include <utility>

namespace gpupool::store {
namespace {

class StorePool final : public Store {
 public:
  explicit StorePool(std::vector<std::unique_ptr<Store>> members) : members_(std::move(members)) {
    for (size_t i = 0; i < members_.size(); ++i) free_.push_back(members_.size() - 1 - i);
  }

  Result<std::vector<jobs::Job>> InsertJobs(std::vector<jobs::Job> jobs, InsertAs as) override {
    return With([&](Store& s) { return s.InsertJobs(std::move(jobs), as); });
  }
  Result<std::optional<int64_t>> FindSubmitKey(uint32_t uid, std::string_view key) override {
    return With([&](Store& s) { return s.FindSubmitKey(uid, key); });
  }
  Result<jobs::Job> GetJob(int64_t id) override {
    return With([&](Store& s) { return s.GetJob(id); });
  }
  Result<std::vector<jobs::Job>> ListJobs(const JobFilter& filter) override {
    return With([&](Store& s) { return s.ListJobs(filter); });
  }
  Status UpdateJobs(const std::vector<JobUpdate>& updates,
                    std::vector<JobConflict>* conflicts) override {
    return With([&](Store& s) { return s.UpdateJobs(updates, conflicts); });
  }
  Result<std::vector<PreemptHoldRecord>> ListPreemptHolds() override {
    return With([&](Store& s) { return s.ListPreemptHolds(); });
  }
  Status DeletePreemptHold(int64_t preemptor) override {
    return With([&](Store& s) { return s.DeletePreemptHold(preemptor); });
  }
  Status PutNode(const NodeRecord& node) override {
    return With([&](Store& s) { return s.PutNode(node); });
  }
  Result<std::vector<NodeRecord>> ListNodes() override {
    return With([&](Store& s) { return s.ListNodes(); });
  }
  Status PutToken(const TokenRecord& token) override {
    return With([&](Store& s) { return s.PutToken(token); });
  }
  Result<std::optional<TokenRecord>> FindToken(std::string_view token_hash) override {
    return With([&](Store& s) { return s.FindToken(token_hash); });
  }
  Result<std::vector<TokenRecord>> ListTokens() override {
    return With([&](Store& s) { return s.ListTokens(); });
  }
  Status DeleteToken(std::string_view token_hash) override {
    return With([&](Store& s) { return s.DeleteToken(token_hash); });
  }
  Status TouchToken(std::string_view token_hash, int64_t used_us) override {
    return With([&](Store& s) { return s.TouchToken(token_hash, used_us); });
  }
  Status PutEnvironment(const EnvironmentRecord& env) override {
    return With([&](Store& s) { return s.PutEnvironment(env); });
  }
  Result<std::optional<EnvironmentRecord>> FindEnvironment(std::string_view name,
                                                           std::string_view version) override {
    return With([&](Store& s) { return s.FindEnvironment(name, version); });
  }
  Result<std::vector<EnvironmentRecord>> ListEnvironments() override {
    return With([&](Store& s) { return s.ListEnvironments(); });
  }
  Status DeleteEnvironment(std::string_view name, std::string_view version) override {
    return With([&](Store& s) { return s.DeleteEnvironment(name, version); });
  }
  Status PutSetting(std::string_view key, std::string_view value) override {
    return With([&](Store& s) { return s.PutSetting(key, value); });
  }
  Result<std::optional<std::string>> GetSetting(std::string_view key) override {
    return With([&](Store& s) { return s.GetSetting(key); });
  }
  Result<SettingRecord> GetSettingRecord(std::string_view key) override {
    return With([&](Store& s) { return s.GetSettingRecord(key); });
  }
  Result<int64_t> PutSettingIf(std::string_view key, std::string_view value,
                               int64_t expected_revision) override {
    return With([&](Store& s) { return s.PutSettingIf(key, value, expected_revision); });
  }
  Status PutTelemetry(const std::vector<TelemetryRecord>& points) override {
    return With([&](Store& s) { return s.PutTelemetry(points); });
  }
  Result<std::vector<TelemetryRecord>> ListTelemetry(const TelemetryQuery& q) override {
    return With([&](Store& s) { return s.ListTelemetry(q); });
  }
  Result<int64_t> DeleteTelemetryBefore(int64_t before_ms) override {
    return With([&](Store& s) { return s.DeleteTelemetryBefore(before_ms); });
  }
  void SetFence(int64_t epoch, std::function<void(const Status&)> on_fenced) override {
    // Every member at once: no write may go out on a member still unfenced.
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return free_.size() == members_.size(); });
    for (auto& m : members_) m->SetFence(epoch, on_fenced);
  }

 private:
  // Runs `call` on a member no other call is using.
  template <typename F>
  auto With(F&& call) -> decltype(call(std::declval<Store&>())) {
    size_t i = 0;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !free_.empty(); });
      i = free_.back();
      free_.pop_back();
    }
    auto result = call(*members_[i]);
    {
      std::lock_guard lock(mu_);
      free_.push_back(i);
    }
    cv_.notify_all();
    return result;
  }

  std::vector<std::unique_ptr<Store>> members_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<size_t> free_;  // members not in use; the most recently used last
};

}  // namespace

Result<std::unique_ptr<Store>> MakeStorePool(std::vector<std::unique_ptr<Store>> members) {
  if (members.empty()) return Status::InvalidArgument("a store pool needs at least one store");
  for (const auto& m : members) {
    if (m == nullptr) return Status::InvalidArgument("a store pool's member is null");
  }
  return std::unique_ptr<Store>(std::make_unique<StorePool>(std::move(members)));
}

}  // namespace gpupool::store
