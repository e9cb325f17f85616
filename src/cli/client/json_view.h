// Lenient readers of the server's JSON answers for display. A missing or mistyped field
// reads as the fallback instead of failing, so a newer server that adds or changes a
// field still gets a readable table from an older client (`--json` shows the exact
// answer). Never throws, unlike nlohmann's value().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "common/json.h"

namespace gpupool::cli {

inline const Json* Field(const Json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

inline std::string GetString(const Json& j, std::string_view key, std::string fallback = "") {
  const Json* v = Field(j, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::move(fallback);
}

inline int64_t GetInt(const Json& j, std::string_view key, int64_t fallback = 0) {
  const Json* v = Field(j, key);
  if (v == nullptr) return fallback;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_unsigned()) {
    const auto u = v->get<uint64_t>();
    return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  }
  return fallback;
}

inline double GetDouble(const Json& j, std::string_view key, double fallback = 0) {
  const Json* v = Field(j, key);
  return v != nullptr && v->is_number() ? v->get<double>() : fallback;
}

inline bool GetBool(const Json& j, std::string_view key, bool fallback = false) {
  const Json* v = Field(j, key);
  return v != nullptr && v->is_boolean() ? v->get<bool>() : fallback;
}

// The member if it is an array, else an empty array.
inline const Json& GetArray(const Json& j, std::string_view key) {
  static const Json kEmpty = Json::array();
  const Json* v = Field(j, key);
  return v != nullptr && v->is_array() ? *v : kEmpty;
}

// The member if it is an object, else an empty object.
inline const Json& GetObject(const Json& j, std::string_view key) {
  static const Json kEmpty = Json::object();
  const Json* v = Field(j, key);
  return v != nullptr && v->is_object() ? *v : kEmpty;
}

}  // namespace gpupool::cli
