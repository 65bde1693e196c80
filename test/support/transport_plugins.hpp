// The transport plugins this build made, for tests that need one: a transport whose library CMake did not find
// (libfabric, ibverbs) has no plugin, and its tests skip rather than fail.
#pragma once

#include <filesystem>
#include <string>

namespace weft::test {

/// Where the build put transport `name`'s plugin (WEFT_PLUGIN_BUILD_DIR, defined for every test target).
inline std::string transportPluginPath(const std::string& name) {
  return std::string(WEFT_PLUGIN_BUILD_DIR) + "/libweft-transport-" + name + ".so";
}

/// Whether transport `name`'s plugin was built.
inline bool transportPluginBuilt(const std::string& name) {
  std::error_code ec;
  return std::filesystem::is_regular_file(transportPluginPath(name), ec);
}

}  // namespace weft::test
