#include "logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>

namespace weft {
namespace {

struct LogState {
  std::atomic<int> level{static_cast<int>(LogLevel::kWarn)};
  std::atomic<unsigned> subsysMask{~0u};
  std::atomic<int> rank{-1};
  std::string configLevel, configSubsys;  ///< from a config file's [log] table; the environment wins
  std::mutex configMutex;
  std::shared_ptr<spdlog::logger> logger;
  std::once_flag once;
};

LogState& state() {
  static LogState s;
  return s;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

unsigned subsysBit(const std::string& name) {
  static const std::pair<const char*, LogSubsys> kNames[] = {
      {"init", LogSubsys::kInit},   {"boot", LogSubsys::kBoot},    {"net", LogSubsys::kNet},
      {"p2p", LogSubsys::kP2p},     {"coll", LogSubsys::kColl},    {"plugin", LogSubsys::kPlugin},
      {"proxy", LogSubsys::kProxy}, {"config", LogSubsys::kConfig}};
  if (name == "all") return ~0u;
  for (auto& [n, s] : kNames) {
    if (name == n) return static_cast<unsigned>(s);
  }
  return 0;
}

const char* subsysName(LogSubsys s) {
  switch (s) {
    case LogSubsys::kInit: return "INIT";
    case LogSubsys::kBoot: return "BOOT";
    case LogSubsys::kNet: return "NET";
    case LogSubsys::kP2p: return "P2P";
    case LogSubsys::kColl: return "COLL";
    case LogSubsys::kPlugin: return "PLUGIN";
    case LogSubsys::kProxy: return "PROXY";
    case LogSubsys::kConfig: return "CONFIG";
  }
  return "?";
}

void parseSettings(LogState& s) {
  std::string levelFromConfig, subsysFromConfig;
  {
    std::lock_guard<std::mutex> lock(s.configMutex);
    levelFromConfig = s.configLevel;
    subsysFromConfig = s.configSubsys;
  }
  const char* level = std::getenv("WEFT_LOG_LEVEL");
  if ((level == nullptr || *level == '\0') && !levelFromConfig.empty()) level = levelFromConfig.c_str();
  LogLevel parsed = LogLevel::kWarn;
  if (level != nullptr) {
    std::string l = lower(level);
    if (l == "trace")
      parsed = LogLevel::kTrace;
    else if (l == "debug")
      parsed = LogLevel::kDebug;
    else if (l == "info")
      parsed = LogLevel::kInfo;
    else if (l == "warn" || l == "warning")
      parsed = LogLevel::kWarn;
    else if (l == "error")
      parsed = LogLevel::kError;
    else if (l == "off" || l == "none")
      parsed = LogLevel::kOff;
  }
  s.level = static_cast<int>(parsed);
  unsigned mask = ~0u;
  const char* subsys = std::getenv("WEFT_LOG_SUBSYS");
  if ((subsys == nullptr || *subsys == '\0') && !subsysFromConfig.empty()) subsys = subsysFromConfig.c_str();
  if (subsys != nullptr && *subsys != '\0') {
    std::string list = lower(subsys);
    bool exclude = list[0] == '^';
    if (exclude) list.erase(0, 1);
    unsigned bits = 0;
    size_t pos = 0;
    while (pos <= list.size()) {
      size_t comma = list.find(',', pos);
      if (comma == std::string::npos) comma = list.size();
      bits |= subsysBit(list.substr(pos, comma - pos));
      pos = comma + 1;
    }
    mask = exclude ? ~bits : bits;
  }
  s.subsysMask = mask;
}

void initOnce(LogState& s) {
  std::call_once(s.once, [&s] {
    parseSettings(s);
    s.logger = spdlog::stderr_color_mt("weft");
    s.logger->set_level(spdlog::level::trace);
    s.logger->set_pattern("%v");
  });
}

}  // namespace

namespace detail {

bool logEnabled(LogLevel level, LogSubsys subsys) {
  LogState& s = state();
  initOnce(s);
  return static_cast<int>(level) >= s.level.load(std::memory_order_relaxed) &&
         (s.subsysMask.load(std::memory_order_relaxed) & static_cast<unsigned>(subsys)) != 0;
}

void logWrite(LogLevel level, LogSubsys subsys, std::string_view message) {
  LogState& s = state();
  initOnce(s);
  static const spdlog::level::level_enum kLevels[] = {spdlog::level::trace, spdlog::level::debug, spdlog::level::info,
                                                      spdlog::level::warn,  spdlog::level::err,   spdlog::level::off};
  static const char* kLevelNames[] = {"trace", "debug", "info", "warn", "error", "off"};
  s.logger->log(kLevels[static_cast<int>(level)], "weft {}:{} {} {} {}", ::getpid(), s.rank.load(),
                kLevelNames[static_cast<int>(level)], subsysName(subsys), message);
}

}  // namespace detail

void setLogRank(int rank) { state().rank = rank; }

void applyLogConfig(const std::string& level, const std::string& subsys) {
  LogState& s = state();
  initOnce(s);
  {
    std::lock_guard<std::mutex> lock(s.configMutex);
    s.configLevel = level;
    s.configSubsys = subsys;
  }
  parseSettings(s);
}

void reloadLogSettings() {
  LogState& s = state();
  initOnce(s);
  parseSettings(s);
}

}  // namespace weft
