/// MemoryDevice2DeviceSemaphore: a semaphore that GPU threads (or host threads, on host memory) signal by an
/// atomic add into the peer's counter in mapped peer memory, and wait on by loads of their own counter.
#pragma once

#include <cstdint>
#include <memory>
#include <weft/communicator.hpp>
#include <weft/device_error.hpp>
#include <weft/memory_semaphore_device.hpp>
#include <weft/registered_memory.hpp>

namespace weft {

/// How the device handles of a semaphore or channel name and bound their waits.
struct DeviceWaitOptions {
  DeviceErrorRecord* record = nullptr;  ///< where a timeout is recorded (DeviceErrorBlock::deviceRecord()); may be null
  int channel = -1;                     ///< channel or semaphore index named in a timeout; -1 for none
  uint64_t budgetNs = 0;                ///< budget of each wait; 0 means defaultWaitBudgetNs()
};

/// The memory kind a semaphore's counters use when the caller does not choose: kGpu in a GPU build on a machine
/// with a GPU, kHost otherwise.
MemoryKind defaultSemaphoreMemoryKind();

/// A semaphore between this rank and the peer of a connection whose transport maps peer memory for load/store
/// (cuda_ipc for kGpu counters, host for kHost counters). Construction is pairwise and collective: both ranks
/// construct one with the same tag, each allocates its inbound counter (hipMalloc for kGpu, allocSharedHostMemory
/// for kHost), registers it and exchanges it with the peer over the bootstrap. Throws kInvalidArgument when the
/// peer's counter arrives unmapped (the transport cannot load/store it), kNotSupported for kGpu without a GPU.
///
/// kHost counters serve host threads only; kGpu counters serve kernels (and host code must not touch them).
/// The host object owns the memory: it must outlive every kernel or thread that uses a device handle.
class MemoryDevice2DeviceSemaphore {
 public:
  /// The device handle type.
  using DeviceHandle = MemoryDevice2DeviceSemaphoreDeviceHandle;

  MemoryDevice2DeviceSemaphore(Communicator& comm, std::shared_ptr<Connection> connection, int tag,
                               MemoryKind kind = defaultSemaphoreMemoryKind());

  /// A handle for kernels (kGpu) or host threads (kHost). Handles share the counters and the `expected` word.
  DeviceHandle deviceHandle(const DeviceWaitOptions& options = {}) const;

  /// This rank and the peer.
  int rank() const { return rank_; }
  int peer() const { return peer_; }

  /// Where the counters live.
  MemoryKind kind() const { return kind_; }

  /// True when the peer runs on this rank's GPU (GPU counters only): handles then signal and wait at device scope.
  bool sameGpu() const { return sameGpu_; }

  /// The connection the semaphore was made for.
  const std::shared_ptr<Connection>& connection() const { return connection_; }

 private:
  std::shared_ptr<Connection> connection_;
  std::shared_ptr<void> inboundStorage_;
  std::shared_ptr<void> expectedStorage_;
  RegisteredMemory localInbound_;
  RegisteredMemory remoteInbound_;
  MemoryKind kind_ = MemoryKind::kHost;
  int rank_ = -1;
  int peer_ = -1;
  bool sameGpu_ = false;
};

}  // namespace weft
