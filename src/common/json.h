// JSON helpers over nlohmann::json: parsing without exceptions, and a field reader that
// turns missing, mistyped, out-of-range and unknown fields into errors that name the
// field's full path ("gpus[3].memory_total_bytes") and say what was expected.
//
// nlohmann throws; this file is the edge where those exceptions are caught, so callers
// never see one.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool {

using Json = nlohmann::json;
// Keeps object keys in insertion order, for output that reads well and diffs well.
using OrderedJson = nlohmann::ordered_json;

// Parses `text`. `source` names the input in errors (a file name, "request body").
// Rejects input larger than `max_bytes` and nesting deeper than `max_depth`.
Result<Json> ParseJson(std::string_view text, std::string_view source, size_t max_bytes = 64u << 20,
                       int max_depth = 64);

// Whether `text` is a JSON object with a member named one of `keys` at its top level
// (nested objects do not count). Reads without building the document and stops at the
// first such key; text that is not JSON, or not an object, has none.
bool JsonHasTopLevelKey(std::string_view text, std::initializer_list<std::string_view> keys);

// Reads `path` and parses it. Errors name the file.
Result<Json> ReadJsonFile(const std::string& path, size_t max_bytes = 64u << 20);

// Serialises without throwing: invalid UTF-8 in strings is replaced, not an error.
std::string DumpJson(const Json& j, int indent = -1);
std::string DumpJson(const OrderedJson& j, int indent = -1);

// Reads the fields of one JSON object. Every getter records the key as known; Finish()
// then reports the first error seen, or an unknown key if `reject_unknown` is set.
// Usage:
//   JsonFields f(obj, "gpus[0]");
//   f.Required("name", &gpu.name);
//   f.Optional("numa_node", &gpu.numa_node);
//   GP_RETURN_IF_ERROR(f.Finish());
class JsonFields {
 public:
  JsonFields(const Json& object, std::string path, bool reject_unknown = true);

  void Required(std::string_view key, std::string* out);
  void Required(std::string_view key, int64_t* out, int64_t min = INT64_MIN,
                int64_t max = INT64_MAX);
  void Required(std::string_view key, int* out, int min = INT32_MIN, int max = INT32_MAX);
  void Required(std::string_view key, uint64_t* out, uint64_t max = UINT64_MAX);
  void Required(std::string_view key, double* out);
  void Required(std::string_view key, bool* out);

  // Optional getters leave *out unchanged when the key is absent or null.
  void Optional(std::string_view key, std::string* out);
  void Optional(std::string_view key, int64_t* out, int64_t min = INT64_MIN,
                int64_t max = INT64_MAX);
  void Optional(std::string_view key, int* out, int min = INT32_MIN, int max = INT32_MAX);
  void Optional(std::string_view key, uint64_t* out, uint64_t max = UINT64_MAX);
  void Optional(std::string_view key, double* out);
  void Optional(std::string_view key, bool* out);
  void Optional(std::string_view key, std::optional<int>* out, int min = INT32_MIN,
                int max = INT32_MAX);
  void Optional(std::string_view key, std::optional<double>* out);
  void Optional(std::string_view key, std::optional<bool>* out);
  void Optional(std::string_view key, std::vector<std::string>* out);

  // Returns the member (or nullptr when absent/null) and marks the key known; for
  // nested objects and arrays the caller parses itself.
  const Json* Member(std::string_view key);
  // Returns the member if it is an array (or nullptr when absent); records an error
  // naming the field if it is present with another type.
  const Json* Array(std::string_view key);

  // Records an error about `key` found by the caller ("gpus[0].uuid: <message>").
  void Fail(std::string_view key, std::string_view message);

  // Path of a member, for nested readers: "gpus[0]" + "mig" -> "gpus[0].mig".
  std::string PathOf(std::string_view key) const;

  Status Finish();
  bool ok() const { return status_.ok(); }

 private:
  const Json* Find(std::string_view key);
  template <typename T>
  void GetInt(std::string_view key, T* out, bool required, T min, T max);

  const Json& object_;
  std::string path_;
  bool reject_unknown_;
  // Every key asked for, each followed by a NUL, repeats included: read only for an
  // unknown field's message.
  std::string known_;
  // The members found, repeats included: Finish() counts the distinct ones against the
  // object's size, so that a load of many objects builds no set of names per object.
  std::vector<const Json*> found_;
  Status status_;
};

// JSON type name for messages: "string", "number", "object", ...
std::string_view JsonTypeName(const Json& j);

}  // namespace gpupool
