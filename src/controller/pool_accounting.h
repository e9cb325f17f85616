// PoolAccounting: what GET /metrics reports (metrics.h). The live part comes from the
// controller at each scrape (jobs and nodes by state, the GPUs' latest telemetry with
// dcgm-exporter's labels, the GPU-hours of jobs holding resources); the rest is totals
// kept here from run to run: jobs ended by state, and their allocated and used
// (utilisation-weighted, telemetry.h) GPU-hours by (user, project).
//
// An ended job's state never changes (its record may gain the GPU-hours of a lost
// attempt's end reported late: those come as Ends::late and are added on top), so a run
// adds only the jobs that ended since the last one,
// not every job ever run: those the controller installed since (Controller::TakeEnds),
// with no store read. The first run reads every ended job from the store, and so does a
// run after the controller dropped ends (more than Controller::kMaxKeptEnds between two
// runs) and each run after one whose store read failed: the jobs that ended since the
// last run, with kEndedOverlapUs of overlap, for ends stored late. A job read twice (by both ways,
// or in two overlaps) counts once: the ids counted are kept for 2 x kEndedOverlapUs after the run
// that counted them, in the order counted, so that they expire without a walk. A run also takes the
// used GPU-seconds the telemetry hub gathered since. Runs happen at each scrape and on the
// service's own thread every kFoldPeriodUs of the injected clock, so the hub hands its
// seconds over even when nobody scrapes. The projects of the ended jobs a run reads from
// the store go to the controller (NoteListedProjects), whose look-alike check of project
// names (AdmitProject) then knows those that ended before it started.
//
// Thread-safe: one run at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/periodic_thread.h"
#include "controller/controller.h"
#include "controller/telemetry_service.h"
#include "store/store.h"

namespace gpupool::controller {

class PoolAccounting {
 public:
  static constexpr int64_t kEndedOverlapUs = int64_t{3600} * 1'000'000;
  static constexpr int64_t kFoldPeriodUs = 60'000'000;

  // All four must outlive the object.
  PoolAccounting(Controller* controller, store::Store* store, const Clock* clock,
                 TelemetryService* telemetry);
  ~PoolAccounting() { Stop(); }

  // The thread that brings the totals up to date every kFoldPeriodUs; Stop is idempotent.
  void Start() { worker_.Start(); }
  void Stop() { worker_.Stop(); }

  // The text of GET /metrics (Prometheus's format, version 0.0.4). The store's error when
  // it cannot list jobs; the totals then stay as they were.
  Result<std::string> Scrape();

  // One run of the thread: the totals brought up to date. The store's error as Scrape.
  Status Fold();

  // The thread, for tests that wait for its runs (PeriodicThread::WaitForRuns).
  const PeriodicThread& worker() const { return worker_; }

  // The totals of the ended jobs (tests: a run over what was fed compares with one
  // that read every ended job from the store), and how many runs read the store.
  struct EndedTotals {
    std::map<std::string, int64_t> by_state;
    std::map<std::pair<std::string, std::string>, double> gpu_hours;
  };
  EndedTotals ended_totals();
  int64_t store_reads();

 private:
  using Key = std::pair<std::string, std::string>;  // (user, project)

  // Jobs that ended since the last run, added to the totals once each; `keys` gets the
  // (user, project) of every job read.
  Status FoldEndedLocked(int64_t now_us, std::map<int64_t, Key>* keys);
  // Ended job `j`, added to the totals unless counted before.
  void CountEndedLocked(const jobs::Job& j, int64_t now_us, std::map<int64_t, Key>* keys);
  // The used GPU-seconds the hub gathered, added to their jobs' (user, project): by
  // `keys`, else by the store; a job the store cannot be asked about now keeps its
  // seconds for the next run, one it no longer holds loses them.
  void FoldUsedLocked(const std::map<int64_t, Key>& keys);
  // Ended jobs, then the active ones (returned) and the hub's seconds.
  Result<std::vector<jobs::Job>> FoldLocked(int64_t now_us);

  Controller* controller_;
  store::Store* store_;
  const Clock* clock_;
  TelemetryService* telemetry_;

  std::mutex mu_;              // one run at a time; guards the totals
  int64_t read_until_us_ = 0;  // jobs ending before this (less the overlap) are counted
  bool read_store_ = true;     // the next run reads the store (the first; ends were dropped)
  int64_t store_reads_ = 0;
  // The ids counted, and in the order counted, with the time of the run that counted
  // them: expired from the front. Jobs with no end time are read each time: never.
  std::unordered_set<int64_t> recent_;
  std::deque<std::pair<int64_t, int64_t>> recent_order_;  // (run's time, id)
  std::map<std::string, int64_t> ended_by_state_;
  std::map<Key, double> ended_gpu_hours_;
  std::map<Key, double> used_gpu_s_;  // the counter's value, in GPU-seconds
  PeriodicThread worker_;             // last: it runs on the members above
};

}  // namespace gpupool::controller
