// The exception the ibverbs transport throws internally; the C entry points turn it into a result code and lastError.
#pragma once

#include <weft/plugin/transport.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

namespace weft::ibverbs {

/// A failure with the ABI result code to return for it.
class IbvFailure : public std::runtime_error {
 public:
  IbvFailure(weftResult_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  /// The weftResult_t the entry point returns for this failure.
  weftResult_t code() const noexcept { return code_; }

 private:
  weftResult_t code_;
};

/// Throws weftSystemError with `what` and the text of errno value `err`.
[[noreturn]] inline void throwErrno(const std::string& what, int err) {
  throw IbvFailure(weftSystemError, what + ": " + std::strerror(err));
}

/// The clock every wait of the transport is measured on.
using Clock = std::chrono::steady_clock;

/// `timeoutNs` from now, clamped to a year so that time_point arithmetic cannot overflow.
inline Clock::time_point deadlineAfter(uint64_t timeoutNs) {
  constexpr uint64_t kMax = uint64_t{365} * 24 * 3600 * 1000000000ull;
  return Clock::now() + std::chrono::nanoseconds(timeoutNs > kMax ? kMax : timeoutNs);
}

}  // namespace weft::ibverbs
