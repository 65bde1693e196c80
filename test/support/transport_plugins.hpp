// The transport plugins this build made, for tests that need one: a transport whose library CMake did not find
// (libfabric, ibverbs) has no plugin, and its tests skip rather than fail.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <weft/config.hpp>

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

/// A config that routes every peer and both memory kinds over libfabric with `provider` (the port channel's
/// connection is for GPU memory; where the provider has no FI_HMEM, host memory it imports goes that way too).
inline Config libfabricConfig(const std::string& provider) {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"libfabric"};
  c.transports[PeerClass::kSameHost] = {"libfabric"};
  c.transportOptions["libfabric"]["provider"] = provider;
  c.bootstrapTimeout = std::chrono::milliseconds(20000);
  return c;
}

}  // namespace weft::test
