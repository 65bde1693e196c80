// The exception the host transport throws internally; the C entry points turn it into a result code and lastError.
#pragma once

#include <weft/plugin/transport.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace weft::host {

/// A failure with the ABI result code to return for it.
class HostFailure : public std::runtime_error {
 public:
  HostFailure(weftResult_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  weftResult_t code() const noexcept { return code_; }

 private:
  weftResult_t code_;
};

/// Throws weftSystemError with `what` and errno's text.
[[noreturn]] inline void throwErrno(const std::string& what, int err) {
  throw HostFailure(weftSystemError, what + ": " + std::strerror(err));
}

}  // namespace weft::host
