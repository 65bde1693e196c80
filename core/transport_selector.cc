#include "transport_selector.hpp"

#include "logging.hpp"

namespace weft {

std::shared_ptr<TransportPlugin> TransportSelector::plugin(const std::string& name) {
  if (auto it = plugins_.find(name); it != plugins_.end()) return it->second;
  auto p = loadTransportPlugin(name, config_.pluginPath, config_.optionsFor(name));
  plugins_[name] = p;
  return p;
}

const std::string& TransportSelector::choose(PeerClass cls) {
  if (auto it = chosen_.find(cls); it != chosen_.end()) return it->second;
  std::string reasons;
  for (const std::string& name : config_.transportsFor(cls)) {
    try {
      auto p = plugin(name);
      if (p->devices().empty()) throw Error(ErrorCode::kPluginError, "it offers no devices");
      logInfo(LogSubsys::kInit, "transport '{}' ({}) serves {} peers", name, p->path(), peerClassName(cls));
      return chosen_[cls] = name;
    } catch (const Error& e) {
      logDebug(LogSubsys::kInit, "transport '{}' refused for {} peers: {}", name, peerClassName(cls), e.what());
      refusals_[name] = e.what();
      reasons += "; " + name + ": " + e.what();
    }
  }
  throw Error(ErrorCode::kPluginError, std::string("no transport can connect ") + peerClassName(cls) +
                                           " peers (tried " + std::to_string(config_.transportsFor(cls).size()) +
                                           " from " + config_.source + ")" + reasons);
}

std::string TransportSelector::refusal(const std::string& name) const {
  auto it = refusals_.find(name);
  return it == refusals_.end() ? "" : it->second;
}

}  // namespace weft
