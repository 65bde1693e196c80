// The exception the cuda_ipc transport throws internally; the C entry points turn it into a result code and the
// thread's lastError text. Free of any GPU header, so the wire codec and its unit test build without a GPU.
#pragma once

#include <weft/plugin/transport.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace weft::cuda_ipc {

/// A failure with the ABI result code to return for it.
class IpcFailure : public std::runtime_error {
 public:
  IpcFailure(weftResult_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  /// The weftResult_t the entry point returns.
  weftResult_t code() const noexcept { return code_; }

 private:
  weftResult_t code_;
};

/// Throws weftSystemError with `what` and errno `err`'s text.
[[noreturn]] inline void throwErrno(const std::string& what, int err) {
  throw IpcFailure(weftSystemError, what + ": " + std::strerror(err));
}

}  // namespace weft::cuda_ipc
