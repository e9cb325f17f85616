#include "agent/stop_request.h"

#include <csignal>

#include "agent/job_files.h"
#include "common/file_util.h"
#include "common/json.h"

namespace gpupool::agent {

// The value's bit for main_only: above every signal number.
constexpr int kMainOnlyBit = 0x100;

int SignalRequestSignal() { return SIGRTMIN + 2; }

int EncodeSignalRequest(int sig, bool main_only) { return sig | (main_only ? kMainOnlyBit : 0); }

bool DecodeSignalRequest(int value, int* sig, bool* main_only) {
  *sig = value & 0xff;
  *main_only = (value & kMainOnlyBit) != 0;
  return *sig >= 1 && *sig <= 64 && (value & ~(0xff | kMainOnlyBit)) == 0;
}

Status WriteStopRequest(const std::string& dir, const StopRequest& stop) {
  OrderedJson j = {{"grace_s", stop.grace_s}, {"deadline_s", stop.deadline_s}};
  if (!stop.reason.empty()) j["reason"] = stop.reason;
  return WriteFileDurably(dir + "/" + kStopFile, DumpJson(j), 0600, /*sync=*/false);
}

std::optional<StopRequest> ReadStopRequest(const std::string& dir) {
  const std::string path = dir + "/" + kStopFile;
  Result<std::string> text = ReadFileToString(path, 4096);
  if (!text.ok()) return std::nullopt;
  Result<Json> j = ParseJson(*text, path);
  if (!j.ok() || !j->is_object()) return std::nullopt;
  StopRequest stop;
  JsonFields f(*j, path, /*reject_unknown=*/false);
  f.Required("grace_s", &stop.grace_s, 0, int64_t{24} * 3600);
  f.Optional("deadline_s", &stop.deadline_s, 0);
  f.Optional("reason", &stop.reason);
  if (!f.Finish().ok()) return std::nullopt;
  return stop;
}

}  // namespace gpupool::agent
