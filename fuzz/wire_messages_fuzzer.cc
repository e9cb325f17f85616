// Fuzz target: the decoders the controller (and the agent) run on untrusted JSON bodies.
// The input's first byte picks the message, the rest is the body, parsed with the limits
// the server's BodyJson uses for that endpoint and decoded. Checks besides "no crash":
// errors are InvalidArgument with words, and what decodes
// survives the round trip: its encoding decodes again to the same encoding, so nothing
// accepted is written back as something the other side refuses or reads differently.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "fuzz/fuzz_check.h"
#include "jobs/job_json.h"
#include "jobs/job_validation.h"
#include "protocol/agent_protocol.h"
#include "protocol/endpoints.h"
#include "sched/admission/limits.h"

namespace {

using namespace gpupool;

// One decodable message: its BodyJson limits, decoder and encoder.
struct Message {
  const char* name;
  size_t max_bytes;
  int max_depth;
  std::function<Result<std::string>(const Json&)> decode_encode;
};

// Decodes `j` with `decode` and, when it succeeds, returns the encoding.
template <typename T, typename Dec, typename Enc>
Result<std::string> DecodeEncode(const Json& j, Dec decode, Enc encode) {
  Result<T> v = decode(j);
  if (!v.ok()) return v.status();
  return DumpJson(encode(*v));
}

const Message kMessages[] = {
    {"registration", 8 << 20, 64,
     [](const Json& j) {
       return DecodeEncode<protocol::Registration>(j, protocol::DecodeRegistration,
                                                   protocol::EncodeRegistration);
     }},
    {"event batch", 8 << 20, 16,
     [](const Json& j) {
       return DecodeEncode<protocol::EventBatch>(j, protocol::DecodeEventBatch,
                                                 protocol::EncodeEventBatch);
     }},
    {"telemetry batch", 8 << 20, 16,
     [](const Json& j) {
       return DecodeEncode<protocol::TelemetryBatch>(j, protocol::DecodeTelemetryBatch,
                                                     protocol::EncodeTelemetryBatch);
     }},
    {"exec output", 2 << 20, 4,
     [](const Json& j) {
       return DecodeEncode<protocol::ExecOutput>(j, protocol::DecodeExecOutput,
                                                 protocol::EncodeExecOutput);
     }},
    {"exec input item", 1 << 20, 4,
     [](const Json& j) {
       return DecodeEncode<protocol::ExecInputItem>(
           j, [](const Json& x) { return protocol::DecodeExecInputItem(x, "input"); },
           protocol::EncodeExecInputItem);
     }},
    {"job submission", 1 << 20, 32,
     [](const Json& j) -> Result<std::string> {
       Result<jobs::Job> job = jobs::JobFromJson(j, "job");
       if (!job.ok()) return job.status();
       GP_RETURN_IF_ERROR(jobs::ValidateSubmission(*job));
       return DumpJson(jobs::JobToJson(*job));
     }},
    {"limits", 1 << 20, 8,
     [](const Json& j) {
       return DecodeEncode<sched::Limits>(j, sched::LimitsFromJson, sched::LimitsToJson);
     }},
    // The agent's side: what its controller answers.
    {"work", 64u << 20, 64,
     [](const Json& j) {
       return DecodeEncode<protocol::Work>(j, protocol::DecodeWork, [](const protocol::Work& w) {
         return protocol::EncodeWork(w);
       });
     }},
    {"registration reply", 64u << 20, 64,
     [](const Json& j) {
       return DecodeEncode<protocol::RegistrationReply>(j, protocol::DecodeRegistrationReply,
                                                        protocol::EncodeRegistrationReply);
     }},
};
constexpr size_t kCount = sizeof(kMessages) / sizeof(kMessages[0]);

// A refused body is InvalidArgument (HTTP 400), with words; a registration (or its reply)
// without a protocol version is FailedPrecondition (409: upgrade the other side).
void RequireClearRefusal(const Status& s, const Message& m) {
  const bool registration = std::string_view(m.name).starts_with("registration");
  fuzz::Require(s.code() == StatusCode::kInvalidArgument ||
                    (registration && s.code() == StatusCode::kFailedPrecondition),
                std::string(m.name) + ": error code of: " + s.ToString());
  fuzz::Require(!s.message().empty(), std::string(m.name) + ": an error without words");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Message& m = kMessages[data[0] % kCount];
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  Result<Json> j = ParseJson(body, "request body", m.max_bytes, m.max_depth);
  if (!j.ok()) {
    fuzz::Require(j.status().code() == StatusCode::kInvalidArgument,
                  "ParseJson error code of: " + j.status().ToString());
    return 0;
  }
  Result<std::string> first = m.decode_encode(*j);
  // GPUPOOL_FUZZ_VERBOSE=1: what each input decoded to (to check the seeds).
  if (std::getenv("GPUPOOL_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "%s: %s\n", m.name,
                 first.ok() ? "decoded" : first.status().ToString().c_str());
  }
  if (!first.ok()) {
    RequireClearRefusal(first.status(), m);
    return 0;
  }
  // What was accepted is written back as the other side will read it.
  Result<Json> again = ParseJson(*first, "encoding", 64u << 20, 64);
  fuzz::Require(again.ok(), std::string(m.name) + ": encoding does not parse: " + *first);
  Result<std::string> second = m.decode_encode(*again);
  fuzz::Require(second.ok(), std::string(m.name) + ": encoding " + *first +
                                 " does not decode: " + second.status().ToString());
  fuzz::Require(*second == *first,
                std::string(m.name) + ": round trip changed " + *first + " into " + *second);
  return 0;
}
