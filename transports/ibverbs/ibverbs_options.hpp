// The [transport.ibverbs] options, parsed from the strings core passes to init.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace weft::ibverbs {

/// How atomicAdd reaches the peer's token.
enum class SignalMode {
  kAtomic,  ///< RDMA atomic fetch-add into the peer's word (the NIC performs it)
  kSend,    ///< a send carrying {region, offset, delta}; the peer's receiver thread applies the add
};

/// The transport's settings. Unset fields (empty device, 0 port, -1 gid index) are chosen at init.
struct IbvOptions {
  std::string device;                           ///< RDMA device name; empty: the one nearest each GPU (hwloc)
  uint32_t port = 0;                            ///< 1-based port; 0: the first active port
  int32_t gidIndex = -1;                        ///< GID index; -1: the first RoCE v2 IPv4 GID, else 0
  uint32_t qpsPerPeer = 1;                      ///< RC queue pairs per connection; large writes are striped over them
  SignalMode signalMode = SignalMode::kAtomic;  ///< atomics = true (default) / false
};

/// Parses `options` (key, value) as init receives them. Unknown keys, values out of range and malformed numbers or
/// booleans throw IbvFailure(weftInvalidArgument) naming the key, the value and what is accepted.
IbvOptions parseOptions(const std::vector<std::pair<std::string, std::string>>& options);

}  // namespace weft::ibverbs
