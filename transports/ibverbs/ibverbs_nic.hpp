// Choosing the RDMA device nearest each GPU from the hwloc topology: a shared PCI switch beats a shared host bridge,
// which beats the same NUMA node, which beats anything else.
#pragma once

#include <hwloc.h>

#include <cstdint>
#include <string>
#include <vector>

namespace weft::ibverbs {

/// How close a NIC is to a GPU, nearest first.
enum class NicAffinity {
  kSamePciSwitch,   ///< both below one PCI-to-PCI bridge (a switch): peer-to-peer traffic stays off the host
  kSameHostBridge,  ///< both below one host bridge (root complex)
  kSameNumaNode,    ///< attached to the same NUMA node through different host bridges
  kOther,           ///< another NUMA node or package
  kUnknown,         ///< one of the two is not in the topology
};

/// Text for `a`, e.g. "same PCI switch".
const char* nicAffinityName(NicAffinity a);

/// A PCI address parsed from "dddd:bb:dd.f" (any number of domain digits, as CUDA writes 8) or "bb:dd.f".
struct PciAddress {
  uint32_t domain = 0;
  uint32_t bus = 0;
  uint32_t device = 0;
  uint32_t function = 0;
};

/// Parses `text`; false when it is not a PCI bus id (then `*out` is unchanged).
bool parsePciAddress(const std::string& text, PciAddress* out);

/// How close the PCI devices `gpuBusId` and `nicBusId` are in `topology`, which must have been loaded with I/O
/// objects kept (hwloc_topology_set_io_types_filter with HWLOC_TYPE_FILTER_KEEP_ALL or _IMPORTANT).
NicAffinity nicAffinity(hwloc_topology_t topology, const std::string& gpuBusId, const std::string& nicBusId);

/// The NIC chosen for one GPU.
struct NicChoice {
  uint32_t nic = 0;  ///< index into the NIC list
  NicAffinity affinity = NicAffinity::kUnknown;
};

/// For each of `gpuBusIds`, the nearest of `nicBusIds` (non-empty). Ties go to the NIC serving the fewest GPUs so
/// far, then to the lowest index, so GPUs that are equally near several NICs spread over them.
std::vector<NicChoice> assignNics(hwloc_topology_t topology, const std::vector<std::string>& gpuBusIds,
                                  const std::vector<std::string>& nicBusIds);

}  // namespace weft::ibverbs
