// Wire formats of the cuda_ipc transport: the endpoint and memory blobs core carries between processes, and the
// messages of the fd server that hands cuMem/hipMem allocations' file descriptors to importers. Both ends run on one
// host (checked through the host id), so fields are in native byte order. Header-only and free of GPU headers: the
// decoders are unit-tested on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda_ipc_failure.hpp"

namespace weft::cuda_ipc {

/// Bytes of the host id field: "<boot id>/<hostname>/<network namespace>", NUL-terminated.
inline constexpr int kHostIdBytes = 160;
/// Bytes of a PCI bus id field ("0000:3b:00.0"), NUL-terminated.
inline constexpr int kBusIdBytes = 32;
/// Bytes of the abstract unix socket name field (without the leading NUL), NUL-terminated.
inline constexpr int kSocketNameBytes = 64;
/// Bytes of the random token that proves an importer was given a registration's blob.
inline constexpr int kTokenBytes = 16;
/// Bytes of an opaque runtime IPC handle (cudaIpcMemHandle_t and hipIpcMemHandle_t are both 64).
inline constexpr int kIpcHandleBytes = 64;
/// Bytes of the reason text in an fd server refusal.
inline constexpr int kReplyMessageBytes = 128;
/// Version of every cuda_ipc wire format; another version is refused.
inline constexpr uint32_t kWireVersion = 1;
/// Largest allocation a blob may describe (bounds what a malformed blob makes us map).
inline constexpr uint64_t kMaxAllocationBytes = uint64_t{1} << 48;

inline constexpr uint32_t kEndpointMagic = 0x45494357;  // "WCIE"
inline constexpr uint32_t kMemoryMagic = 0x4d494357;    // "WCIM"
inline constexpr uint32_t kRequestMagic = 0x51494357;   // "WCIQ"
inline constexpr uint32_t kReplyMagic = 0x52494357;     // "WCIR"

/// How a registration is shared (MemoryBlob::handleKind).
enum class HandleKind : uint32_t {
  kRuntime = 1,  ///< cudaIpcGetMemHandle / hipIpcGetMemHandle of a cudaMalloc-family allocation
  kPosixFd = 2,  ///< a cuMem/hipMem allocation exported as a file descriptor, fetched from the owner's fd server
};

/// Who a process is: enough to tell "same process" and "same pid namespace" apart from a reused pid.
struct ProcessIdentity {
  uint32_t pid;
  uint32_t reserved;
  uint64_t pidNamespace;  ///< inode of /proc/self/ns/pid, 0 when unknown
  uint64_t nonce;         ///< random, drawn once per process (redrawn after fork)
};

/// What a peer needs to connect to an endpoint.
struct EndpointBlob {
  uint32_t magic;
  uint32_t version;
  char hostId[kHostIdBytes];
  char busId[kBusIdBytes];  ///< PCI bus id of the endpoint's GPU
  ProcessIdentity process;
  int32_t gpuDevice;  ///< the owner's GPU ordinal (meaningful in the owner's process only)
  uint32_t reserved;
};

/// What a peer needs to import a registration.
struct MemoryBlob {
  uint32_t magic;
  uint32_t version;
  char hostId[kHostIdBytes];
  char busId[kBusIdBytes];  ///< PCI bus id of the GPU holding the memory
  ProcessIdentity owner;
  uint32_t handleKind;  ///< a HandleKind
  uint32_t reserved;
  uint64_t ownerBase;                  ///< the allocation's base address in the owner (used by a same-process import)
  uint64_t baseOffset;                 ///< registered pointer minus the allocation's base
  uint64_t size;                       ///< registered bytes, from baseOffset on
  uint64_t allocationSize;             ///< bytes of the whole allocation (what an importer maps)
  uint8_t ipcHandle[kIpcHandleBytes];  ///< kRuntime: the runtime's IPC handle
  char socketName[kSocketNameBytes];   ///< kPosixFd: the owner's fd server
  uint64_t regionId;                   ///< kPosixFd: which registration to ask the fd server for
  uint8_t token[kTokenBytes];          ///< kPosixFd: proof of having been given this blob
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
  int32_t status;           ///< a weftResult_t
  uint64_t allocationSize;  ///< the owner's view, checked against the blob
  char message[kReplyMessageBytes];
};

static_assert(std::is_trivially_copyable_v<EndpointBlob> && std::is_trivially_copyable_v<MemoryBlob> &&
              std::is_trivially_copyable_v<FdRequest> && std::is_trivially_copyable_v<FdReply>);
static_assert(sizeof(MemoryBlob) <= 1024 && sizeof(EndpointBlob) <= 1024, "blobs must fit weftBlobMaxBytes_v1");

/// Copies `value` into a fixed field, NUL-padded, cut to fit.
template <size_t N>
void setField(char (&field)[N], const std::string& value) {
  std::memset(field, 0, N);
  std::memcpy(field, value.data(), value.size() < N - 1 ? value.size() : N - 1);
}

/// The field as a string; throws IpcFailure(weftInvalidArgument) when it has no NUL (a malformed blob).
template <size_t N>
std::string getField(const char (&field)[N], const char* what) {
  size_t len = strnlen(field, N);
  if (len == N)
    throw IpcFailure(weftInvalidArgument, std::string("malformed cuda_ipc blob: ") + what + " is not terminated");
  return std::string(field, len);
}

/// Decodes an endpoint blob of exactly sizeof(EndpointBlob) bytes. Throws IpcFailure(weftInvalidArgument) saying what
/// is wrong: NULL or wrong length, another transport's magic, another wire version, unterminated text fields.
inline EndpointBlob decodeEndpointBlob(const void* data, uint64_t bytes) {
  if (data == nullptr || bytes != sizeof(EndpointBlob)) {
    throw IpcFailure(weftInvalidArgument, "endpoint blob has " + std::to_string(bytes) +
                                              " bytes, a cuda_ipc endpoint blob has " +
                                              std::to_string(sizeof(EndpointBlob)));
  }
  EndpointBlob b;
  std::memcpy(&b, data, sizeof(b));
  if (b.magic != kEndpointMagic || b.version != kWireVersion) {
    throw IpcFailure(weftInvalidArgument,
                     "blob is not a cuda_ipc endpoint of wire version " + std::to_string(kWireVersion));
  }
  getField(b.hostId, "host id");
  getField(b.busId, "PCI bus id");
  return b;
}

/// Decodes a memory blob of exactly sizeof(MemoryBlob) bytes and checks that its numbers are consistent: a known
/// handle kind, 0 < size, baseOffset + size <= allocationSize <= kMaxAllocationBytes, and for kPosixFd a socket name
/// and a region id. Throws IpcFailure(weftInvalidArgument) saying which check failed.
inline MemoryBlob decodeMemoryBlob(const void* data, uint64_t bytes) {
  if (data == nullptr || bytes != sizeof(MemoryBlob)) {
    throw IpcFailure(weftInvalidArgument, "memory blob has " + std::to_string(bytes) +
                                              " bytes, a cuda_ipc memory blob has " +
                                              std::to_string(sizeof(MemoryBlob)));
  }
  MemoryBlob b;
  std::memcpy(&b, data, sizeof(b));
  if (b.magic != kMemoryMagic || b.version != kWireVersion) {
    throw IpcFailure(weftInvalidArgument,
                     "blob is not a cuda_ipc memory handle of wire version " + std::to_string(kWireVersion));
  }
  getField(b.hostId, "host id");
  getField(b.busId, "PCI bus id");
  const std::string socket = getField(b.socketName, "socket name");
  const auto kind = static_cast<HandleKind>(b.handleKind);
  if (kind != HandleKind::kRuntime && kind != HandleKind::kPosixFd) {
    throw IpcFailure(weftInvalidArgument,
                     "malformed cuda_ipc blob: unknown handle kind " + std::to_string(b.handleKind));
  }
  if (b.size == 0 || b.allocationSize > kMaxAllocationBytes || b.baseOffset > b.allocationSize ||
      b.size > b.allocationSize - b.baseOffset) {
    throw IpcFailure(weftInvalidArgument, "malformed cuda_ipc blob: region [" + std::to_string(b.baseOffset) + ", +" +
                                              std::to_string(b.size) + ") does not fit its allocation of " +
                                              std::to_string(b.allocationSize) + " bytes");
  }
  if (kind == HandleKind::kPosixFd && (socket.empty() || b.regionId == 0)) {
    throw IpcFailure(weftInvalidArgument, "malformed cuda_ipc blob: a posix_fd handle without fd server or region id");
  }
  return b;
}

}  // namespace weft::cuda_ipc
