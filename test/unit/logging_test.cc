// Logging filters by level and subsystem as WEFT_LOG_LEVEL / WEFT_LOG_SUBSYS and the config's [log] say.
// Each case runs in a forked process so that its stderr can be read back.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "logging.hpp"
#include "multi_process.hpp"

namespace weft {
namespace {

std::string logOutput(const std::function<void()>& setup) {
  auto results = test::runRanks(1, [&](int, int) {
    setup();
    reloadLogSettings();
    setLogRank(5);
    logInfo(LogSubsys::kBoot, "boot info {}", 1);
    logDebug(LogSubsys::kBoot, "boot debug {}", 2);
    logInfo(LogSubsys::kNet, "net info {}", 3);
    logError(LogSubsys::kPlugin, "plugin error {}", 4);
  });
  EXPECT_TRUE(results[0].ok()) << results[0].output;
  return results[0].output;
}

bool has(const std::string& out, const char* needle) { return out.find(needle) != std::string::npos; }

TEST(LoggingTest, DefaultShowsWarningsAndErrorsOnly) {
  std::string out = logOutput([] {
    unsetenv("WEFT_LOG_LEVEL");
    unsetenv("WEFT_LOG_SUBSYS");
  });
  EXPECT_FALSE(has(out, "boot info"));
  EXPECT_TRUE(has(out, "plugin error 4"));
  EXPECT_TRUE(has(out, ":5 error PLUGIN")) << out;  // pid:rank level subsystem
}

TEST(LoggingTest, LevelAndSubsystemFilter) {
  std::string out = logOutput([] {
    setenv("WEFT_LOG_LEVEL", "info", 1);
    setenv("WEFT_LOG_SUBSYS", "BOOT", 1);
  });
  EXPECT_TRUE(has(out, "boot info 1"));
  EXPECT_FALSE(has(out, "boot debug"));
  EXPECT_FALSE(has(out, "net info"));
  EXPECT_FALSE(has(out, "plugin error"));
}

TEST(LoggingTest, CaretExcludesSubsystems) {
  std::string out = logOutput([] {
    setenv("WEFT_LOG_LEVEL", "debug", 1);
    setenv("WEFT_LOG_SUBSYS", "^boot,plugin", 1);
  });
  EXPECT_FALSE(has(out, "boot"));
  EXPECT_FALSE(has(out, "plugin error"));
  EXPECT_TRUE(has(out, "net info 3"));
}

TEST(LoggingTest, ConfigSetsLevelAndEnvironmentWins) {
  std::string fromConfig = logOutput([] {
    unsetenv("WEFT_LOG_LEVEL");
    unsetenv("WEFT_LOG_SUBSYS");
    applyLogConfig("debug", "BOOT");
  });
  EXPECT_TRUE(has(fromConfig, "boot debug 2"));
  EXPECT_FALSE(has(fromConfig, "net info"));
  std::string envWins = logOutput([] {
    setenv("WEFT_LOG_LEVEL", "error", 1);
    unsetenv("WEFT_LOG_SUBSYS");
    applyLogConfig("debug", "");
  });
  EXPECT_FALSE(has(envWins, "boot debug"));
  EXPECT_TRUE(has(envWins, "plugin error 4"));
}

}  // namespace
}  // namespace weft
