/// MemoryChannel: a channel to one peer whose memory is mapped into this process, driven by the GPU's own
/// threads (or host threads, on host memory) through MemoryChannelDeviceHandle.
#pragma once

#include <memory>
#include <weft/memory_channel_device.hpp>
#include <weft/memory_semaphore.hpp>
#include <weft/registered_memory.hpp>

namespace weft {

/// Host owner of a memory channel's parts. Made from a semaphore with the peer, the peer's memory (received
/// with Communicator::recvMemory through a transport that maps it: data() non-null), this rank's memory and,
/// optionally, this rank's packet buffer (where the peer's putPackets land; the peer's `remote` must be this
/// buffer). Throws kInvalidArgument when a piece is missing, unmapped, of the wrong owner or of a memory kind
/// other than the semaphore's. Keeps every piece alive while it lives.
class MemoryChannel {
 public:
  /// The device handle type.
  using DeviceHandle = MemoryChannelDeviceHandle;

  MemoryChannel(std::shared_ptr<MemoryDevice2DeviceSemaphore> semaphore, RegisteredMemory remote,
                RegisteredMemory local, RegisteredMemory packetBuffer = RegisteredMemory());

  /// A handle for kernels (kGpu memory) or host threads (kHost memory); `options` bound and name its waits.
  DeviceHandle deviceHandle(const DeviceWaitOptions& options = {}) const;

  /// The peer's rank.
  int peer() const { return semaphore_->peer(); }

  /// The parts.
  const std::shared_ptr<MemoryDevice2DeviceSemaphore>& semaphore() const { return semaphore_; }
  const RegisteredMemory& remote() const { return remote_; }
  const RegisteredMemory& local() const { return local_; }
  const RegisteredMemory& packetBuffer() const { return packetBuffer_; }

 private:
  std::shared_ptr<MemoryDevice2DeviceSemaphore> semaphore_;
  RegisteredMemory remote_;
  RegisteredMemory local_;
  RegisteredMemory packetBuffer_;
};

}  // namespace weft
