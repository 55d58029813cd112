// Result<T> and Status: how fallible operations report failure inside Tessera.
//
// A Status is either OK or an error message that names the input, the value and what was allowed
// (for example: "TESSERA_MEM_LIMIT=\"-1GiB\": negative sizes are not allowed; use e.g. 2GiB").
// Result<T> holds either a T or a failed Status. Neither throws; CUDA/NVML return codes appear only
// at the ABI edge (src/shim, src/simgpu), never here.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace tessera {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message), true); }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  Status(std::string message, bool failed) : message_(std::move(message)), failed_(failed) {}
  std::string message_;
  bool failed_ = false;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: must be an error

  static Result Error(std::string message) { return Result(Status::Error(std::move(message))); }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  const std::string& error() const { return status_.message(); }

  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace tessera
