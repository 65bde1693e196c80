#include <cstring>
#include <weft/error.hpp>

namespace weft {

const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kInvalidUsage: return "invalid usage";
    case ErrorCode::kConfigError: return "config error";
    case ErrorCode::kPluginError: return "plugin error";
    case ErrorCode::kTransportError: return "transport error";
    case ErrorCode::kSystemError: return "system error";
    case ErrorCode::kGpuError: return "gpu error";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kRemoteError: return "remote error";
    case ErrorCode::kProtocolError: return "protocol error";
    case ErrorCode::kNotSupported: return "not supported";
    case ErrorCode::kInternalError: return "internal error";
  }
  return "unknown error";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string(errorCodeName(code)) + ": " + message), code_(code), message_(message) {}

void throwSystemError(const std::string& what, int errnoValue) {
  throw Error(ErrorCode::kSystemError, what + ": " + std::strerror(errnoValue));
}

}  // namespace weft
