// Wire formats of the host transport: the blobs core carries between processes and the fd-server messages.
// Both ends run on one host (checked through the host id), so fields are in native byte order.
#pragma once

#include <cstdint>
#include <type_traits>

namespace weft::host {

/// Bytes of the host id field: "<boot id>/<hostname>/<network namespace>", NUL-terminated.
inline constexpr int kHostIdBytes = 160;
/// Bytes of the abstract unix socket name field (without the leading NUL), NUL-terminated.
inline constexpr int kSocketNameBytes = 64;
/// Bytes of the random token that proves a peer was given a region's blob.
inline constexpr int kTokenBytes = 16;
/// Bytes of the reason text in a refusal.
inline constexpr int kReplyMessageBytes = 128;
/// Version of every host-transport wire format; another version is refused.
inline constexpr uint32_t kWireVersion = 1;

inline constexpr uint32_t kEndpointMagic = 0x45544657;  // "WFTE"
inline constexpr uint32_t kMemoryMagic = 0x4d544657;    // "WFTM"
inline constexpr uint32_t kRequestMagic = 0x51544657;   // "WFTQ"
inline constexpr uint32_t kReplyMagic = 0x52544657;     // "WFTR"

/// What a peer needs to connect to an endpoint.
struct EndpointBlob {
  uint32_t magic;
  uint32_t version;
  char hostId[kHostIdBytes];
  uint32_t pid;
  uint32_t reserved;
  uint64_t endpointId;
};

/// What a peer needs to import a registration.
struct MemoryBlob {
  uint32_t magic;
  uint32_t version;
  char hostId[kHostIdBytes];
  char socketName[kSocketNameBytes];
  uint32_t ownerPid;
  uint32_t reserved;
  uint64_t regionId;
  uint8_t token[kTokenBytes];
  uint64_t size;          ///< registered bytes
  uint64_t fdOffset;      ///< where they start in the backing file
  uint64_t ownerAddress;  ///< their address in the owner (used by a same-process import only)
};

/// Importer to owner: "give me the file of this region".
struct FdRequest {
  uint32_t magic;
  uint32_t version;
  uint64_t regionId;
  uint8_t token[kTokenBytes];
};

/// Owner to importer; the file descriptor travels as SCM_RIGHTS with a successful reply.
struct FdReply {
  uint32_t magic;
  int32_t status;  ///< a weftResult_t
  uint64_t size;
  uint64_t fdOffset;
  char message[kReplyMessageBytes];  ///< why it was refused, NUL-terminated
};

static_assert(std::is_trivially_copyable_v<EndpointBlob> && std::is_trivially_copyable_v<MemoryBlob> &&
              std::is_trivially_copyable_v<FdRequest> && std::is_trivially_copyable_v<FdReply>);
static_assert(sizeof(MemoryBlob) <= 1024 && sizeof(EndpointBlob) <= 1024, "blobs must fit weftBlobMaxBytes_v1");

}  // namespace weft::host
