//===- Status.h - success or an error message, and a value or its error ---===//
//
// Lamina's one error type, for the code that runs without LLVM: the
// schedule and plan libraries (plain C++17) and the runtime (generated
// programs may be built with -fno-exceptions). Errors travel by value with
// a human-readable message, never by exception. The compiler's MLIR code
// uses LogicalResult and diagnostics instead.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_SUPPORT_STATUS_H
#define LAMINA_SUPPORT_STATUS_H

#include <optional>
#include <string>
#include <utility>

namespace lamina {

/// Success, or failure with a message.
class [[nodiscard]] Status {
public:
  /// Success.
  Status() = default;
  static Status success() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.failed = true;
    s.text = std::move(message);
    return s;
  }
  bool ok() const { return !failed; }
  explicit operator bool() const { return ok(); }
  /// Empty on success.
  const std::string &message() const { return text; }

private:
  bool failed = false;
  std::string text;
};

/// A value, or the failed Status that explains why there is none.
template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T v) : val(std::move(v)) {}
  /// `failure` must not be ok(); an ok Status is turned into an error so that
  /// a misuse can never produce an Expected that claims a value it lacks.
  Expected(Status failure)
      : st(failure.ok() ? Status::error("Expected built from a success Status")
                        : std::move(failure)) {}

  bool ok() const { return val.has_value(); }
  explicit operator bool() const { return ok(); }
  const std::string &error() const { return st.message(); }
  Status status() const { return ok() ? Status::success() : st; }

  T &operator*() { return *val; }
  const T &operator*() const { return *val; }
  T *operator->() { return &*val; }
  const T *operator->() const { return &*val; }

private:
  std::optional<T> val;
  Status st;
};

} // namespace lamina

#endif // LAMINA_SUPPORT_STATUS_H
