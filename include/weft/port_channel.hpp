/// PortChannel: the host class of a channel whose operations a proxy thread carries out (see
/// port_channel_device.hpp for the device handle and proxy_service.hpp for where channels come from).
#pragma once

#include <cstdint>
#include <weft/port_channel_device.hpp>

namespace weft {

/// Identifies memory registered with a ProxyService.
using MemoryId = uint32_t;
/// Identifies a semaphore built by a ProxyService.
using SemaphoreId = uint32_t;

/// A channel from this rank to the peer of one semaphore: puts copy from a local source memory into the peer's
/// destination memory, signals increment the peer's semaphore. Made by ProxyService::portChannel; a value type that
/// stays valid while its ProxyService lives.
class PortChannel {
 public:
  using DeviceHandle = PortChannelDeviceHandle;

  PortChannel() = default;
  /// Built by ProxyService; `handle` carries everything else.
  PortChannel(uint32_t id, SemaphoreId semaphore, MemoryId dst, MemoryId src, int peer, DeviceHandle handle);

  /// The handle kernels (or host threads) drive the channel with.
  DeviceHandle deviceHandle() const { return handle_; }

  /// The channel id carried in its triggers.
  uint32_t id() const { return id_; }
  /// The semaphore, destination and source memory it was made from.
  SemaphoreId semaphore() const { return semaphore_; }
  MemoryId dst() const { return dst_; }
  MemoryId src() const { return src_; }
  /// The peer's rank.
  int peer() const { return peer_; }

 private:
  uint32_t id_ = 0;
  SemaphoreId semaphore_ = 0;
  MemoryId dst_ = 0;
  MemoryId src_ = 0;
  int peer_ = -1;
  DeviceHandle handle_{};
};

}  // namespace weft
