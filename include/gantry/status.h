// File: gantry/status.h
//
// Status and StatusOr<T>: the result type of every Gantry API boundary.
// Codes carry the same numbers as grpc::StatusCode, so converting at the gRPC
// edge is a cast. An OK status allocates nothing.
//
// Thread safety: value types; distinct objects may be used concurrently.
#ifndef GANTRY_STATUS_H_
#define GANTRY_STATUS_H_

#include <cstdlib>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace gantry {

// Numbers equal grpc::StatusCode.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "INVALID_ARGUMENT", ... as gRPC spells them.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // Empty for OK.
  const std::string& message() const;
  // "OK" or "INVALID_ARGUMENT: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<prefix>: <message>"; OK stays OK.
  Status WithPrefix(std::string_view prefix) const;

  // Explicitly drop a status whose failure the caller does not care about.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  // Shared because State is immutable; copying a Status is then cheap.
  std::shared_ptr<const State> state_;
};

std::ostream& operator<<(std::ostream& os, const Status& status);

inline Status OkStatus() { return Status(); }
Status CancelledError(std::string message);
Status UnknownError(std::string message);
Status InvalidArgumentError(std::string message);
Status DeadlineExceededError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status ResourceExhaustedError(std::string message);
Status FailedPreconditionError(std::string message);
Status OutOfRangeError(std::string message);
Status UnimplementedError(std::string message);
Status InternalError(std::string message);
Status UnavailableError(std::string message);

// Holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // Implicit so that `return value;` and `return SomeError(...);` both work.
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) {
      status_ = InternalError("StatusOr constructed from an OK status without a value");
    }
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const& { return status_; }
  Status status() && { return std::move(status_); }

  // Precondition: ok(). Aborts otherwise (a programming error, not input).
  T& value() & {
    CheckOk();
    return *value_;
  }
  const T& value() const& {
    CheckOk();
    return *value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckOk() const {
    if (!value_) {
      std::abort();
    }
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace gantry

#define GANTRY_STATUS_CONCAT_INNER_(a, b) a##b
#define GANTRY_STATUS_CONCAT_(a, b) GANTRY_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` is not OK.
#define GANTRY_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::gantry::Status gantry_status_ = (expr);        \
    if (!gantry_status_.ok()) return gantry_status_; \
  } while (false)

// `GANTRY_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a StatusOr, or
// returns its error.
#define GANTRY_ASSIGN_OR_RETURN(lhs, expr) \
  GANTRY_ASSIGN_OR_RETURN_IMPL_(GANTRY_STATUS_CONCAT_(gantry_statusor_, __LINE__), lhs, expr)
// `tmp` is a name and `lhs` a declaration: neither can be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define GANTRY_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

#endif  // GANTRY_STATUS_H_
