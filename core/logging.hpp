// Logging inside weft (not a public header): spdlog behind subsystem filters.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace weft {

/// Log subsystems, filtered by WEFT_LOG_SUBSYS (comma list, "ALL" or "^BOOT" to exclude).
enum class LogSubsys : unsigned {
  kInit = 1,
  kBoot = 2,
  kNet = 4,
  kP2p = 8,
  kColl = 16,
  kPlugin = 32,
  kProxy = 64,
  kConfig = 128
};

/// Levels, set by WEFT_LOG_LEVEL (trace, debug, info, warn, error, off; default warn).
enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };

namespace detail {
bool logEnabled(LogLevel level, LogSubsys subsys);
void logWrite(LogLevel level, LogSubsys subsys, std::string_view message);
}  // namespace detail

/// Sets the rank shown in every log line (the bootstrap calls this once the rank is known).
void setLogRank(int rank);

/// Sets the level and subsystems a config file's [log] table asks for; WEFT_LOG_LEVEL / WEFT_LOG_SUBSYS,
/// when set, still win. Empty strings mean "not set by the config".
void applyLogConfig(const std::string& level, const std::string& subsys);

/// Re-reads WEFT_LOG_LEVEL and WEFT_LOG_SUBSYS (tests that change them call this).
void reloadLogSettings();

template <class... Args>
void logAt(LogLevel level, LogSubsys subsys, fmt::format_string<Args...> format, Args&&... args) {
  if (detail::logEnabled(level, subsys)) {
    detail::logWrite(level, subsys, fmt::format(format, std::forward<Args>(args)...));
  }
}
template <class... Args>
void logTrace(LogSubsys s, fmt::format_string<Args...> f, Args&&... a) {
  logAt(LogLevel::kTrace, s, f, std::forward<Args>(a)...);
}
template <class... Args>
void logDebug(LogSubsys s, fmt::format_string<Args...> f, Args&&... a) {
  logAt(LogLevel::kDebug, s, f, std::forward<Args>(a)...);
}
template <class... Args>
void logInfo(LogSubsys s, fmt::format_string<Args...> f, Args&&... a) {
  logAt(LogLevel::kInfo, s, f, std::forward<Args>(a)...);
}
template <class... Args>
void logWarn(LogSubsys s, fmt::format_string<Args...> f, Args&&... a) {
  logAt(LogLevel::kWarn, s, f, std::forward<Args>(a)...);
}
template <class... Args>
void logError(LogSubsys s, fmt::format_string<Args...> f, Args&&... a) {
  logAt(LogLevel::kError, s, f, std::forward<Args>(a)...);
}

}  // namespace weft
