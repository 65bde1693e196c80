// Wire formats of the libfabric transport: the endpoint and memory blobs core carries between processes.
// Peers run the same build of weft on hosts of one byte order (as the fabric itself assumes), so fields are native.
#pragma once

#include <cstdint>
#include <type_traits>

namespace weft::fabric {

/// Version of both blob formats; another version is refused. 2: MemoryBlob::signalId, EndpointBlob's landing line.
inline constexpr uint32_t kWireVersion = 2;
inline constexpr uint32_t kEndpointMagic = 0x45464657;  // "WFFE"
inline constexpr uint32_t kMemoryMagic = 0x4d464657;    // "WFFM"
/// Bytes of the provider name field ("tcp;ofi_rxm"), NUL-terminated.
inline constexpr int kProviderBytes = 48;
/// Largest fabric address carried (fi_getname output: a sockaddr, an shm name string, an efa GID + QPN).
inline constexpr int kMaxAddressBytes = 256;

/// MemoryBlob::flags bits.
inline constexpr uint32_t kMemoryVirtAddr = 1;  ///< RMA addresses are the owner's virtual addresses (FI_MR_VIRT_ADDR)
inline constexpr uint32_t kMemoryStaged = 2;    ///< GPU memory without FI_HMEM: a write source only, no RMA target

/// EndpointBlob::flags bits.
inline constexpr uint32_t kEndpointLanding = 1;  ///< landingKey/landingBase name a line for CQ data signals

/// What a peer needs to reach an endpoint: the provider it runs and its fi_getname address, and where its signals
/// carried as remote CQ data write their 8 bytes.
struct EndpointBlob {
  uint32_t magic;
  uint32_t version;
  char provider[kProviderBytes];
  uint32_t addressFormat;  ///< fi_info::addr_format of the endpoint
  uint32_t addressBytes;   ///< used bytes of `address`
  uint8_t address[kMaxAddressBytes];
  uint32_t flags;        ///< kEndpoint* bits
  uint32_t reserved;     ///< 0
  uint64_t landingKey;   ///< fi_mr_key of the landing line (kEndpointLanding)
  uint64_t landingBase;  ///< its RMA address (its virtual address under FI_MR_VIRT_ADDR, else 0)
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
  /// The owner's id for signals carried as remote CQ data into this registration (1..65535), 0 when signals to it
  /// must go as fi_atomic (owner without CQ data, GPU memory, unaligned base, ids used up).
  uint32_t signalId;
  uint32_t reserved;  ///< 0
};

static_assert(std::is_trivially_copyable_v<EndpointBlob> && std::is_trivially_copyable_v<MemoryBlob>);
static_assert(sizeof(EndpointBlob) <= 1024 && sizeof(MemoryBlob) <= 1024, "blobs must fit weftBlobMaxBytes_v1");

}  // namespace weft::fabric
