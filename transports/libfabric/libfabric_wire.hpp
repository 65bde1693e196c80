// Wire formats of the libfabric transport: the endpoint and memory blobs core carries between processes.
// Peers run the same build of weft on hosts of one byte order (as the fabric itself assumes), so fields are native.
#pragma once

#include <cstdint>
#include <type_traits>

namespace weft::fabric {

/// Version of both blob formats; another version is refused.
inline constexpr uint32_t kWireVersion = 1;
inline constexpr uint32_t kEndpointMagic = 0x45464657;  // "WFFE"
inline constexpr uint32_t kMemoryMagic = 0x4d464657;    // "WFFM"
/// Bytes of the provider name field ("tcp;ofi_rxm"), NUL-terminated.
inline constexpr int kProviderBytes = 48;
/// Largest fabric address carried (fi_getname output: a sockaddr, an shm name string, an efa GID + QPN).
inline constexpr int kMaxAddressBytes = 256;

/// MemoryBlob::flags bits.
inline constexpr uint32_t kMemoryVirtAddr = 1;  ///< RMA addresses are the owner's virtual addresses (FI_MR_VIRT_ADDR)
inline constexpr uint32_t kMemoryStaged = 2;    ///< GPU memory without FI_HMEM: a write source only, no RMA target

/// What a peer needs to reach an endpoint: the provider it runs and its fi_getname address.
struct EndpointBlob {
  uint32_t magic;
  uint32_t version;
  char provider[kProviderBytes];
  uint32_t addressFormat;  ///< fi_info::addr_format of the endpoint
  uint32_t addressBytes;   ///< used bytes of `address`
  uint8_t address[kMaxAddressBytes];
};

/// What a peer needs to write into (and add to) a registration.
struct MemoryBlob {
  uint32_t magic;
  uint32_t version;
  char provider[kProviderBytes];
  uint32_t flags;  ///< kMemory* bits
  uint32_t kind;   ///< weftMemoryHost or weftMemoryGpu
  uint64_t key;    ///< fi_mr_key of the registration
  uint64_t base;   ///< the buffer's address in the owner (RMA base when kMemoryVirtAddr)
  uint64_t size;   ///< registered bytes
};

static_assert(std::is_trivially_copyable_v<EndpointBlob> && std::is_trivially_copyable_v<MemoryBlob>);
static_assert(sizeof(EndpointBlob) <= 1024 && sizeof(MemoryBlob) <= 1024, "blobs must fit weftBlobMaxBytes_v1");

}  // namespace weft::fabric
