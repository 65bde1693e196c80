/// Typed errors: a code plus a message that names what failed and where.
#pragma once

#include <stdexcept>
#include <string>

namespace weft {

/// What kind of failure an Error reports.
enum class ErrorCode {
  kInvalidArgument,  ///< the caller passed something unusable (bad size, rank, id, handle)
  kInvalidUsage,     ///< the call is not allowed in the current state
  kConfigError,      ///< a config file or environment variable is malformed
  kPluginError,      ///< a plugin could not be found, loaded or checked
  kTransportError,   ///< a transport operation failed
  kSystemError,      ///< an operating-system call failed (the message carries errno's text)
  kGpuError,         ///< the GPU runtime reported an error
  kTimeout,          ///< a wait ran out of budget (the message names who did not answer)
  kRemoteError,      ///< a peer failed, disconnected or sent something malformed
  kProtocolError,    ///< a message did not follow the wire format
  kNotSupported,     ///< the operation is not offered by this transport or build
  kInternalError,    ///< a broken invariant inside weft
};

/// Short lowercase name of a code, e.g. "timeout".
const char* errorCodeName(ErrorCode code);

/// The exception weft throws. `what()` reads "<code name>: <message>".
class Error : public std::runtime_error {
 public:
  /// Makes an error of `code` whose message says what failed.
  Error(ErrorCode code, const std::string& message);

  /// The kind of failure.
  ErrorCode code() const noexcept { return code_; }

  /// The message without the code prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

/// Throws kSystemError with `what` and the text of `errnoValue`.
[[noreturn]] void throwSystemError(const std::string& what, int errnoValue);

}  // namespace weft
