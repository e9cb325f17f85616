#include "protocol/cancel_order.h"

namespace gpupool::protocol {
namespace {

constexpr int kMaxTaskIndex = 4095;  // a job has at most 4096 tasks (agent_protocol.cc)
// JsonFields' reject_unknown: readers ignore new fields, as agent_protocol.cc's kLenient.
// A name of its own: a unity build compiles both files in one unit, a plain build each alone.
constexpr bool kRejectUnknown = false;

}  // namespace

OrderedJson EncodeCancelOrder(const CancelOrder& c) {
  if (c.exec_id != 0) return {{"exec_id", c.exec_id}};
  OrderedJson j = {{"job_id", c.job_id}, {"attempt", c.attempt}};
  if (c.task >= 0) j["task"] = c.task;
  if (c.grace_s >= 0) {
    j["grace_s"] = c.grace_s;
    j["deadline_s"] = c.deadline_s;
  }
  return j;
}

Result<CancelOrder> DecodeCancelOrder(const Json& j, const std::string& path) {
  CancelOrder c;
  JsonFields f(j, path, kRejectUnknown);
  f.Optional("job_id", &c.job_id, 1);
  f.Optional("attempt", &c.attempt, 0);
  f.Optional("exec_id", &c.exec_id, 1);
  f.Optional("grace_s", &c.grace_s, 0, int64_t{24} * 3600);
  f.Optional("deadline_s", &c.deadline_s, 0);
  f.Optional("task", &c.task, 0, kMaxTaskIndex);
  GP_RETURN_IF_ERROR(f.Finish());
  if ((c.job_id == 0) == (c.exec_id == 0)) {
    return Status::InvalidArgument(path + ": give job_id or exec_id");
  }
  return c;
}

OrderedJson EncodeSignalOrder(const SignalOrder& s) {
  OrderedJson j = {{"job_id", s.job_id},
                   {"attempt", s.attempt},
                   {"task_index", s.task_index},
                   {"signal", s.signal}};
  if (s.main_only) j["main_only"] = true;
  if (s.held_ms > 0) j["held_ms"] = s.held_ms;
  return j;
}

Result<SignalOrder> DecodeSignalOrder(const Json& j, const std::string& path) {
  SignalOrder s;
  JsonFields f(j, path, kRejectUnknown);
  f.Required("job_id", &s.job_id, 1);
  f.Required("attempt", &s.attempt, 1);
  f.Required("task_index", &s.task_index, 0, 4095);  // as a launch order's
  f.Required("signal", &s.signal, 1, 64);
  f.Optional("main_only", &s.main_only);
  f.Optional("held_ms", &s.held_ms, int64_t{0}, int64_t{3'600'000});
  GP_RETURN_IF_ERROR(f.Finish());
  return s;
}

}  // namespace gpupool::protocol
