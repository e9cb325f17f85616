#include "common/json.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace gpupool {
namespace {

// Rejects documents nested deeper than the limit before nlohmann recurses into them.
bool NestingWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace

std::string_view JsonTypeName(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "object";
    case Json::value_t::array:
      return "array";
    case Json::value_t::string:
      return "string";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::binary:
      return "binary";
    case Json::value_t::discarded:
      return "discarded";
  }
  return "unknown";
}

Result<Json> ParseJson(std::string_view text, std::string_view source, size_t max_bytes,
                       int max_depth) {
  if (text.size() > max_bytes) {
    return Status::ResourceExhausted(std::string(source) + ": JSON is " +
                                     std::to_string(text.size()) + " bytes, over the limit of " +
                                     std::to_string(max_bytes));
  }
  if (!NestingWithin(text, max_depth)) {
    return Status::InvalidArgument(std::string(source) + ": JSON nests deeper than " +
                                   std::to_string(max_depth) + " levels");
  }
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    std::string what = e.what();
    // nlohmann prefixes "[json.exception.parse_error.101] "; keep the readable part.
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    return Status::InvalidArgument(std::string(source) + ": invalid JSON at byte " +
                                   std::to_string(e.byte) + ": " + what);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string(source) + ": invalid JSON: " + e.what());
  }
}

namespace {

// Follows a document's nesting and stops at the first top-level key of interest.
class TopLevelKeyFinder {
 public:
  explicit TopLevelKeyFinder(std::initializer_list<std::string_view> keys) : keys_(keys) {}
  bool found() const { return found_; }

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(std::size_t) { return Enter(true); }
  bool start_array(std::size_t) { return Enter(false); }
  bool end_object() { return Leave(); }
  bool end_array() { return Leave(); }
  bool key(Json::string_t& k) {
    if (depth_ != 1 || !top_is_object_) return true;
    for (std::string_view want : keys_) {
      if (k == want) {
        found_ = true;
        return false;  // enough: stop reading
      }
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

 private:
  bool Enter(bool object) {
    if (depth_++ == 0) top_is_object_ = object;
    return true;
  }
  bool Leave() {
    --depth_;
    return true;
  }

  std::initializer_list<std::string_view> keys_;
  int depth_ = 0;
  bool top_is_object_ = false;
  bool found_ = false;
};

}  // namespace

bool JsonHasTopLevelKey(std::string_view text, std::initializer_list<std::string_view> keys) {
  TopLevelKeyFinder finder(keys);
  try {
    Json::sax_parse(text.begin(), text.end(), &finder);
  } catch (const std::exception&) {
    return false;
  }
  return finder.found();
}

Result<Json> ReadJsonFile(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open '" + path + "': check the path and permissions");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return Status::Unavailable("cannot read '" + path + "'");
  return ParseJson(buf.str(), path, max_bytes);
}

std::string DumpJson(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

std::string DumpJson(const OrderedJson& j, int indent) {
  return j.dump(indent, ' ', false, OrderedJson::error_handler_t::replace);
}

JsonFields::JsonFields(const Json& object, std::string path, bool reject_unknown)
    : object_(object), path_(std::move(path)), reject_unknown_(reject_unknown) {
  known_.reserve(512);
  if (object_.is_object()) found_.reserve(object_.size() + 4);
  if (!object_.is_object()) {
    status_ = Status::InvalidArgument((path_.empty() ? std::string("document") : path_) +
                                      ": expected an object, found " +
                                      std::string(JsonTypeName(object_)));
  }
}

std::string JsonFields::PathOf(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  return path_ + "." + std::string(key);
}

void JsonFields::Fail(std::string_view key, std::string_view message) {
  if (!status_.ok()) return;  // keep the first error
  status_ = Status::InvalidArgument(PathOf(key) + ": " + std::string(message));
}

const Json* JsonFields::Find(std::string_view key) {
  known_.append(key).push_back('\0');
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(key);
  if (it == object_.end()) return nullptr;
  found_.push_back(&*it);
  if (it->is_null()) return nullptr;
  return &*it;
}

const Json* JsonFields::Member(std::string_view key) { return Find(key); }

const Json* JsonFields::Array(std::string_view key) {
  const Json* j = Find(key);
  if (j != nullptr && !j->is_array()) {
    Fail(key, "expected an array, found " + std::string(JsonTypeName(*j)));
    return nullptr;
  }
  return j;
}

template <typename T>
void JsonFields::GetInt(std::string_view key, T* out, bool required, T min, T max) {
  const Json* j = Find(key);
  if (j == nullptr) {
    if (required) Fail(key, "required field is missing");
    return;
  }
  if (j->is_number_float()) {
    // A whole number past int64 (99999999999999999999, 1e30) is read as a double: say it
    // is out of range rather than fractional.
    const double d = j->get<double>();
    if (std::isfinite(d) && d == std::trunc(d) &&
        (d > static_cast<double>(max) || d < static_cast<double>(min))) {
      std::ostringstream text;
      text << d;
      Fail(key, text.str() + " is outside the range " + std::to_string(min) + ".." +
                    std::to_string(max));
      return;
    }
    Fail(key, "expected an integer, found a fractional number");
    return;
  }
  if (!j->is_number_integer()) {
    Fail(key, "expected an integer, found " + std::string(JsonTypeName(*j)));
    return;
  }
  if (j->is_number_unsigned()) {
    const uint64_t v = j->get<uint64_t>();
    const bool below_min = min > 0 && v < static_cast<uint64_t>(min);
    if (v > static_cast<uint64_t>(max) || below_min) {
      if constexpr (std::is_unsigned_v<T>) {
        Fail(key, std::to_string(v) + " is above the maximum of " + std::to_string(max));
      } else {
        Fail(key, std::to_string(v) + " is outside the range " + std::to_string(min) + ".." +
                      std::to_string(max));
      }
      return;
    }
    *out = static_cast<T>(v);
    return;
  }
  const int64_t v = j->get<int64_t>();
  if constexpr (std::is_unsigned_v<T>) {
    if (v < 0) {
      Fail(key, std::to_string(v) + " is negative; expected a value of 0 or more");
      return;
    }
    *out = static_cast<T>(v);
  } else {
    if (v < static_cast<int64_t>(min) || v > static_cast<int64_t>(max)) {
      Fail(key, std::to_string(v) + " is outside the range " + std::to_string(min) + ".." +
                    std::to_string(max));
      return;
    }
    *out = static_cast<T>(v);
  }
}

void JsonFields::Required(std::string_view key, std::string* out) {
  const Json* j = Find(key);
  if (j == nullptr) return Fail(key, "required field is missing");
  if (!j->is_string())
    return Fail(key, "expected a string, found " + std::string(JsonTypeName(*j)));
  *out = j->get<std::string>();
}
void JsonFields::Required(std::string_view key, int64_t* out, int64_t min, int64_t max) {
  GetInt<int64_t>(key, out, true, min, max);
}
void JsonFields::Required(std::string_view key, int* out, int min, int max) {
  GetInt<int>(key, out, true, min, max);
}
void JsonFields::Required(std::string_view key, uint64_t* out, uint64_t max) {
  GetInt<uint64_t>(key, out, true, 0, max);
}
void JsonFields::Required(std::string_view key, double* out) {
  const Json* j = Find(key);
  if (j == nullptr) return Fail(key, "required field is missing");
  if (!j->is_number())
    return Fail(key, "expected a number, found " + std::string(JsonTypeName(*j)));
  *out = j->get<double>();
}
void JsonFields::Required(std::string_view key, bool* out) {
  const Json* j = Find(key);
  if (j == nullptr) return Fail(key, "required field is missing");
  if (!j->is_boolean()) {
    return Fail(key, "expected true or false, found " + std::string(JsonTypeName(*j)));
  }
  *out = j->get<bool>();
}

void JsonFields::Optional(std::string_view key, std::string* out) {
  if (Find(key) != nullptr) Required(key, out);
}
void JsonFields::Optional(std::string_view key, int64_t* out, int64_t min, int64_t max) {
  GetInt<int64_t>(key, out, false, min, max);
}
void JsonFields::Optional(std::string_view key, int* out, int min, int max) {
  GetInt<int>(key, out, false, min, max);
}
void JsonFields::Optional(std::string_view key, uint64_t* out, uint64_t max) {
  GetInt<uint64_t>(key, out, false, 0, max);
}
void JsonFields::Optional(std::string_view key, double* out) {
  if (Find(key) != nullptr) Required(key, out);
}
void JsonFields::Optional(std::string_view key, bool* out) {
  if (Find(key) != nullptr) Required(key, out);
}
void JsonFields::Optional(std::string_view key, std::optional<int>* out, int min, int max) {
  if (Find(key) == nullptr) return;
  int v = 0;
  GetInt<int>(key, &v, true, min, max);
  if (status_.ok()) *out = v;
}
void JsonFields::Optional(std::string_view key, std::optional<double>* out) {
  if (Find(key) == nullptr) return;
  double v = 0;
  Required(key, &v);
  if (status_.ok()) *out = v;
}
void JsonFields::Optional(std::string_view key, std::optional<bool>* out) {
  if (Find(key) == nullptr) return;
  bool v = false;
  Required(key, &v);
  if (status_.ok()) *out = v;
}
void JsonFields::Optional(std::string_view key, std::vector<std::string>* out) {
  const Json* j = Array(key);
  if (j == nullptr) return;
  std::vector<std::string> values;
  for (size_t i = 0; i < j->size(); ++i) {
    const Json& e = (*j)[i];
    if (!e.is_string()) {
      return Fail(std::string(key) + "[" + std::to_string(i) + "]",
                  "expected a string, found " + std::string(JsonTypeName(e)));
    }
    values.push_back(e.get<std::string>());
  }
  *out = std::move(values);
}

Status JsonFields::Finish() {
  if (!status_.ok()) return status_;
  if (reject_unknown_ && object_.is_object()) {
    std::sort(found_.begin(), found_.end());
    found_.erase(std::unique(found_.begin(), found_.end()), found_.end());
    if (found_.size() == object_.size()) return Status::Ok();  // every member was asked for
    std::set<std::string, std::less<>> known;
    for (size_t at = 0, end; (end = known_.find('\0', at)) != std::string::npos; at = end + 1) {
      known.emplace(known_, at, end - at);
    }
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (known.find(it.key()) == known.end()) {
        std::string allowed;
        for (const auto& k : known) allowed += (allowed.empty() ? "" : ", ") + k;
        return Status::InvalidArgument(PathOf(it.key()) +
                                       ": unknown field; the known fields here are " + allowed);
      }
    }
  }
  return Status::Ok();
}

}  // namespace gpupool
