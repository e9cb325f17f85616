#include "store/job_record.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "jobs/job_json.h"

namespace gpupool::store::internal {
namespace {

// What a user sets at submit time and nothing changes later. A field here that did
// change would still be stored right (the changed spec is stored as another row), only
// not shared.
// clang-format off
constexpr std::array<std::string_view, 36> kSpecKeys = {
    "user",          "uid",
    "gid",           "project",
    "name",          "command",
    "env",           "workdir",
    "image",         "mounts",
    "environment",   "env_dir",
    "needs",         "request",
    "priority",      "time_limit_s",
    "requeue",       "mpi",
    "dependencies",  "interactive",
    "pty",           "shm_bytes",
    "init",          "array_max_running",
    "array",         "enforce_memory",
    "script",        "output",
    "error",         "preemptible",
    "min_runtime_s", "preempt_grace_s",
    "client_keepalive", "warn_signal",
    "warn_time_s",   "warn_main_only",
};
// clang-format on

bool IsSpecKey(std::string_view key) {
  for (std::string_view k : kSpecKeys) {
    if (k == key) return true;
  }
  return false;
}

// A default job's JSON: a field equal to it need not be stored, since JobFromJson starts
// from a default job and leaves absent fields as they are.
const OrderedJson& Defaults() {
  static const OrderedJson* d = new OrderedJson(jobs::JobToJson(jobs::Job{}));
  return *d;
}

std::string Sha256Hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(size_t{2} * len);
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace

JobRecord EncodeJobRecord(const jobs::Job& job) {
  const OrderedJson& defaults = Defaults();
  OrderedJson body = OrderedJson::object();
  OrderedJson spec = OrderedJson::object();
  OrderedJson whole = jobs::JobToJson(job);
  for (auto& [key, value] : whole.items()) {
    if (key == "id") continue;
    if (auto d = defaults.find(key); d != defaults.end() && *d == value) continue;
    (IsSpecKey(key) ? spec : body)[key] = std::move(value);
  }
  JobRecord r;
  r.body = DumpJson(body);
  r.spec = DumpJson(spec);
  r.spec_hash = Sha256Hex(r.spec);
  return r;
}

int64_t LateEndUs(const jobs::Job& job) {
  if (job.end_time_us <= 0) return 0;
  int64_t late = job.late_end_time_us;
  for (const jobs::EarlierAttempt& a : job.earlier_attempts) late = std::max(late, a.end_time_us);
  return late > job.end_time_us ? late : 0;
}

Result<jobs::Job> DecodeJobRecord(int64_t id, int64_t version, std::string_view body,
                                  const Json* spec) {
  const std::string where = "stored job " + std::to_string(id);
  GP_ASSIGN_OR_RETURN(Json j, ParseJson(body, where));
  if (!j.is_object()) return Status::Internal(where + ": not a JSON object");
  if (spec != nullptr) {
    if (!spec->is_object()) return Status::Internal(where + ": its spec is not a JSON object");
    for (auto it = spec->begin(); it != spec->end(); ++it) j[it.key()] = *it;
  }
  j["id"] = id;
  GP_ASSIGN_OR_RETURN(jobs::Job job, jobs::JobFromJson(j, where));
  job.version = version;  // a column, not in the JSON form
  return job;
}

Result<jobs::Job> DecodeJobRecord(int64_t id, int64_t version, std::string_view body,
                                  std::string_view spec) {
  if (spec.empty()) return DecodeJobRecord(id, version, body, static_cast<const Json*>(nullptr));
  GP_ASSIGN_OR_RETURN(Json s, ParseJson(spec, "the spec of stored job " + std::to_string(id)));
  return DecodeJobRecord(id, version, body, &s);
}

Result<const Json*> SpecCache::Get(int64_t id, const std::function<std::string()>& text) {
  if (auto it = parsed_.find(id); it != parsed_.end()) return &it->second.spec;
  const std::string t = text();
  GP_ASSIGN_OR_RETURN(Json s, ParseJson(t, "stored job spec " + std::to_string(id)));
  // The oldest go first, the one asked for stays.
  while (!parsed_order_.empty() && parsed_bytes_ + t.size() > max_parsed_bytes_) {
    auto old = parsed_.find(parsed_order_.front());
    parsed_bytes_ -= old->second.text_bytes;
    parsed_.erase(old);
    parsed_order_.pop_front();
  }
  parsed_bytes_ += t.size();
  parsed_order_.push_back(id);
  return &parsed_.emplace(id, Parsed{std::move(s), t.size()}).first->second.spec;
}

void SpecCache::Share(int64_t id, jobs::Job* job) {
  auto [first, inserted] = first_.try_emplace(id);
  if (inserted) {
    first->second.command = job->command;
    first->second.env = job->env;
    return;
  }
  // Equal by construction (the spec holds both, and a row's body neither); checked all
  // the same, as sharing unequal values would change a job.
  if (job->command == first->second.command) job->command = first->second.command;
  if (job->env == first->second.env) job->env = first->second.env;
}

int JobDecodeThreads() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

namespace {

// Decodes rows [begin, end) into out[begin, end); the first bad row's error, or Ok.
Status DecodeSlice(const std::vector<JobRow>& rows, size_t begin, size_t end,
                   size_t max_parsed_bytes, std::vector<jobs::Job>* out) {
  SpecCache specs(max_parsed_bytes);
  for (size_t i = begin; i < end; ++i) {
    const JobRow& r = rows[i];
    const Json* spec = nullptr;
    if (r.spec_id) {
      GP_ASSIGN_OR_RETURN(spec, specs.Get(*r.spec_id, [&] { return std::string(r.spec); }));
    }
    GP_ASSIGN_OR_RETURN(jobs::Job job, DecodeJobRecord(r.id, r.version, r.body, spec));
    (*out)[i] = std::move(job);
    if (spec != nullptr) specs.Share(*r.spec_id, &(*out)[i]);
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<jobs::Job>> DecodeJobRows(const std::vector<JobRow>& rows, int threads,
                                             size_t min_rows_per_thread) {
  const size_t slices = std::clamp<size_t>(rows.size() / std::max<size_t>(min_rows_per_thread, 1),
                                           1, static_cast<size_t>(std::max(threads, 1)));
  std::vector<jobs::Job> out(rows.size());
  // SpecCache's bound on parsed specs held, shared out between the slices.
  const size_t max_parsed = std::max<size_t>((size_t{4} << 20) / slices, size_t{1} << 20);
  std::vector<Status> status(slices, Status::Ok());
  auto bound = [&](size_t k) { return rows.size() * k / slices; };
  {
    std::vector<std::jthread> workers;
    workers.reserve(slices - 1);
    for (size_t k = 1; k < slices; ++k) {
      auto decode = [&, k] {
        status[k] = DecodeSlice(rows, bound(k), bound(k + 1), max_parsed, &out);
      };
      try {
        workers.emplace_back(decode);
      } catch (const std::system_error&) {
        decode();  // no thread to be had (a process at its limit): this one decodes it
      }
    }
    status[0] = DecodeSlice(rows, 0, bound(1), max_parsed, &out);
  }  // joined
  for (const Status& s : status) GP_RETURN_IF_ERROR(s);
  // Each slice shared its jobs' specs within itself; one spec's jobs in several slices
  // (an array cut by a slice's bound, a spec submitted again later) share the first's.
  if (slices > 1) {
    std::unordered_map<int64_t, size_t> first;  // spec id -> its first job's index
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!rows[i].spec_id) continue;
      auto [f, inserted] = first.try_emplace(*rows[i].spec_id, i);
      if (inserted) continue;
      jobs::Job& job = out[i];
      const jobs::Job& head = out[f->second];
      if (job.command == head.command) job.command = head.command;
      if (job.env == head.env) job.env = head.env;
    }
  }
  return out;
}

}  // namespace gpupool::store::internal
