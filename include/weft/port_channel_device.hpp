/// The device handle of a PortChannel: one-sided put / signal / flush / atomicAdd carried out by the proxy, which
/// GPU threads (or host threads, in CPU tests) ask for by pushing triggers into the FIFO, or by the calling thread
/// itself for small requests where the connection maps the peer's memory (PortDirectPath); wait / poll on the
/// Host2DeviceSemaphore the peer signals.
///
/// Trigger format (the proxy decodes what this file encodes). Word1 bit 63 is the FIFO's lap bit.
///   word0: bits 0-31 dstOffset (low 32 bits), bits 32-63 srcOffset (low 32 bits)
///   word1: bits 0-31 size (low 32 bits; an atomicAdd's value), bits 32-41 reserved (0), bits 42-57 channel id,
///          bit 58 "wide", bits 59-62 request type, bit 63 FIFO lap bit
/// A request whose dstOffset, srcOffset or size needs more than 32 bits is "wide": a second trigger follows in the
/// next FIFO position (both pushed with one fetch-add) carrying the high 32 bits of each in the same places, and the
/// type kPortExtension. So transfers and offsets of any 64-bit size go through unsplit, and the common case costs one
/// 16-byte store.
#pragma once

#include <cstdint>
#include <type_traits>
#include <weft/copy_device.hpp>
#include <weft/device.hpp>
#include <weft/fifo_device.hpp>
#include <weft/host_device_semaphore_device.hpp>
#include <weft/platform.hpp>

namespace weft {

/// Request types: bits 0-2 combine put, signal and flush (done in that order); values 8 and up are single operations.
inline constexpr uint32_t kPortPut = 1;
inline constexpr uint32_t kPortSignal = 2;
inline constexpr uint32_t kPortFlush = 4;
inline constexpr uint32_t kPortAtomicAdd = 8;
/// First and last type left to custom proxy handler plugins (include/weft/plugin/proxy_handler.h).
inline constexpr uint32_t kPortCustomFirst = 9;
inline constexpr uint32_t kPortCustomLast = 14;
/// Type of the second trigger of a wide request.
inline constexpr uint32_t kPortExtension = 15;

/// Number of port channel ids a trigger can carry (ids 0..kMaxPortChannels-1), checked when a channel is made.
inline constexpr uint32_t kMaxPortChannels = uint32_t{1} << 16;

/// One request as the proxy sees it, decoded.
struct PortRequest {
  uint32_t type;  ///< kPort* bits or value
  uint32_t channel;
  uint64_t dstOffset;
  uint64_t srcOffset;
  uint64_t size;  ///< bytes of a put; the value of an atomicAdd; free for custom types
};

namespace detail {
inline constexpr uint64_t kLow32 = 0xffffffffull;
inline constexpr int kChannelShift = 42;
inline constexpr int kWideShift = 58;
inline constexpr int kTypeShift = 59;

WEFT_HOST_DEVICE_INLINE FifoTrigger packPortTrigger(uint32_t type, uint32_t channel, bool wide, uint64_t dst,
                                                    uint64_t src, uint64_t size) {
  FifoTrigger t;
  t.word0 = (dst & kLow32) | ((src & kLow32) << 32);
  t.word1 = (size & kLow32) | (static_cast<uint64_t>(channel & (kMaxPortChannels - 1)) << kChannelShift) |
            (static_cast<uint64_t>(wide ? 1 : 0) << kWideShift) | (static_cast<uint64_t>(type & 15u) << kTypeShift);
  return t;
}
}  // namespace detail

/// Whether `r` needs two triggers (some field does not fit 32 bits).
WEFT_HOST_DEVICE_INLINE bool portRequestIsWide(const PortRequest& r) {
  return ((r.dstOffset | r.srcOffset | r.size) >> 32) != 0;
}

/// Encodes `r` into one trigger (returns 1) or two (returns 2: out[0] then out[1]). Ids above the format's range are
/// masked: the host checks them when it makes a handle.
WEFT_HOST_DEVICE_INLINE int encodePortRequest(const PortRequest& r, FifoTrigger out[2]) {
  const bool wide = portRequestIsWide(r);
  out[0] = detail::packPortTrigger(r.type, r.channel, wide, r.dstOffset, r.srcOffset, r.size);
  if (!wide) return 1;
  out[1] =
      detail::packPortTrigger(kPortExtension, r.channel, false, r.dstOffset >> 32, r.srcOffset >> 32, r.size >> 32);
  return 2;
}

/// Whether a trigger (lap bit cleared) is the head of a wide request, so that the next position holds its extension.
WEFT_HOST_DEVICE_INLINE bool portTriggerIsWide(const FifoTrigger& t) {
  return ((t.word1 >> detail::kWideShift) & 1u) != 0;
}

/// Decodes a request from its head trigger and, when the head is wide, its extension (ignored otherwise). Returns false
/// when the pair is malformed (an extension where a head belongs, or a head whose extension does not match it).
WEFT_HOST_DEVICE_INLINE bool decodePortRequest(const FifoTrigger& head, const FifoTrigger& extension,
                                               PortRequest* out) {
  const uint32_t type = static_cast<uint32_t>((head.word1 >> detail::kTypeShift) & 15u);
  const uint32_t channel = static_cast<uint32_t>((head.word1 >> detail::kChannelShift) & (kMaxPortChannels - 1));
  if (type == kPortExtension || type == 0) return false;
  if (((head.word1 >> 32) & 0x3ffu) != 0) return false;  // reserved bits
  PortRequest r{type, channel, head.word0 & detail::kLow32, head.word0 >> 32, head.word1 & detail::kLow32};
  if (portTriggerIsWide(head)) {
    const uint32_t extType = static_cast<uint32_t>((extension.word1 >> detail::kTypeShift) & 15u);
    const uint32_t extChannel =
        static_cast<uint32_t>((extension.word1 >> detail::kChannelShift) & (kMaxPortChannels - 1));
    if (extType != kPortExtension || extChannel != channel) return false;
    r.dstOffset |= (extension.word0 & detail::kLow32) << 32;
    r.srcOffset |= (extension.word0 >> 32) << 32;
    r.size |= (extension.word1 & detail::kLow32) << 32;
  }
  *out = r;
  return true;
}

/// Order of one connection's requests between the two paths (see PortDirectPath): FIFO position + 1 of the latest
/// request that went through the proxy, and of the latest flush the proxy completed. While `proxied > flushed` a
/// request may still be in the proxy's hands, so later requests go through the proxy too (after it, in FIFO order).
/// Lives on the handle side (GPU memory for GPU threads); shared by the connection's channels.
struct PortOrder {
  uint64_t proxied;
  uint64_t flushed;
};

/// The direct path of a channel whose connection maps the peer's memory into this process (cuda_ipc, host): a put of
/// at most `maxBytes` is copied by the calling thread with loads and stores into the mapped destination, a signal is a
/// release atomic add into the peer's mapped semaphore counter, an atomicAdd a release atomic add into the mapped
/// destination; a flush with nothing in the proxy's hands is a fence. Such a request costs the caller well under a
/// microsecond instead of the proxy's round trip (a copy submitted by the host costs a kernel launch, 5-6 us). Larger
/// puts, and everything while the proxy holds an unflushed request of the connection, go through the proxy, so
/// requests stay in order. `order == nullptr` (no mapping, or [proxy] direct_max_bytes = 0) disables it.
struct PortDirectPath {
  uint8_t* dst;                 ///< the peer's destination memory, mapped here
  const uint8_t* src;           ///< the local source memory
  uint64_t dstBytes, srcBytes;  ///< their lengths (a request outside them goes to the proxy, which reports it)
  uint64_t* peerInbound;        ///< the peer's semaphore counter, mapped here
  PortOrder* order;             ///< the connection's order state
  uint64_t maxBytes;            ///< largest put done directly
};

/// What a kernel needs to drive one PortChannel: the FIFO of the proxy thread serving the channel's connection, the
/// channel id the proxy resolves to (connection, semaphore, destination and source memory), the semaphore the peer
/// signals, and the direct path where the connection maps peer memory. Trivially copyable, passed by value. Any number
/// of threads may put/signal/flush/atomicAdd concurrently; one thread at a time may wait/poll.
struct PortChannelDeviceHandle {
  FifoDeviceHandle fifo;
  Host2DeviceSemaphoreDeviceHandle semaphore;
  uint32_t channel;
  uint32_t reserved;
  PortDirectPath direct;

  /// Copies `size` bytes from the source memory at `srcOffset` to the peer's destination memory at `dstOffset`:
  /// directly for a small put where the direct path allows, else through the proxy. Ordering: this thread's earlier
  /// writes (the source data) are read by the copy (through the proxy: visible to it before it reads the trigger,
  /// release, system scope). The copy completes asynchronously: flush() or a signal the peer waits on orders it.
  WEFT_HOST_DEVICE_INLINE void put(uint64_t dstOffset, uint64_t srcOffset, uint64_t size) const {
    if (putsDirectly(dstOffset, srcOffset, size)) {
      copyDirect(dstOffset, srcOffset, size);
    } else {
      proxied(kPortPut, dstOffset, srcOffset, size);
    }
  }
  /// put() with the same offset on both sides.
  WEFT_HOST_DEVICE_INLINE void put(uint64_t offset, uint64_t size) const { put(offset, offset, size); }

  /// Increments the peer's semaphore by one after every earlier request of this channel's connection is visible to
  /// the peer.
  WEFT_HOST_DEVICE_INLINE void signal() const {
    if (inOrderForDirect()) {
      atomicFetchAdd<MemoryOrder::kRelease, Scope::kSystem>(direct.peerInbound, uint64_t{1});
    } else {
      proxied(kPortSignal, 0, 0, 0);
    }
  }

  /// put() then signal(), in one trigger when it goes through the proxy.
  WEFT_HOST_DEVICE_INLINE void putWithSignal(uint64_t dstOffset, uint64_t srcOffset, uint64_t size) const {
    if (putsDirectly(dstOffset, srcOffset, size)) {
      copyDirect(dstOffset, srcOffset, size);
      atomicFetchAdd<MemoryOrder::kRelease, Scope::kSystem>(direct.peerInbound, uint64_t{1});
    } else {
      proxied(kPortPut | kPortSignal, dstOffset, srcOffset, size);
    }
  }
  /// putWithSignal() with the same offset on both sides.
  WEFT_HOST_DEVICE_INLINE void putWithSignal(uint64_t offset, uint64_t size) const {
    putWithSignal(offset, offset, size);
  }

  /// put(), signal() and flush() (in one trigger when it goes through the proxy); returns once the flush completed
  /// (acquire, system scope): the source may be overwritten afterwards. Reports WaitOp::kFifoSync when `budgetNs`
  /// runs out.
  WEFT_HOST_DEVICE_INLINE void putWithSignalAndFlush(uint64_t dstOffset, uint64_t srcOffset, uint64_t size,
                                                     uint64_t budgetNs) const {
    if (putsDirectly(dstOffset, srcOffset, size)) {
      copyDirect(dstOffset, srcOffset, size);
      atomicFetchAdd<MemoryOrder::kAcqRel, Scope::kSystem>(direct.peerInbound, uint64_t{1});
      return;
    }
    flushed(proxied(kPortPut | kPortSignal | kPortFlush, dstOffset, srcOffset, size), budgetNs);
  }
  /// putWithSignalAndFlush() with the FIFO's default budget.
  WEFT_HOST_DEVICE_INLINE void putWithSignalAndFlush(uint64_t dstOffset, uint64_t srcOffset, uint64_t size) const {
    putWithSignalAndFlush(dstOffset, srcOffset, size, fifo.defaultBudgetNs);
  }

  /// Returns once every earlier request of this channel's connection has completed at the transport (acquire,
  /// system scope). Reports WaitOp::kFifoSync when `budgetNs` runs out.
  WEFT_HOST_DEVICE_INLINE void flush(uint64_t budgetNs) const {
    if (inOrderForDirect()) {
      fence<MemoryOrder::kAcqRel, Scope::kSystem>();  // nothing in the proxy's hands: direct requests are done
      return;
    }
    flushed(proxied(kPortFlush, 0, 0, 0), budgetNs);
  }
  /// flush() with the FIFO's default budget.
  WEFT_HOST_DEVICE_INLINE void flush() const { flush(fifo.defaultBudgetNs); }

  /// Adds `value` to the 64-bit word at `dstOffset` (8-byte aligned) of the peer's destination memory, after earlier
  /// requests of the connection are visible to the peer.
  WEFT_HOST_DEVICE_INLINE void atomicAdd(uint64_t dstOffset, uint64_t value) const {
    if (dstOffset % 8 == 0 && dstOffset <= direct.dstBytes && direct.dstBytes - dstOffset >= 8 && inOrderForDirect()) {
      atomicFetchAdd<MemoryOrder::kRelease, Scope::kSystem>(reinterpret_cast<uint64_t*>(direct.dst + dstOffset), value);
    } else {
      proxied(kPortAtomicAdd, dstOffset, 0, value);
    }
  }

  /// Waits for the peer's next signal (acquire, system scope). Reports WaitOp::kChannelWait, naming the peer and
  /// channel, when `budgetNs` runs out.
  WEFT_HOST_DEVICE_INLINE void wait(uint64_t budgetNs) const { semaphore.wait(budgetNs, WaitOp::kChannelWait); }
  /// wait() with the semaphore's default budget.
  WEFT_HOST_DEVICE_INLINE void wait() const { wait(semaphore.defaultBudgetNs); }

  /// Consumes the peer's next signal if it has arrived (acquire, system scope); never waits.
  WEFT_HOST_DEVICE_INLINE bool poll() const { return semaphore.poll(); }

  /// Pushes any request (custom types included) to the proxy; returns the FIFO position of its last trigger. The
  /// direct path does not see such requests: mix them with direct ones only across a flush.
  WEFT_HOST_DEVICE_INLINE uint64_t request(uint32_t type, uint64_t dstOffset, uint64_t srcOffset, uint64_t size) const {
    FifoTrigger t[2];
    const PortRequest r{type, channel, dstOffset, srcOffset, size};
    if (encodePortRequest(r, t) == 1) return fifo.push(t[0]);
    return fifo.pushPair(t[0], t[1], fifo.defaultBudgetNs);
  }

  /// Whether no request of the connection is in the proxy's hands, so the next one may take the direct path.
  WEFT_HOST_DEVICE_INLINE bool inOrderForDirect() const {
    return direct.order != nullptr && atomicLoad<MemoryOrder::kRelaxed, Scope::kDevice>(&direct.order->proxied) <=
                                          atomicLoad<MemoryOrder::kAcquire, Scope::kDevice>(&direct.order->flushed);
  }

 private:
  WEFT_HOST_DEVICE_INLINE bool putsDirectly(uint64_t dstOffset, uint64_t srcOffset, uint64_t size) const {
    return size <= direct.maxBytes && dstOffset <= direct.dstBytes && direct.dstBytes - dstOffset >= size &&
           srcOffset <= direct.srcBytes && direct.srcBytes - srcOffset >= size && inOrderForDirect();
  }

  WEFT_HOST_DEVICE_INLINE void copyDirect(uint64_t dstOffset, uint64_t srcOffset, uint64_t size) const {
    copyByOneThread(direct.dst + dstOffset, direct.src + srcOffset, size);
  }

  // Pushes a request and notes it in the connection's order state, so later requests do not overtake it.
  WEFT_HOST_DEVICE_INLINE uint64_t proxied(uint32_t type, uint64_t dstOffset, uint64_t srcOffset, uint64_t size) const {
    const uint64_t position = request(type, dstOffset, srcOffset, size);
    if (direct.order != nullptr)
      atomicFetchMax<MemoryOrder::kRelaxed, Scope::kDevice>(&direct.order->proxied, position + 1);
    return position;
  }

  // Waits for the flush at `position`, then notes that everything before it is done.
  WEFT_HOST_DEVICE_INLINE void flushed(uint64_t position, uint64_t budgetNs) const {
    fifo.sync(position, budgetNs);
    if (direct.order != nullptr)
      atomicFetchMax<MemoryOrder::kRelease, Scope::kDevice>(&direct.order->flushed, position + 1);
  }
};
static_assert(std::is_trivially_copyable_v<PortChannelDeviceHandle>);

}  // namespace weft
