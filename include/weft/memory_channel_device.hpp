/// Device handle of MemoryChannel: the calling threads load and store into the peer's memory, mapped into this
/// process, and synchronise through a MemoryDevice2DeviceSemaphore or through LL packets that carry their flags.
/// Usable in kernels and in host threads alike.
#pragma once

#include <cstdint>
#include <type_traits>
#include <weft/copy_device.hpp>
#include <weft/device.hpp>
#include <weft/memory_semaphore_device.hpp>
#include <weft/packet_device.hpp>
#include <weft/platform.hpp>

namespace weft {

/// One direction-agnostic channel to one peer. Offsets are in bytes from the start of the named buffer:
/// `remote` (the peer's registered memory, mapped), `local` (this rank's registered memory) and `packets`
/// (this rank's packet buffer, where the peer's putPackets land; may be null). Offsets and sizes are the
/// caller's contract: the host checked the buffers when it made the handle, the device code does not check
/// each access.
///
/// Cooperative operations take (threadId, numThreads): every thread of the set calls with the same other
/// arguments, and the work is split among them. Data operations use plain or relaxed stores; signal() is the
/// release that publishes them.
struct MemoryChannelDeviceHandle {
  MemoryDevice2DeviceSemaphoreDeviceHandle semaphore;  ///< signals to and from the peer
  uint8_t* remote;                                     ///< the peer's memory (mapped)
  uint64_t remoteBytes;
  uint8_t* local;  ///< this rank's memory
  uint64_t localBytes;
  uint8_t* packets;  ///< this rank's packet buffer (the peer writes packets here); nullptr when none
  uint64_t packetBytes;

  /// Copies `bytes` from local + localOffset to remote + remoteOffset, cooperatively (16-byte accesses where
  /// both addresses allow, any size and offset). Plain stores: signal() after all threads are done publishes them.
  WEFT_HOST_DEVICE_INLINE void put(uint64_t remoteOffset, uint64_t localOffset, uint64_t bytes, uint32_t threadId,
                                   uint32_t numThreads) const {
    copyCooperative(remote + remoteOffset, local + localOffset, bytes, threadId, numThreads);
  }

  /// Copies `bytes` from remote + remoteOffset to local + localOffset, cooperatively. Plain loads: the caller
  /// makes sure the peer's data is ready first (e.g. wait() for the peer's signal).
  WEFT_HOST_DEVICE_INLINE void get(uint64_t remoteOffset, uint64_t localOffset, uint64_t bytes, uint32_t threadId,
                                   uint32_t numThreads) const {
    copyCooperative(local + localOffset, remote + remoteOffset, bytes, threadId, numThreads);
  }

  /// Stores `value` as element `index` of the remote buffer viewed as an array of T (plain store).
  template <class T>
  WEFT_HOST_DEVICE_INLINE void write(uint64_t index, const T& value) const {
    reinterpret_cast<T*>(remote)[index] = value;
  }

  /// Loads element `index` of the remote buffer viewed as an array of T (plain load).
  template <class T>
  WEFT_HOST_DEVICE_INLINE T read(uint64_t index) const {
    return reinterpret_cast<const T*>(remote)[index];
  }

  /// Signals the peer (release; device scope when the peer shares this GPU, else system scope): see
  /// MemoryDevice2DeviceSemaphoreDeviceHandle::signal.
  WEFT_HOST_DEVICE_INLINE void signal() const { semaphore.signal(); }
  /// Signals the peer with relaxed order.
  WEFT_HOST_DEVICE_INLINE void relaxedSignal() const { semaphore.relaxedSignal(); }
  /// Consumes one signal from the peer if one arrived (acquire). Single waiter.
  WEFT_HOST_DEVICE_INLINE bool poll() const { return semaphore.poll(); }
  /// Waits for and consumes the peer's next signal (acquire, budgeted). Single waiter.
  WEFT_HOST_DEVICE_INLINE void wait() const { semaphore.wait(); }
  /// wait() with relaxed loads.
  WEFT_HOST_DEVICE_INLINE void relaxedWait() const { semaphore.relaxedWait(); }

  /// Encodes `bytes` of local + localOffset into packets under `flag` and stores them at remote +
  /// remotePacketOffset (aligned to sizeof(Packet); room for packetBufferBytes<Packet>(bytes)), cooperatively.
  /// The peer reads them with unpackPackets/readPacket on its packet buffer; no signal is needed.
  template <class Packet>
  WEFT_HOST_DEVICE_INLINE void putPackets(uint64_t remotePacketOffset, uint64_t localOffset, uint64_t bytes,
                                          uint32_t flag, uint32_t threadId, uint32_t numThreads) const {
    weft::putPackets(reinterpret_cast<Packet*>(remote + remotePacketOffset), local + localOffset, bytes, flag, threadId,
                     numThreads);
  }

  /// Waits for the packets at packets + packetOffset that carry `bytes` under `flag` (each with the
  /// semaphore's budget; a timeout reports WaitOp::kPacketRead naming this channel) and writes the payload to
  /// local + localOffset, cooperatively.
  template <class Packet>
  WEFT_HOST_DEVICE_INLINE void unpackPackets(uint64_t packetOffset, uint64_t localOffset, uint64_t bytes, uint32_t flag,
                                             uint32_t threadId, uint32_t numThreads) const {
    weft::unpackPackets(local + localOffset, reinterpret_cast<const Packet*>(packets + packetOffset), bytes, flag,
                        threadId, numThreads, semaphore.budgetNs, semaphore.site);
  }

  /// Stores one packet carrying `payload` under `flag` as packet `index` of the remote buffer (viewed from
  /// remotePacketOffset).
  template <class Packet>
  WEFT_HOST_DEVICE_INLINE void writePacket(uint64_t remotePacketOffset, uint64_t index,
                                           typename Packet::Payload payload, uint32_t flag) const {
    Packet::store(reinterpret_cast<Packet*>(remote + remotePacketOffset) + index, payload, flag);
  }

  /// Waits for packet `index` of the local packet buffer (viewed from packetOffset) to carry `flag` and
  /// returns its payload (budgeted as unpackPackets).
  template <class Packet>
  WEFT_HOST_DEVICE_INLINE typename Packet::Payload readPacket(uint64_t packetOffset, uint64_t index,
                                                              uint32_t flag) const {
    return weft::readPacket(reinterpret_cast<const Packet*>(packets + packetOffset) + index, flag, semaphore.budgetNs,
                            semaphore.site);
  }
};
static_assert(std::is_trivially_copyable_v<MemoryChannelDeviceHandle>);

}  // namespace weft
