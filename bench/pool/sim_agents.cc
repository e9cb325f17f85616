// sim_agents: many fake nodes in one process, speaking the real agent protocol to a real
// `gpupool server` (issue 31, in the spirit of kwok). Each node registers (its GPUs from a
// node file, with its own name and GPU UUIDs), polls for work, "runs" each launched task
// for a run time drawn from a distribution or a trace, and reports starts and ends (and,
// optionally, GPU telemetry) as `gpupool agent` does: through protocol::ControllerLink
// over HTTP (http_controller_link.h) with the protocol's own structs, so the messages
// cannot drift from the agent's.
//
// Threads: a fixed pool of --workers threads; each serves every W-th node from a timer
// heap (due polls, task ends, telemetry). The HTTP client is blocking (one connection per
// request), so a poll holds its worker for the poll's wait: polls are short by default
// (--poll-wait-ms 0: the controller answers at once) and each node polls again after
// --idle-poll-ms while it has free GPUs, --full-poll-ms while all are busy (its heartbeat),
// and soon after one of its tasks ended (--after-end-poll-ms). --poll-wait-ms > 0 makes
// them long polls: at most --workers of them wait at a time.
//
//   sim_agents --controller unix:/path/gpupool.sock --nodes 1000
//       --node-file bench/pool/node-8gpu.json --run-time exp:30 --stats stats.json
//
// See bench/pool/README.md for every option and the stats it writes.
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/file_util.h"
#include "common/json.h"
#include "common/strings.h"
#include "gpu/node_json.h"
#include "net/http_client.h"
#include "protocol/agent_protocol.h"
#include "protocol/controller_link.h"
#include "protocol/http_controller_link.h"

namespace gp = gpupool;
namespace proto = gpupool::protocol;

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int64_t MonoUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
int64_t WallUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How long a task runs: fixed:S, exp:MEAN (exponential), trace:FILE (one run time in
// seconds per line, used in order and cycled).
class RunTime {
 public:
  static gp::Result<RunTime> Parse(const std::string& spec) {
    RunTime r;
    const size_t colon = spec.find(':');
    const std::string kind = spec.substr(0, colon);
    const std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
    auto seconds = [&](const std::string& text) -> gp::Result<double> {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || end == nullptr || *end != '\0' || !(v >= 0) || v > 1e7) {
        return gp::Status::InvalidArgument("--run-time: '" + text +
                                           "' is no number of seconds (0 to 1e7)");
      }
      return v;
    };
    if (kind == "fixed" || kind == "exp") {
      GP_ASSIGN_OR_RETURN(r.value_, seconds(arg));
      r.exponential_ = kind == "exp";
      return r;
    }
    if (kind == "trace") {
      GP_ASSIGN_OR_RETURN(std::string text, gp::ReadFileToString(arg));
      for (const std::string& line : gp::Split(text, '\n')) {
        const std::string t = std::string(gp::Trim(line));
        if (t.empty() || t[0] == '#') continue;
        GP_ASSIGN_OR_RETURN(double v, seconds(t));
        r.trace_.push_back(v);
      }
      if (r.trace_.empty()) {
        return gp::Status::InvalidArgument("--run-time: trace " + arg + " has no run times");
      }
      return r;
    }
    return gp::Status::InvalidArgument("--run-time: '" + spec +
                                       "' is none of fixed:SECONDS, exp:MEAN, trace:FILE");
  }
  int64_t DrawUs(std::mt19937_64& rng) const {
    double s = value_;
    if (!trace_.empty()) {
      s = trace_[next_->fetch_add(1, std::memory_order_relaxed) % trace_.size()];
    } else if (exponential_ && value_ > 0) {
      s = std::exponential_distribution<double>(1.0 / value_)(rng);
    }
    return static_cast<int64_t>(s * 1e6);
  }

 private:
  double value_ = 0;
  bool exponential_ = false;
  std::vector<double> trace_;
  std::shared_ptr<std::atomic<uint64_t>> next_ = std::make_shared<std::atomic<uint64_t>>(0);
};

struct Options {
  std::string controller;
  std::string token;
  std::string token_file;
  std::string node_file;
  std::string name_prefix = "sim";
  int nodes = 1;
  int first = 0;
  int workers = 8;
  int64_t cpu_milli = 128'000;
  int64_t memory_mib = 1 << 20;
  std::string run_time = "fixed:10";
  int poll_wait_ms = 0;
  int idle_poll_ms = 1000;
  int full_poll_ms = 5000;
  int after_end_poll_ms = 100;
  double telemetry_s = 0;
  double duration_s = 0;
  uint64_t seed = 1;
  int64_t fail_every = 0;
  std::string stats;
};

using TaskKey = std::tuple<int64_t, int, int>;  // job, task, attempt

struct Node {
  std::string name;
  proto::Registration reg;
  std::shared_ptr<proto::ControllerLink> link;
  bool registered = false;
  int gpus = 0;
  int busy_gpus = 0;
  std::map<TaskKey, std::vector<std::string>> running;  // -> the GPU UUIDs it holds
  std::set<TaskKey> launched;                           // every task ever launched here
  std::vector<proto::Event> unsent;
  std::vector<proto::ExecReport> unsent_exec;
  uint64_t poll_gen = 0;
  bool flush_due = false;
  bool ever_registered = false;  // counted once, not again after a re-registration
};

// What the whole process counts; written to --stats as JSON.
struct Stats {
  std::atomic<int64_t> registered{0}, registrations{0}, register_errors{0};
  std::atomic<int64_t> polls{0}, poll_errors{0}, event_posts{0}, event_errors{0};
  std::atomic<int64_t> launches{0}, resent_orders{0}, starts{0}, ends{0}, cancels{0};
  std::atomic<int64_t> rejected_orders{0}, exec_refused{0}, telemetry_posts{0};
  std::atomic<int64_t> telemetry_errors{0}, lost_registrations{0};
  std::atomic<int64_t> all_registered_us{0};
  std::mutex mu;
  std::unordered_map<int64_t, int> task_starts;  // (job << 16 | task) -> launches
  int64_t started_twice = 0;
};

enum class TimerKind { kPoll, kEnd, kFlush, kTelemetry };
struct Timer {
  int64_t due_us;
  TimerKind kind;
  uint32_t node;
  uint64_t gen;  // kPoll: the node's poll_gen when set
  TaskKey key;
  bool operator>(const Timer& o) const { return due_us > o.due_us; }
};

class Worker {
 public:
  Worker(const Options& o, const RunTime& rt, Stats* stats, std::vector<Node*> nodes, uint64_t seed,
         int64_t start_us, std::atomic<int64_t>* lags, int worker_index)
      : o_(o),
        rt_(rt),
        stats_(stats),
        nodes_(std::move(nodes)),
        rng_(seed),
        start_us_(start_us),
        lags_(lags),
        worker_index_(worker_index) {
    for (uint32_t i = 0; i < nodes_.size(); ++i) unregistered_.push_back(i);
  }

  void Run() {
    while (!g_stop) {
      // First registrations take turns with the timers that are due, as agents register
      // while others already poll: a node registered early must not wait for every other
      // node's registration before it polls again (the node timeout would pass).
      const bool due = !heap_.empty() && heap_.top().due_us <= MonoUs();
      if (!unregistered_.empty() && (!due || register_turn_)) {
        register_turn_ = false;
        const uint32_t i = unregistered_.front();
        unregistered_.pop_front();
        Poll(i);  // registers, then polls
        continue;
      }
      register_turn_ = true;
      if (heap_.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      const int64_t now = MonoUs();
      if (heap_.top().due_us > now) {
        const int64_t wait = std::min<int64_t>(heap_.top().due_us - now, 50'000);
        std::this_thread::sleep_for(std::chrono::microseconds(wait));
        continue;
      }
      const Timer t = heap_.top();
      heap_.pop();
      lags_[worker_index_] = now - t.due_us;
      Node& n = *nodes_[t.node];
      switch (t.kind) {
        case TimerKind::kPoll:
          if (t.gen == n.poll_gen) Poll(t.node);
          break;
        case TimerKind::kEnd:
          End(t.node, t.key);
          break;
        case TimerKind::kFlush:
          n.flush_due = false;
          Flush(n);
          SchedulePoll(t.node, MonoUs() + int64_t{o_.after_end_poll_ms} * 1000);
          break;
        case TimerKind::kTelemetry:
          Telemetry(n);
          heap_.push({MonoUs() + static_cast<int64_t>(o_.telemetry_s * 1e6),
                      TimerKind::kTelemetry,
                      t.node,
                      0,
                      {}});
          break;
      }
    }
  }

 private:
  void SchedulePoll(uint32_t i, int64_t due_us) {
    Node& n = *nodes_[i];
    heap_.push({due_us, TimerKind::kPoll, i, ++n.poll_gen, {}});
  }

  bool Register(uint32_t i) {
    Node& n = *nodes_[i];
    proto::Registration reg = n.reg;
    for (const auto& [key, gpus] : n.running) {
      reg.running.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key)});
    }
    for (const proto::Event& e : n.unsent) {
      if (e.kind != proto::EventKind::kStarted) {
        reg.ended.push_back({e.job_id, e.task_index, e.attempt});
      }
    }
    gp::Result<proto::RegistrationReply> reply = n.link->Register(reg);
    if (reply.ok()) {
      gp::Status compatible = proto::CheckCompatible(
          proto::kVersion, reply->version, "the controller", "sim_agents (node " + n.name + ")");
      if (!compatible.ok()) reply = compatible;
    }
    if (!reply.ok()) {
      if (stats_->register_errors.fetch_add(1) < 5) {
        std::fprintf(stderr, "sim_agents: registering %s: %s\n", n.name.c_str(),
                     reply.status().ToString().c_str());
      }
      return false;
    }
    stats_->registrations.fetch_add(1);
    n.registered = true;
    if (!n.ever_registered) {
      n.ever_registered = true;
      if (stats_->registered.fetch_add(1) + 1 == o_.nodes) {
        stats_->all_registered_us = MonoUs() - start_us_;
      }
      if (o_.telemetry_s > 0) {
        heap_.push({MonoUs() + static_cast<int64_t>(o_.telemetry_s * 1e6),
                    TimerKind::kTelemetry,
                    i,
                    0,
                    {}});
      }
    }
    return true;
  }

  void Poll(uint32_t i) {
    Node& n = *nodes_[i];
    if (!n.registered && !Register(i)) {
      SchedulePoll(i, MonoUs() + 1'000'000);
      return;
    }
    Flush(n);
    stats_->polls.fetch_add(1);
    gp::Result<proto::Work> work = n.link->PollWork(n.name, o_.poll_wait_ms);
    if (!work.ok()) {
      if (work.status().code() == gp::StatusCode::kNotFound) {
        // Declared lost, or the controller restarted: register again, listing what runs.
        stats_->lost_registrations.fetch_add(1);
        n.registered = false;
        SchedulePoll(i, MonoUs());
        return;
      }
      if (stats_->poll_errors.fetch_add(1) < 5) {
        std::fprintf(stderr, "sim_agents: polling for %s: %s\n", n.name.c_str(),
                     work.status().ToString().c_str());
      }
      SchedulePoll(i, MonoUs() + 1'000'000);
      return;
    }
    const int64_t now = MonoUs();
    stats_->rejected_orders.fetch_add(static_cast<int64_t>(work->rejected.size()));
    for (const proto::CancelOrder& c : work->cancel) {
      if (c.job_id == 0) continue;  // an exec session's: none run here
      for (auto it = n.running.begin(); it != n.running.end();) {
        const auto& [job, task, attempt] = it->first;
        if (job != c.job_id || (c.attempt != 0 && attempt != c.attempt)) {
          ++it;
          continue;
        }
        proto::Event e;
        e.kind = proto::EventKind::kExited;
        e.job_id = job;
        e.task_index = task;
        e.attempt = attempt;
        e.time_us = WallUs();
        e.signal = 15;
        e.cancelled = true;
        n.unsent.push_back(std::move(e));
        n.busy_gpus -= static_cast<int>(it->second.size());
        it = n.running.erase(it);
        stats_->cancels.fetch_add(1);
      }
    }
    for (const proto::LaunchOrder& o : work->launch) {
      const TaskKey key{o.job.id, o.task_index, o.job.attempt};
      if (!n.launched.insert(key).second) {  // resent: the real agent ignores it too
        stats_->resent_orders.fetch_add(1);
        continue;
      }
      stats_->launches.fetch_add(1);
      {
        std::lock_guard lock(stats_->mu);
        if (++stats_->task_starts[(o.job.id << 16) | o.task_index] == 2) {
          ++stats_->started_twice;
        }
      }
      std::vector<std::string> uuids;
      for (const proto::GpuGrant& g : o.gpus) uuids.push_back(g.uuid);
      n.busy_gpus += static_cast<int>(uuids.size());
      n.running[key] = std::move(uuids);
      proto::Event e;
      e.kind = proto::EventKind::kStarted;
      e.job_id = o.job.id;
      e.task_index = o.task_index;
      e.attempt = o.job.attempt;
      e.time_us = WallUs();
      if (o.task_index == 0) {
        // Task 0 picks the rendezvous port (the agent a free one; nothing listens here).
        e.master_port = o.rendezvous.master_port != 0 ? o.rendezvous.master_port : 29500;
      }
      n.unsent.push_back(std::move(e));
      heap_.push({now + rt_.DrawUs(rng_), TimerKind::kEnd, i, 0, key});
    }
    for (const proto::ExecRequest& x : work->exec) {
      proto::ExecReport r;  // no command runs on a simulated node
      r.id = x.id;
      r.ended = true;
      r.error = "node " + n.name + " is simulated (sim_agents): it runs no commands";
      n.unsent_exec.push_back(std::move(r));
      stats_->exec_refused.fetch_add(1);
    }
    Flush(n);
    const int64_t next = n.busy_gpus < n.gpus ? o_.idle_poll_ms : o_.full_poll_ms;
    SchedulePoll(i, MonoUs() + next * 1000);
  }

  void End(uint32_t i, const TaskKey& key) {
    Node& n = *nodes_[i];
    auto it = n.running.find(key);
    if (it == n.running.end()) return;  // cancelled meanwhile
    proto::Event e;
    e.kind = proto::EventKind::kExited;
    e.job_id = std::get<0>(key);
    e.task_index = std::get<1>(key);
    e.attempt = std::get<2>(key);
    e.time_us = WallUs();
    e.exit_code = o_.fail_every > 0 && e.job_id % o_.fail_every == 0 ? 1 : 0;
    n.unsent.push_back(std::move(e));
    n.busy_gpus -= static_cast<int>(it->second.size());
    n.running.erase(it);
    if (!n.flush_due) {  // ends due together go in one batch
      n.flush_due = true;
      heap_.push({MonoUs(), TimerKind::kFlush, i, 0, {}});
    }
  }

  // Posts the node's unsent events; kept for the next try when the controller did not
  // acknowledge them (as the agent does).
  void Flush(Node& n) {
    if (!n.registered || (n.unsent.empty() && n.unsent_exec.empty())) return;
    proto::EventBatch batch;
    batch.node = n.name;
    batch.events = n.unsent;
    batch.exec = n.unsent_exec;
    gp::Status s = n.link->PostEvents(batch);
    stats_->event_posts.fetch_add(1);
    if (!s.ok()) {
      if (s.code() == gp::StatusCode::kNotFound) n.registered = false;
      if (stats_->event_errors.fetch_add(1) < 5) {
        std::fprintf(stderr, "sim_agents: events of %s: %s\n", n.name.c_str(),
                     s.ToString().c_str());
      }
      return;
    }
    for (const proto::Event& e : n.unsent) {
      (e.kind == proto::EventKind::kStarted ? stats_->starts : stats_->ends).fetch_add(1);
    }
    n.unsent.clear();
    n.unsent_exec.clear();
  }

  void Telemetry(Node& n) {
    if (!n.registered) return;
    std::map<std::string, std::vector<proto::TelemetryJob>> holders;
    for (const auto& [key, uuids] : n.running) {
      for (const std::string& u : uuids) holders[u].push_back({std::get<0>(key), 1000});
    }
    proto::TelemetryBatch b;
    b.node = n.name;
    const int64_t at_ms = WallUs() / 1000;
    for (const gp::gpu::GpuInfo& g : n.reg.info.gpus) {
      proto::GpuTelemetry s;
      s.index = g.index;
      s.uuid = g.uuid;
      s.at_ms = at_ms;
      auto h = holders.find(g.uuid);
      const bool busy = h != holders.end();
      s.util_pct = busy ? 90.0 : 0.0;
      s.mem_total_mib = static_cast<int64_t>(g.memory_total_bytes >> 20);
      s.mem_used_mib = busy ? *s.mem_total_mib / 2 : 0;
      s.power_w = busy ? 350.0 : 60.0;
      s.temp_c = busy ? 60.0 : 35.0;
      if (busy) s.jobs = h->second;
      b.samples.push_back(std::move(s));
    }
    gp::Status s = n.link->PostTelemetry(b);
    stats_->telemetry_posts.fetch_add(1);
    if (!s.ok()) stats_->telemetry_errors.fetch_add(1);
  }

  const Options& o_;
  const RunTime& rt_;
  Stats* stats_;
  std::vector<Node*> nodes_;
  std::mt19937_64 rng_;
  int64_t start_us_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> heap_;
  std::atomic<int64_t>* lags_;  // one per worker
  int worker_index_;
  std::deque<uint32_t> unregistered_;  // nodes not yet registered once, in order
  bool register_turn_ = true;
};

std::string StatsJson(Stats& s, const Options& o, int64_t start_us, bool done,
                      const std::vector<std::atomic<int64_t>>& lags) {
  gp::OrderedJson j;
  int64_t lag = 0;
  for (const auto& l : lags) lag = std::max(lag, l.load());
  j["nodes"] = o.nodes;
  j["registered"] = s.registered.load();
  j["register_s"] = nullptr;
  if (s.all_registered_us.load() > 0) j["register_s"] = s.all_registered_us.load() / 1e6;
  j["elapsed_s"] = (MonoUs() - start_us) / 1e6;
  j["registrations"] = s.registrations.load();
  j["register_errors"] = s.register_errors.load();
  j["lost_registrations"] = s.lost_registrations.load();
  j["polls"] = s.polls.load();
  j["poll_errors"] = s.poll_errors.load();
  j["event_posts"] = s.event_posts.load();
  j["event_errors"] = s.event_errors.load();
  j["launches"] = s.launches.load();
  j["resent_orders"] = s.resent_orders.load();
  j["rejected_orders"] = s.rejected_orders.load();
  j["starts"] = s.starts.load();
  j["ends"] = s.ends.load();
  j["cancels"] = s.cancels.load();
  j["exec_refused"] = s.exec_refused.load();
  j["telemetry_posts"] = s.telemetry_posts.load();
  j["telemetry_errors"] = s.telemetry_errors.load();
  {
    std::lock_guard lock(s.mu);
    j["tasks_started"] = s.task_starts.size();
    j["tasks_started_twice"] = s.started_twice;
  }
  j["timer_lag_s"] = lag / 1e6;
  j["done"] = done;
  return gp::DumpJson(j);
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "sim_agents: %s\n", what.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"sim_agents: many simulated gpupool nodes speaking the agent protocol"};
  app.add_option("--controller", o.controller, "unix:PATH or http://HOST:PORT")->required();
  app.add_option("--token", o.token, "one bearer token for every node");
  app.add_option("--token-file", o.token_file,
                 "per-node tokens, lines 'NODE TOKEN' (node tokens are bound to one node)");
  app.add_option("--node-file", o.node_file, "a gpupool.node/v1 file: each node's GPUs")
      ->required();
  app.add_option("--nodes", o.nodes, "how many nodes")->check(CLI::Range(1, 100'000));
  app.add_option("--first", o.first, "index of the first node (names PREFIX00000 on)")
      ->check(CLI::Range(0, 10'000'000));
  app.add_option("--name-prefix", o.name_prefix, "node names: PREFIX and a 5-digit index");
  app.add_option("--workers", o.workers, "worker threads")->check(CLI::Range(1, 1024));
  app.add_option("--cpu-milli", o.cpu_milli, "CPU each node offers, in thousandths");
  app.add_option("--memory-mib", o.memory_mib, "memory each node offers");
  app.add_option("--run-time", o.run_time, "fixed:SECONDS, exp:MEAN or trace:FILE");
  app.add_option("--poll-wait-ms", o.poll_wait_ms, "each poll's wait (0: answered at once)")
      ->check(CLI::Range(0, 60'000));
  app.add_option("--idle-poll-ms", o.idle_poll_ms, "poll period of a node with free GPUs")
      ->check(CLI::Range(1, 600'000));
  app.add_option("--full-poll-ms", o.full_poll_ms, "poll period of a node with none free")
      ->check(CLI::Range(1, 600'000));
  app.add_option("--after-end-poll-ms", o.after_end_poll_ms, "poll this soon after an end")
      ->check(CLI::Range(0, 600'000));
  app.add_option("--telemetry-s", o.telemetry_s, "telemetry period per node (0: none)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--duration", o.duration_s, "stop after this many seconds (0: at SIGTERM)")
      ->check(CLI::Range(0.0, 1e7));
  app.add_option("--seed", o.seed, "seed of the run-time draws");
  app.add_option("--fail-every", o.fail_every,
                 "tasks of jobs whose id is a multiple of K exit with code 1 (0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--stats", o.stats, "write the counts here as JSON, every second and at exit");
  CLI11_PARSE(app, argc, argv);

  gp::Result<RunTime> rt = RunTime::Parse(o.run_time);
  if (!rt.ok()) return Fail(rt.status().message());
  gp::Result<gp::net::ServerAddress> addr = gp::net::ParseServerAddress(o.controller);
  if (!addr.ok()) return Fail("--controller: " + addr.status().message());
  gp::Result<gp::Json> node_json = gp::ReadJsonFile(o.node_file);
  if (!node_json.ok()) return Fail("--node-file: " + node_json.status().message());
  gp::Result<gp::gpu::NodeInfo> base = gp::gpu::NodeFromJson(*node_json, o.node_file);
  if (!base.ok()) return Fail("--node-file: " + base.status().message());
  if (base->gpus.empty()) return Fail("--node-file: " + o.node_file + " has no GPUs");
  std::map<std::string, std::string> tokens;
  if (!o.token_file.empty()) {
    gp::Result<std::string> text = gp::ReadFileToString(o.token_file);
    if (!text.ok()) return Fail("--token-file: " + text.status().message());
    int line_no = 0;
    for (const std::string& line : gp::Split(*text, '\n')) {
      ++line_no;
      const std::string t = std::string(gp::Trim(line));
      if (t.empty()) continue;
      const size_t sp = t.find(' ');
      if (sp == std::string::npos) {
        return Fail("--token-file: line " + std::to_string(line_no) + ": expected 'NODE TOKEN'");
      }
      tokens[t.substr(0, sp)] = std::string(gp::Trim(t.substr(sp + 1)));
    }
  }

  // Thousands of nodes with a link each (an eventfd each) need more than 1,024 files.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &nofile);
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);

  std::shared_ptr<proto::ControllerLink> shared_link;
  if (tokens.empty()) {
    shared_link = proto::NewHttpControllerLink(gp::net::HttpClient(*addr, o.token));
  }
  std::vector<std::unique_ptr<Node>> nodes;
  for (int k = 0; k < o.nodes; ++k) {
    auto n = std::make_unique<Node>();
    char name[64];
    std::snprintf(name, sizeof name, "%s%05d", o.name_prefix.c_str(), o.first + k);
    n->name = name;
    n->reg.node = n->name;
    n->reg.info = *base;
    n->reg.info.hostname = n->name;
    for (gp::gpu::GpuInfo& g : n->reg.info.gpus) {
      char uuid[96];
      std::snprintf(uuid, sizeof uuid, "GPU-%s-%04d", n->name.c_str(), g.index);
      g.uuid = uuid;
    }
    n->reg.cpu_milli = o.cpu_milli;
    n->reg.memory_mib = o.memory_mib;
    n->gpus = static_cast<int>(n->reg.info.gpus.size());
    if (!tokens.empty()) {
      auto t = tokens.find(n->name);
      if (t == tokens.end()) return Fail("--token-file has no token for node " + n->name);
      n->link = proto::NewHttpControllerLink(gp::net::HttpClient(*addr, t->second));
    } else {
      n->link = shared_link;
    }
    nodes.push_back(std::move(n));
  }

  Stats stats;
  const int64_t start_us = MonoUs();
  const int workers = std::min(o.workers, o.nodes);
  std::vector<std::atomic<int64_t>> lags(workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    std::vector<Node*> mine;
    for (int k = w; k < o.nodes; k += workers) mine.push_back(nodes[k].get());
    threads.emplace_back([&o, &rt, &stats, mine, w, start_us, &lags] {
      Worker worker(o, *rt, &stats, mine, o.seed * 1000003 + w, start_us, lags.data(), w);
      worker.Run();
    });
  }
  auto write_stats = [&](bool done) {
    if (o.stats.empty()) return;
    (void)gp::WriteFileAtomically(o.stats, StatsJson(stats, o, start_us, done, lags) + "\n");
  };
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (o.duration_s > 0 && MonoUs() - start_us >= static_cast<int64_t>(o.duration_s * 1e6)) {
      g_stop = true;
    }
    static int64_t last_write = 0;
    if (MonoUs() - last_write >= 1'000'000) {
      write_stats(false);
      last_write = MonoUs();
    }
  }
  if (shared_link) shared_link->Shutdown();
  for (auto& n : nodes) {
    if (n->link != shared_link) n->link->Shutdown();
  }
  for (std::thread& t : threads) t.join();
  write_stats(true);
  std::printf("%s\n", StatsJson(stats, o, start_us, true, lags).c_str());
  return 0;
}
