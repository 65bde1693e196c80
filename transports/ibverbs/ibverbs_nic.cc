#include "ibverbs_nic.hpp"

#include <cstdio>
#include <cstdlib>

namespace weft::ibverbs {
namespace {

bool parseHex(const std::string& s, uint32_t maxValue, uint32_t* out) {
  if (s.empty() || s.size() > 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return false;
    v = v * 16 + static_cast<uint32_t>(d);
  }
  if (v > maxValue) return false;
  *out = v;
  return true;
}

hwloc_obj_t findPci(hwloc_topology_t topology, const std::string& busId) {
  PciAddress a;
  if (!parsePciAddress(busId, &a)) return nullptr;
  return hwloc_get_pcidev_by_busid(topology, a.domain, a.bus, a.device, a.function);
}

}  // namespace

const char* nicAffinityName(NicAffinity a) {
  switch (a) {
    case NicAffinity::kSamePciSwitch: return "same PCI switch";
    case NicAffinity::kSameHostBridge: return "same host bridge";
    case NicAffinity::kSameNumaNode: return "same NUMA node";
    case NicAffinity::kOther: return "other NUMA node";
    case NicAffinity::kUnknown: return "not in the topology";
  }
  return "?";
}

bool parsePciAddress(const std::string& text, PciAddress* out) {
  PciAddress a;
  size_t dot = text.rfind('.');
  if (dot == std::string::npos) return false;
  size_t c2 = text.rfind(':', dot);
  if (c2 == std::string::npos) return false;
  size_t c1 = c2 == 0 ? std::string::npos : text.rfind(':', c2 - 1);
  std::string domain = c1 == std::string::npos ? "0" : text.substr(0, c1);
  std::string bus = text.substr(c1 == std::string::npos ? 0 : c1 + 1, c2 - (c1 == std::string::npos ? 0 : c1 + 1));
  if (!parseHex(domain, 0xffff, &a.domain) || !parseHex(bus, 0xff, &a.bus) ||
      !parseHex(text.substr(c2 + 1, dot - c2 - 1), 0x1f, &a.device) ||
      !parseHex(text.substr(dot + 1), 7, &a.function)) {
    return false;
  }
  *out = a;
  return true;
}

NicAffinity nicAffinity(hwloc_topology_t topology, const std::string& gpuBusId, const std::string& nicBusId) {
  hwloc_obj_t gpu = findPci(topology, gpuBusId);
  hwloc_obj_t nic = findPci(topology, nicBusId);
  if (gpu == nullptr || nic == nullptr) return NicAffinity::kUnknown;
  hwloc_obj_t common = hwloc_get_common_ancestor_obj(topology, gpu, nic);
  // The nearest common bridge decides: a PCI-upstream bridge is a switch port, a host-upstream one the root complex.
  if (common != nullptr && common->type == HWLOC_OBJ_BRIDGE) {
    return common->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI ? NicAffinity::kSamePciSwitch
                                                                      : NicAffinity::kSameHostBridge;
  }
  hwloc_obj_t gpuHome = hwloc_get_non_io_ancestor_obj(topology, gpu);
  hwloc_obj_t nicHome = hwloc_get_non_io_ancestor_obj(topology, nic);
  if (gpuHome != nullptr && nicHome != nullptr && gpuHome->nodeset != nullptr && nicHome->nodeset != nullptr &&
      hwloc_bitmap_isequal(gpuHome->nodeset, nicHome->nodeset)) {
    return NicAffinity::kSameNumaNode;
  }
  return NicAffinity::kOther;
}

std::vector<NicChoice> assignNics(hwloc_topology_t topology, const std::vector<std::string>& gpuBusIds,
                                  const std::vector<std::string>& nicBusIds) {
  std::vector<NicChoice> out;
  std::vector<uint32_t> load(nicBusIds.size(), 0);
  for (const std::string& gpu : gpuBusIds) {
    NicChoice best;
    bool have = false;
    for (uint32_t n = 0; n < nicBusIds.size(); ++n) {
      NicAffinity a = nicAffinity(topology, gpu, nicBusIds[n]);
      if (!have || a < best.affinity || (a == best.affinity && load[n] < load[best.nic])) {
        best = {n, a};
        have = true;
      }
    }
    if (have) ++load[best.nic];
    out.push_back(best);
  }
  return out;
}

}  // namespace weft::ibverbs
