// weft-info: what this installation finds (GPU platform, config, plugins and their devices) and which
// transport it would choose for a peer in the same process, on the same host and on another host.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <weft/build_config.hpp>
#include <weft/config.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/params.hpp>

#include "plugin_loader.hpp"
#include "transport_selector.hpp"

namespace {

const char* platformName() {
  switch (weft::kGpuPlatform) {
    case weft::GpuPlatform::kCuda: return "cuda";
    case weft::GpuPlatform::kHip: return "hip";
    case weft::GpuPlatform::kNone: return "none (host memory only)";
  }
  return "?";
}

void printParams() {
  std::printf("%-32s %-14s %-24s %s\n", "parameter", "type", "default", "meaning");
  for (const weft::ParamInfo& p : weft::allParams()) {
    std::printf("%-32s %-14s %-24s %s\n", p.name.c_str(), p.type.c_str(),
                p.defaultValue.empty() ? "-" : p.defaultValue.c_str(), p.help.c_str());
  }
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "(none)" : out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weft-info: what weft finds here and which transports it would choose"};
  bool params = false;
  app.add_flag("--params", params, "list every environment parameter weft reads, with type, default and meaning");
  CLI11_PARSE(app, argc, argv);
  if (params) {
    printParams();
    return 0;
  }
  try {
    weft::Config config = weft::Config::load();
    std::printf("weft %s, GPU platform %s, GPUs visible: %d\n", WEFT_VERSION_STRING, platformName(),
                weft::gpuDeviceCount());
    std::printf("config: %s\n", config.source.c_str());
    std::printf("\nplugin search path:\n");
    for (const auto& dir : weft::pluginSearchPath(config.pluginPath)) std::printf("  %s\n", dir.c_str());
    weft::TransportSelector selector(config);
    std::printf("\ntransport plugins found:\n");
    auto files = weft::listTransportPlugins(config.pluginPath);
    if (files.empty()) std::printf("  (none)\n");
    for (const auto& file : files) {
      if (file.shadowed) {
        std::printf("  %-10s %s (shadowed by an earlier file of the same name)\n", file.name.c_str(),
                    file.path.c_str());
        continue;
      }
      try {
        auto plugin = selector.plugin(file.name);
        std::printf("  %-10s %s, ABI table %u bytes, %zu device(s)\n", file.name.c_str(), file.path.c_str(),
                    plugin->tableSize(), plugin->devices().size());
        for (const auto& d : plugin->devices()) {
          std::printf("    device %u: %s%s%s%s numa %d\n", d.index, d.name.c_str(), d.hostMemory ? " host-memory" : "",
                      d.gpuMemory ? " gpu-memory" : "", d.loadStore ? " load-store" : "", d.numaNode);
        }
      } catch (const weft::Error& e) {
        std::printf("  %-10s %s: cannot be used: %s\n", file.name.c_str(), file.path.c_str(), e.what());
      }
    }
    std::printf("\ntransport chosen per peer class, for host and for GPU memory:\n");
    int unreachable = 0;
    for (weft::PeerClass cls :
         {weft::PeerClass::kSameProcess, weft::PeerClass::kSameHost, weft::PeerClass::kOtherHost}) {
      std::printf("  %-13s tries [%s]:", weft::peerClassName(cls), join(config.transportsFor(cls)).c_str());
      std::string reasons;
      int served = 0;
      for (weft::MemoryKind kind : {weft::MemoryKind::kHost, weft::MemoryKind::kGpu}) {
        const char* what = kind == weft::MemoryKind::kHost ? "host memory" : "gpu memory";
        try {
          std::printf(" %s: %s;", what, selector.choose(cls, kind).c_str());
          ++served;
        } catch (const weft::Error& e) {
          std::printf(" %s: none;", what);
          for (const auto& name : config.transportsFor(cls)) {
            reasons += "    " + name + " (" + what + "): " + selector.refusal(name) + "\n";
          }
        }
      }
      std::printf("\n%s", reasons.c_str());
      if (served == 0) ++unreachable;
    }
    if (unreachable > 0) std::printf("\n%d peer class(es) have no usable transport here.\n", unreachable);
  } catch (const weft::Error& e) {
    std::fprintf(stderr, "weft-info: %s\n", e.what());
    return 1;
  }
  return 0;
}
