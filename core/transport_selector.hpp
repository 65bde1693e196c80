// Chooses the transport for each peer class from the config (core-internal; the Communicator and weft-info use it).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <weft/config.hpp>

#include "transport_plugin.hpp"

namespace weft {

/// Loads transport plugins on demand (one instance per name) and picks, for a peer class, the first entry
/// of the config's list whose plugin loads and offers a device. Not thread-safe.
class TransportSelector {
 public:
  explicit TransportSelector(Config config) : config_(std::move(config)) {}

  /// The configuration it selects by.
  const Config& config() const { return config_; }

  /// The loaded plugin `name`, loading it with the config's plugin path and options on first use.
  /// Throws what loadTransportPlugin throws.
  std::shared_ptr<TransportPlugin> plugin(const std::string& name);

  /// The transport for `peerClass`: the first entry that loads and offers a device. Throws Error(kPluginError)
  /// listing, for each entry tried, why it was refused.
  const std::string& choose(PeerClass peerClass);

  /// The transport for `peerClass` that can carry memory of `kind`: the first entry that loads and offers a
  /// device able to register that kind (host memory goes over `host`, GPU memory over `cuda_ipc`, from one list).
  const std::string& choose(PeerClass peerClass, MemoryKind kind);

  /// The index of the first device of `plugin` that can register `kind` (for GPU memory, the one of GPU
  /// `gpuDevice` when the plugin says which GPU a device belongs to); 0 when none says.
  static uint32_t deviceFor(const TransportPlugin& plugin, MemoryKind kind, int gpuDevice);

  /// Why `name` was refused by an earlier choose() ("" when it was not).
  std::string refusal(const std::string& name) const;

 private:
  Config config_;
  std::map<std::string, std::shared_ptr<TransportPlugin>> plugins_;
  std::map<std::string, std::string> refusals_;
  const std::string& choose(PeerClass peerClass, int kind);  // kind -1: any
  std::map<std::pair<PeerClass, int>, std::string> chosen_;
};

}  // namespace weft
