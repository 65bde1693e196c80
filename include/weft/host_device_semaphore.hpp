/// Host2DeviceSemaphore: a monotonic 64-bit counter that the peer signals through a Connection (its proxy's
/// atomicAdd) and that a GPU thread of this rank waits on.
#pragma once

#include <cstdint>
#include <memory>
#include <weft/communicator.hpp>
#include <weft/device_error.hpp>
#include <weft/fifo.hpp>
#include <weft/host_device_semaphore_device.hpp>

namespace weft {

/// A semaphore between this rank and the peer of `connection`. Construction is pairwise (both ranks construct one
/// with the same tag): each side allocates its inbound counter, registers it and sends it to the other. The counter
/// is shared host memory when the connection's transport is "host" (mapped for the GPU when the waiters run there),
/// GPU memory for other transports on a GPU; the expected count lives on the waiting side.
class Host2DeviceSemaphore {
 public:
  using DeviceHandle = Host2DeviceSemaphoreDeviceHandle;

  /// `side` says where wait/poll run; `errors` (nullptr: none) receives their timeout records and must outlive the
  /// semaphore. Throws what Communicator's sendMemory/recvMemory/registerMemory throw, or kGpuError.
  Host2DeviceSemaphore(Communicator& comm, std::shared_ptr<Connection> connection, int tag,
                       HandleSide side = HandleSide::kDevice, DeviceErrorBlock* errors = nullptr);
  ~Host2DeviceSemaphore();
  Host2DeviceSemaphore(const Host2DeviceSemaphore&) = delete;
  Host2DeviceSemaphore& operator=(const Host2DeviceSemaphore&) = delete;

  /// The handle waiters use; its default budget is defaultWaitBudgetNs() unless `budgetNs` is non-zero.
  DeviceHandle deviceHandle(uint64_t budgetNs = 0) const;

  /// Increments the peer's counter by one, ordered after every earlier write on the connection (what the proxy does
  /// for a signal request). One thread at a time per connection.
  void signal();

  /// The connection to the peer.
  const std::shared_ptr<Connection>& connection() const { return connection_; }
  /// The peer's inbound counter (where signal() adds).
  const RegisteredMemory& remoteInbound() const { return remoteInbound_; }
  /// The peer's rank.
  int peer() const { return peer_; }
  /// Signals received so far (relaxed read of this side's counter).
  uint64_t received() const;

 private:
  void setUp(Communicator& comm, int tag, bool gpu);
  void release();

  std::shared_ptr<Connection> connection_;
  std::shared_ptr<void> inboundStorage_;
  uint64_t* inboundHost_ = nullptr;
  uint64_t* inboundDevice_ = nullptr;
  bool hostRegistered_ = false;
  bool inboundOnGpu_ = false;
  uint64_t* expected_ = nullptr;
  bool expectedOnGpu_ = false;
  RegisteredMemory localInbound_;
  RegisteredMemory remoteInbound_;
  HandleSide side_;
  DeviceErrorBlock* errors_;
  int peer_ = -1;
  int rank_ = -1;
};

}  // namespace weft
