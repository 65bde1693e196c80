// Blobs of the ibverbs transport: what core carries between ranks for an endpoint and for a registration. Both ends
// are little-endian hosts (checked through the magic); fields are in native byte order.
#pragma once

#include <cstdint>
#include <type_traits>

namespace weft::ibverbs {

/// Most queue pairs one connection opens (the qps_per_peer limit).
inline constexpr uint32_t kMaxQpsPerPeer = 64;
/// Most RDMA devices one instance registers memory on.
inline constexpr uint32_t kMaxNics = 16;
inline constexpr uint32_t kWireVersion = 1;
inline constexpr uint32_t kEndpointMagic = 0x45564257;  // "WBVE"
inline constexpr uint32_t kMemoryMagic = 0x4d564257;    // "WBVM"

/// What a peer needs to bring its queue pairs to RTR/RTS against ours.
struct EndpointBlob {
  uint32_t magic;
  uint32_t version;
  uint32_t qpCount;     ///< 1..kMaxQpsPerPeer
  uint32_t signalMode;  ///< 0 atomics, 1 sends: both ends must agree
  uint32_t nicIndex;    ///< which of the owner's NICs (index into a memory blob's rkeys)
  uint32_t mtu;         ///< the port's active ibv_mtu
  uint16_t lid;         ///< the port's LID (InfiniBand); 0 on RoCE
  uint8_t linkLayer;    ///< IBV_LINK_LAYER_*
  uint8_t portNum;
  uint32_t gidIndex;
  uint8_t gid[16];
  uint32_t qpn[kMaxQpsPerPeer];
  uint32_t psn[kMaxQpsPerPeer];
};

/// What a peer needs to write into and signal a registration: its address and one rkey per NIC of the owner.
struct MemoryBlob {
  uint32_t magic;
  uint32_t version;
  uint32_t regionKey;  ///< the owner's id for the registration (target of send-mode signals)
  uint32_t nicCount;   ///< valid entries of rkey
  uint64_t address;    ///< first byte in the owner's address space (the MR's iova)
  uint64_t size;
  uint32_t kind;  ///< weftMemoryHost / weftMemoryGpu
  uint32_t reserved;
  uint32_t rkey[kMaxNics];
};

static_assert(std::is_trivially_copyable_v<EndpointBlob> && std::is_trivially_copyable_v<MemoryBlob>);
static_assert(sizeof(EndpointBlob) <= 1024 && sizeof(MemoryBlob) <= 1024, "blobs must fit weftBlobMaxBytes_v1");

}  // namespace weft::ibverbs
