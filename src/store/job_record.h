// How both stores lay a job out (internal to src/store): its submission ("spec": the
// fields a user gives at submit and nothing changes afterwards, such as the command and
// the environment variables) apart from its state. The spec is stored once per distinct
// content, in job_specs keyed by its SHA-256, and every job with that content refers to
// it: the 1,000 elements of an array, or the same job submitted again, share one copy.
// Fields equal to a default job's are left out of both. Issue 25 item 7: a whole job
// per row made an array element cost its submission's size (4 KB with a 40-variable
// environment, 8 KB in the red team's flood) instead of its state's (about 130 bytes
// of store).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "jobs/job.h"

namespace gpupool::store::internal {

struct JobRecord {
  std::string body;       // its state: its JSON less the id (the row's), the spec's fields
                          // and the fields a default job has
  std::string spec;       // the spec's JSON (compact, keys in JobToJson's order)
  std::string spec_hash;  // SHA-256 of `spec`, 64 lowercase hex digits
};

JobRecord EncodeJobRecord(const jobs::Job& job);

// When an ended job's GPUs were let go, when that is after its end_time_us (the stores'
// `late_end_us` column, which JobFilter::held_after_us reads): a LOST job's real end
// reported late (Job::late_end_time_us), or an earlier attempt's reported end
// (EarlierAttempt::end_time_us) after the job ended (it was cancelled while it waited,
// or its next attempt ended first); 0 otherwise, and for a job that has not ended.
int64_t LateEndUs(const jobs::Job& job);

// The job from its row: its id and version (columns), its body and the text of the spec
// it refers to; `spec` empty for a row written whole (before job_specs existed). Errors
// name "stored job".
Result<jobs::Job> DecodeJobRecord(int64_t id, int64_t version, std::string_view body,
                                  std::string_view spec);

// The same, with the spec already parsed (nullptr: none).
Result<jobs::Job> DecodeJobRecord(int64_t id, int64_t version, std::string_view body,
                                  const Json* spec);

// Specs parsed once per listing: the elements of an array share one, and the jobs read
// from it share one copy of its command and environment in memory too. Parsed specs are
// kept up to `max_parsed_bytes` of their text (the most recent ones; an array's elements
// come one after the other), so that a listing of many distinct submissions (what a
// restarted controller loads: 298 queued jobs of 0.9 MB each) does not hold each twice,
// parsed and decoded, until it ends.
class SpecCache {
 public:
  explicit SpecCache(size_t max_parsed_bytes = size_t{4} << 20)
      : max_parsed_bytes_(max_parsed_bytes) {}
  // The spec of job_specs row `id`, parsed from `text()` unless it still is. The pointer
  // is good until the next call.
  Result<const Json*> Get(int64_t id, const std::function<std::string()>& text);
  // Gives `job` (read from spec `id`) the command and environment of the first job read
  // from that spec, so that a listing of an array's 1,000 elements (what a restarted
  // controller loads) holds them once, not 1,000 times.
  void Share(int64_t id, jobs::Job* job);

 private:
  struct Parsed {
    Json spec;
    size_t text_bytes = 0;
  };
  size_t max_parsed_bytes_;
  size_t parsed_bytes_ = 0;
  std::map<int64_t, Parsed> parsed_;
  std::deque<int64_t> parsed_order_;  // oldest first
  struct Shared {                     // of the first job read from a spec
    decltype(jobs::Job::command) command;
    decltype(jobs::Job::env) env;
  };
  std::map<int64_t, Shared> first_;
};

// One row of a job listing as read, its texts views into what the store read (a
// PostgreSQL result, the SQLite rows copied out).
struct JobRow {
  int64_t id = 0;
  int64_t version = 0;
  std::string_view body;
  std::optional<int64_t> spec_id;  // none: a row written whole, before job_specs
  std::string_view spec;           // the text of spec `spec_id`, on every row that has one
};

// The threads DecodeJobRows uses when not told: the CPUs (hardware_concurrency), at most 8.
int JobDecodeThreads();

// The jobs of `rows`, in their order: what DecodeJobRecord gives for each, with the jobs
// read from one spec sharing one copy of its command and environment (SpecCache). A
// listing of many rows (a controller's load at a takeover: 300,000 queued jobs) is
// decoded on up to `threads` threads, each a contiguous slice of at least
// `min_rows_per_thread` rows with a SpecCache of its own; the result does not depend on
// the threads: the same jobs, the same sharing, the error of the first bad row.
Result<std::vector<jobs::Job>> DecodeJobRows(const std::vector<JobRow>& rows,
                                             int threads = JobDecodeThreads(),
                                             size_t min_rows_per_thread = 4096);

}  // namespace gpupool::store::internal
