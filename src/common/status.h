// Status / StatusOr: errors as values at module boundaries (STYLE.md 14).
//
//   StatusOr<Config> load(...);            // returns a value or an error
//   DI_RETURN_IF_ERROR(validate(x));       // propagate a Status
//   DI_ASSIGN_OR_RETURN(auto cfg, load()); // unwrap a StatusOr or propagate its error
//
// Messages name what was wrong: the file, the tensor or field, and what was expected.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace deepinfer {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad input from the user: params, config, file contents
  kNotFound,          // a file, tensor, model or key that does not exist
  kOutOfRange,        // an index, length or size past its limit
  kFailedPrecondition,
  kUnimplemented,     // a feature or format deepinfer does not support (yet)
  kResourceExhausted, // memory, cache blocks, work limits
  kDataLoss,          // corrupt or truncated files
  kUnavailable,       // network / offline mode
  kPermissionDenied,
  kInternal,
  kCancelled,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message"
  std::string to_string() const;
  // Prefix the message with context: "while loading x: <message>".
  Status with_context(const std::string& context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

// A value or an error Status (never an OK status without a value).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& value) : value_(value) {}          // NOLINT: implicit by design
  StatusOr(T&& value) : value_(std::move(value)) {}    // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) {
      status_ = Status(StatusCode::kInternal, "StatusOr constructed from an OK status without a value");
    }
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const& { return status_; }
  Status status() && { return std::move(status_); }

  // Accessing the value of an error StatusOr is a programming error: it aborts with the message.
  T& value() & { check_ok(); return *value_; }
  const T& value() const& { check_ok(); return *value_; }
  T&& value() && { check_ok(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void check_ok() const;
  Status status_;
  std::optional<T> value_;
};

[[noreturn]] void status_or_value_of_error(const Status& status);

template <typename T>
void StatusOr<T>::check_ok() const {
  if (!status_.ok()) status_or_value_of_error(status_);
}

}  // namespace deepinfer

#define DI_STATUS_CONCAT_INNER_(a, b) a##b
#define DI_STATUS_CONCAT_(a, b) DI_STATUS_CONCAT_INNER_(a, b)

#define DI_RETURN_IF_ERROR(expr)                          \
  do {                                                    \
    ::deepinfer::Status di_status_ = (expr);              \
    if (!di_status_.ok()) return di_status_;              \
  } while (0)

#define DI_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

#define DI_ASSIGN_OR_RETURN(lhs, expr) \
  DI_ASSIGN_OR_RETURN_IMPL_(DI_STATUS_CONCAT_(di_statusor_, __LINE__), lhs, expr)
