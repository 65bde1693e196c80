#include "transport_selector.hpp"

#include "logging.hpp"

namespace weft {

std::shared_ptr<TransportPlugin> TransportSelector::plugin(const std::string& name) {
  if (auto it = plugins_.find(name); it != plugins_.end()) return it->second;
  auto p = loadTransportPlugin(name, config_.pluginPath, config_.optionsFor(name));
  plugins_[name] = p;
  return p;
}

const std::string& TransportSelector::choose(PeerClass cls) { return choose(cls, -1); }

const std::string& TransportSelector::choose(PeerClass cls, MemoryKind kind) {
  return choose(cls, static_cast<int>(kind));
}

namespace {
bool carries(const TransportDeviceInfo& d, int kind) {
  return kind < 0 || (kind == static_cast<int>(MemoryKind::kHost) ? d.hostMemory : d.gpuMemory);
}
const char* kindName(int kind) {
  return kind < 0 ? "" : kind == static_cast<int>(MemoryKind::kHost) ? " with host memory" : " with GPU memory";
}
}  // namespace

const std::string& TransportSelector::choose(PeerClass cls, int kind) {
  if (auto it = chosen_.find({cls, kind}); it != chosen_.end()) return it->second;
  std::string reasons;
  for (const std::string& name : config_.transportsFor(cls)) {
    try {
      auto p = plugin(name);
      if (p->devices().empty()) throw Error(ErrorCode::kPluginError, "it offers no devices");
      bool any = false;
      for (const auto& d : p->devices()) any = any || carries(d, kind);
      if (!any)
        throw Error(ErrorCode::kNotSupported, std::string("no device of it can register ") +
                                                  (kind == static_cast<int>(MemoryKind::kHost) ? "host" : "GPU") +
                                                  " memory");
      logInfo(LogSubsys::kInit, "transport '{}' ({}) serves {} peers{}", name, p->path(), peerClassName(cls),
              kindName(kind));
      return chosen_[{cls, kind}] = name;
    } catch (const Error& e) {
      logDebug(LogSubsys::kInit, "transport '{}' refused for {} peers{}: {}", name, peerClassName(cls), kindName(kind),
               e.what());
      refusals_[name] = e.what();
      reasons += "; " + name + ": " + e.what();
    }
  }
  throw Error(ErrorCode::kPluginError,
              std::string("no transport can connect ") + peerClassName(cls) + " peers" + kindName(kind) + " (tried " +
                  std::to_string(config_.transportsFor(cls).size()) + " from " + config_.source + ")" + reasons);
}

uint32_t TransportSelector::deviceFor(const TransportPlugin& plugin, MemoryKind kind, int gpuDevice) {
  const auto& devices = plugin.devices();
  for (const auto& d : devices) {
    if (carries(d, static_cast<int>(kind)) &&
        (kind != MemoryKind::kGpu || d.gpuDevice < 0 || d.gpuDevice == gpuDevice)) {
      return d.index;
    }
  }
  for (const auto& d : devices) {
    if (carries(d, static_cast<int>(kind))) return d.index;
  }
  return 0;
}

std::string TransportSelector::refusal(const std::string& name) const {
  auto it = refusals_.find(name);
  return it == refusals_.end() ? "" : it->second;
}

}  // namespace weft
