// The plugin loader against real shared objects: the broken plugins of test/plugins and the real host transport.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <weft/error.hpp>

#include "logging.hpp"
#include "multi_process.hpp"
#include "plugin_loader.hpp"
#include "transport_plugin.hpp"

namespace weft {
namespace {

const std::string kTestDir = WEFT_TEST_PLUGIN_DIR;

/// Runs `f`, which must throw weft::Error of `code`; returns its message.
template <class F>
std::string errorOf(ErrorCode code, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no weft::Error thrown";
  return "";
}

/// Sets WEFT_PLUGIN_PATH for one test and restores the previous value.
class ScopedPluginPath {
 public:
  explicit ScopedPluginPath(const std::string& value) {
    if (const char* old = std::getenv("WEFT_PLUGIN_PATH")) old_ = old, hadOld_ = true;
    setenv("WEFT_PLUGIN_PATH", value.c_str(), 1);
  }
  ~ScopedPluginPath() {
    if (hadOld_) {
      setenv("WEFT_PLUGIN_PATH", old_.c_str(), 1);
    } else {
      unsetenv("WEFT_PLUGIN_PATH");
    }
  }

 private:
  std::string old_;
  bool hadOld_ = false;
};

/// A fresh directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/weft-plugin-test-XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(PluginLoaderTest, MissingPluginListsEveryDirectorySearched) {
  ScopedPluginPath env("/tmp/weft-env-dir-1:/tmp/weft-env-dir-2");
  std::string msg =
      errorOf(ErrorCode::kPluginError, [] { loadTransportPlugin("nosuchtransport", {"/tmp/weft-extra-dir"}, {}); });
  EXPECT_NE(msg.find("libweft-transport-nosuchtransport.so"), std::string::npos) << msg;
  for (const char* dir : {"/tmp/weft-extra-dir", "/tmp/weft-env-dir-1", "/tmp/weft-env-dir-2", WEFT_PLUGIN_BUILD_DIR}) {
    EXPECT_NE(msg.find(dir), std::string::npos) << dir << " missing from: " << msg;
  }
  // Search order: explicit list, then WEFT_PLUGIN_PATH, then the build tree.
  EXPECT_LT(msg.find("/tmp/weft-extra-dir"), msg.find("/tmp/weft-env-dir-1"));
  EXPECT_LT(msg.find("/tmp/weft-env-dir-2"), msg.find(WEFT_PLUGIN_BUILD_DIR));
}

// A plugin directory the user named that does not exist is skipped, but not silently: a mistyped WEFT_PLUGIN_PATH
// once loaded the build tree's plugin in place of the variant it named, and a comparison measured one plugin twice.
// Runs in a forked process to read its stderr; the warning comes once per directory.
TEST(PluginLoaderTest, ANamedPluginDirectoryThatIsMissingIsWarnedAboutOnce) {
  const std::string missing = "/tmp/weft-no-such-plugin-dir-" + std::to_string(getpid());
  auto results = test::runRanks(1, [&](int, int) {
    unsetenv("WEFT_LOG_LEVEL");
    unsetenv("WEFT_LOG_SUBSYS");
    reloadLogSettings();
    setenv("WEFT_PLUGIN_PATH", (missing + ":" + kTestDir).c_str(), 1);
    auto first = loadTransportPlugin("host", {}, {});
    auto second = loadTransportPlugin("host", {}, {});
    EXPECT_EQ(first->path(), std::string(WEFT_PLUGIN_BUILD_DIR) + "/libweft-transport-host.so");
  });
  ASSERT_TRUE(results[0].ok()) << results[0].output;
  const std::string& out = results[0].output;
  const std::string warning = "plugin directory '" + missing + "'";
  const size_t at = out.find(warning);
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_NE(out.find("is not a directory", at), std::string::npos) << out;
  EXPECT_EQ(out.find(warning, at + 1), std::string::npos) << "warned twice: " << out;
  EXPECT_EQ(out.find("plugin directory '" + kTestDir + "'"), std::string::npos) << "an existing directory: " << out;
}

TEST(PluginLoaderTest, NameWithPathCharactersIsRefused) {
  std::string msg = errorOf(ErrorCode::kInvalidArgument, [] { loadTransportPlugin("../../etc/x", {kTestDir}, {}); });
  EXPECT_NE(msg.find("../../etc/x"), std::string::npos) << msg;
}

TEST(PluginLoaderTest, WrongAbiVersionSaysFoundAndExpected) {
  std::string msg = errorOf(ErrorCode::kPluginError, [] { loadTransportPlugin("badabi", {kTestDir}, {}); });
  EXPECT_NE(msg.find("ABI version 99, expected 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find(kTestDir + "/libweft-transport-badabi.so"), std::string::npos) << msg;
}

TEST(PluginLoaderTest, MissingSymbolIsNamed) {
  std::string msg = errorOf(ErrorCode::kPluginError, [] { loadTransportPlugin("nosymbol", {kTestDir}, {}); });
  EXPECT_NE(msg.find("does not export weftTransportPlugin_v1"), std::string::npos) << msg;
}

TEST(PluginLoaderTest, NotASharedObjectCarriesDlerrorText) {
  std::string msg = errorOf(ErrorCode::kPluginError, [] { loadTransportPlugin("notelf", {kTestDir}, {}); });
  EXPECT_NE(msg.find("dlopen failed"), std::string::npos) << msg;
  // glibc says "invalid ELF header" or "file too short"; either way it names the file.
  EXPECT_TRUE(msg.find("ELF") != std::string::npos || msg.find("too short") != std::string::npos) << msg;
  EXPECT_NE(msg.find("libweft-transport-notelf.so:"), std::string::npos) << msg;
}

TEST(PluginLoaderTest, TooSmallTableIsRefused) {
  std::string msg = errorOf(ErrorCode::kPluginError, [] { loadTransportPlugin("smalltable", {kTestDir}, {}); });
  EXPECT_NE(msg.find("table of 16 bytes, expected at least 200"), std::string::npos) << msg;
}

TEST(PluginLoaderTest, InitFailureCarriesThePluginsMessage) {
  std::string msg = errorOf(ErrorCode::kPluginError, [] { loadTransportPlugin("initfail", {kTestDir}, {}); });
  EXPECT_NE(msg.find("failed to initialize (system error)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the device /dev/initfail0 is missing"), std::string::npos) << msg;
}

TEST(PluginLoaderTest, WeftPluginPathIsHonoured) {
  // Not found without the test directory on the path...
  errorOf(ErrorCode::kPluginError, [] { loadTransportPlugin("minimal", {}, {}); });
  // ...found through WEFT_PLUGIN_PATH alone (an empty and a missing entry are skipped).
  ScopedPluginPath env("::/nonexistent-weft-dir:" + kTestDir);
  auto plugin = loadTransportPlugin("minimal", {}, {});
  EXPECT_EQ(plugin->path(), kTestDir + "/libweft-transport-minimal.so");
  EXPECT_EQ(plugin->name(), "minimal");
}

TEST(PluginLoaderTest, ExplicitPathComesBeforeWeftPluginPath) {
  TempDir dir;
  std::filesystem::copy_file(kTestDir + "/libweft-transport-minimal.so", dir.path() + "/libweft-transport-minimal.so");
  ScopedPluginPath env(kTestDir);
  auto plugin = loadTransportPlugin("minimal", {dir.path()}, {});
  EXPECT_EQ(plugin->path(), dir.path() + "/libweft-transport-minimal.so");

  auto listed = listTransportPlugins({dir.path()});
  int copies = 0;
  for (const auto& f : listed) {
    if (f.name != "minimal") continue;
    EXPECT_EQ(f.shadowed, copies > 0) << f.path;
    EXPECT_EQ(f.path, (copies == 0 ? dir.path() : kTestDir) + "/libweft-transport-minimal.so");
    ++copies;
  }
  EXPECT_EQ(copies, 2);
}

TEST(PluginLoaderTest, ListFindsEveryPluginOnThePath) {
  auto listed = listTransportPlugins({kTestDir});
  std::set<std::string> names;
  for (const auto& f : listed) names.insert(f.name);
  for (const char* n : {"minimal", "badabi", "nosymbol", "notelf", "smalltable", "initfail", "future", "host"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
}

TEST(PluginLoaderTest, MinimalPluginDevicesAndUnsupportedOperations) {
  auto plugin = loadTransportPlugin("minimal", {kTestDir}, {});
  ASSERT_EQ(plugin->devices().size(), 1u);
  const auto& d = plugin->devices()[0];
  EXPECT_EQ(d.name, "minimal0");
  EXPECT_TRUE(d.gpuMemory);
  EXPECT_FALSE(d.hostMemory);
  EXPECT_FALSE(d.loadStore);
  EXPECT_EQ(d.numaNode, 3);
  EXPECT_EQ(d.gpuDevice, 7);
  EXPECT_FALSE(d.gpuSourceOnly);  // a 1.0 plugin never sets it
  std::string msg = errorOf(ErrorCode::kNotSupported, [&] { plugin->createEndpoint(0); });
  EXPECT_NE(msg.find("transport 'minimal': createEndpoint failed (not supported)"), std::string::npos) << msg;
  errorOf(ErrorCode::kInvalidArgument, [&] { plugin->createEndpoint(1); });
  int x = 0;
  errorOf(ErrorCode::kNotSupported, [&] { plugin->registerMemory(&x, sizeof(x), MemoryKind::kHost); });
  errorOf(ErrorCode::kNotSupported, [&] { plugin->importMemory({1, 2, 3}); });
}

TEST(PluginLoaderTest, AVersion10TableLoadsAndItsMissingEntriesAreNeverCalled) {
  // minimal's table ends after flush (1.0); the progress slot behind it holds a function that aborts.
  auto plugin = loadTransportPlugin("minimal", {kTestDir}, {});
  EXPECT_EQ(plugin->tableSize(), weftTransportMinStructSize_v1);
  EXPECT_FALSE(plugin->drivesProgress());
  EXPECT_EQ(plugin->progress(), 0u);
}

TEST(PluginLoaderTest, TableOfALaterMinorVersionIsAccepted) {
  // Its table is one entry longer than core knows: the version is the same major, so it loads, and core uses only the
  // entries its own header has.
  auto plugin = loadTransportPlugin("future", {kTestDir}, {});
  EXPECT_EQ(plugin->tableSize(), sizeof(weftTransport_v1) + sizeof(void*));
  ASSERT_EQ(plugin->devices().size(), 1u);
  EXPECT_EQ(plugin->devices()[0].name, "future0");
  // It stages GPU memory: a source only, never a destination (ABI 1.1 flag).
  EXPECT_TRUE(plugin->devices()[0].gpuMemory);
  EXPECT_TRUE(plugin->devices()[0].gpuSourceOnly);
}

TEST(PluginLoaderTest, HostPluginLoadsFromTheBuildTree) {
  auto plugin = loadTransportPlugin("host", {}, {});
  EXPECT_EQ(plugin->path(), std::string(WEFT_PLUGIN_BUILD_DIR) + "/libweft-transport-host.so");
  ASSERT_EQ(plugin->devices().size(), 1u);
  EXPECT_TRUE(plugin->devices()[0].hostMemory);
  EXPECT_TRUE(plugin->devices()[0].loadStore);
  EXPECT_EQ(plugin->tableSize(), sizeof(weftTransport_v1));
  // Two loads are two instances of one shared object.
  auto second = loadTransportPlugin("host", {}, {});
  EXPECT_NE(plugin->state(), second->state());
}

TEST(PluginLoaderTest, HostPluginRefusesUnknownOptions) {
  std::string msg = errorOf(ErrorCode::kPluginError, [] {
    loadTransportPlugin("host", {}, {{"no_such_option", "1"}});
  });
  EXPECT_NE(msg.find("unknown option 'no_such_option'"), std::string::npos) << msg;
  msg = errorOf(ErrorCode::kPluginError, [] { loadTransportPlugin("host", {}, {{"io_timeout_ms", "soon"}}); });
  EXPECT_NE(msg.find("io_timeout_ms='soon'"), std::string::npos) << msg;
  EXPECT_NO_THROW(loadTransportPlugin("host", {}, {{"io_timeout_ms", "500"}}));
}

}  // namespace
}  // namespace weft
