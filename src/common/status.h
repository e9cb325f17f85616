// Status and Result<T>: errors as values.
//
// Every fallible call in gpupool returns a Status (no value) or a Result<T> (a value or
// a Status). Messages say what failed and what to do about it, without a trailing
// period. Codes are a small fixed set so callers can branch on them (for example an
// HTTP layer mapping kInvalidArgument to 400). Both types are cheap to move and are
// not thread-safe to mutate concurrently, like any value type.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gpupool {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input from a user, file, peer or library
  kNotFound,            // a named thing does not exist
  kAlreadyExists,       // a thing to be created exists already
  kFailedPrecondition,  // the system is not in a state where the call can work
  kPermissionDenied,    // the caller may not do this
  kUnavailable,         // a library, device or service is absent or unreachable
  kResourceExhausted,   // a size, count or quota limit was hit
  kUnimplemented,       // the operation is not supported here
  kInternal,            // a broken invariant or an unexpected failure of ours
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "context: message". OK stays OK.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Holds either a T or a non-OK Status. Accessing value() of an error is a broken
// internal invariant and aborts with the status printed.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(data_).ok()) {
      data_ = Status::Internal("Result constructed from an OK status without a value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(data_);
  }

  T& value() & {
    CheckOk();
    return std::get<T>(data_);
  }
  const T& value() const& {
    CheckOk();
    return std::get<T>(data_);
  }
  T&& value() && {
    CheckOk();
    return std::get<T>(std::move(data_));
  }
  T value_or(T fallback) const& { return ok() ? std::get<T>(data_) : std::move(fallback); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckOk() const;
  std::variant<T, Status> data_;
};

namespace internal {
[[noreturn]] void DieOnBadResultAccess(const Status& status);
}  // namespace internal

template <typename T>
void Result<T>::CheckOk() const {
  if (!ok()) internal::DieOnBadResultAccess(std::get<Status>(data_));
}

}  // namespace gpupool

#define GP_CONCAT_INNER_(a, b) a##b
#define GP_CONCAT_(a, b) GP_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define GP_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::gpupool::Status gp_status_ = (expr);   \
    if (!gp_status_.ok()) return gp_status_; \
  } while (false)

// `GP_ASSIGN_OR_RETURN(auto x, Foo());` declares x from a Result or returns its error.
#define GP_ASSIGN_OR_RETURN(lhs, expr) \
  GP_ASSIGN_OR_RETURN_IMPL_(GP_CONCAT_(gp_result_, __LINE__), lhs, expr)
// `tmp` is a name and `lhs` a declaration: neither can take parentheses.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define GP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
