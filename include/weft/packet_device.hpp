/// LL ("low latency") packets: data that carries its own flag, so a reader needs no separate signal.
///
/// LL16: 16 bytes = (data0, flag, data1, flag), 8 payload bytes, written with one 16-byte store.
/// LL8:  8 bytes  = (data, flag), 4 payload bytes, written with one 8-byte store.
///
/// A packet is valid when every flag in it equals the flag the reader expects. Each (data, flag) pair is an
/// aligned 8-byte word, so even if a 16-byte store reaches memory as two 8-byte halves, a reader that checks
/// both flags never accepts a half-written packet. The reader's loads are relaxed: the payload travels in the
/// same word as its flag, so no acquire is needed for the payload itself.
///
/// Epoch flags: every use of a packet buffer passes a flag value that differs from the one the previous use of
/// the same slots wrote (an incrementing epoch is the usual choice; 0 is what zeroed memory holds, so never
/// use 0 on a fresh buffer). Then old packets can never be taken for new ones and buffers need no clearing.
#pragma once

#include <cstdint>
#include <weft/device.hpp>
#include <weft/device_error.hpp>
#include <weft/platform.hpp>

namespace weft {

/// A 16-byte LL packet: 8 payload bytes in data0 (low half) and data1 (high half), each beside a copy of the
/// flag.
struct alignas(16) LL16Packet {
  uint32_t data0;
  uint32_t flag0;
  uint32_t data1;
  uint32_t flag1;

  /// The payload type one packet carries.
  using Payload = uint64_t;
  /// Payload bytes per packet.
  static constexpr uint32_t kPayloadBytes = 8;

  /// The packet that carries `payload` under `flag` (pure encoding, no memory access).
  WEFT_HOST_DEVICE_INLINE static LL16Packet encode(uint64_t payload, uint32_t flag) {
    return LL16Packet{static_cast<uint32_t>(payload), flag, static_cast<uint32_t>(payload >> 32), flag};
  }

  /// When both flags equal `flag`, writes the payload into `payload` and returns true; otherwise writes the
  /// first flag that differs into `seenFlag` and returns false (pure decoding).
  WEFT_HOST_DEVICE_INLINE static bool decode(const LL16Packet& p, uint32_t flag, uint64_t& payload,
                                             uint32_t& seenFlag) {
    if (p.flag0 != flag) {
      seenFlag = p.flag0;
      return false;
    }
    if (p.flag1 != flag) {
      seenFlag = p.flag1;
      return false;
    }
    payload = static_cast<uint64_t>(p.data0) | (static_cast<uint64_t>(p.data1) << 32);
    seenFlag = flag;
    return true;
  }

  /// Stores `payload` under `flag` into *dst with one 16-byte store (relaxed, volatile: not cached in
  /// registers, not ordered with other stores). On the host two aligned 8-byte atomic stores, each a
  /// (data, flag) pair, which a reader of both flags cannot tell apart from one store.
  WEFT_HOST_DEVICE_INLINE static void store(LL16Packet* dst, uint64_t payload, uint32_t flag) {
    const LL16Packet p = encode(payload, flag);
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
    asm volatile("st.volatile.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(p.data0), "r"(p.flag0), "r"(p.data1),
                 "r"(p.flag1)
                 : "memory");
#elif defined(WEFT_DEVICE_COMPILE)
    using U32x4 = uint32_t __attribute__((ext_vector_type(4)));
    U32x4 v = {p.data0, p.flag0, p.data1, p.flag1};
    *reinterpret_cast<volatile U32x4*>(dst) = v;
#else
    auto* words = reinterpret_cast<uint64_t*>(dst);
    atomicStore<MemoryOrder::kRelaxed>(&words[0], static_cast<uint64_t>(p.data0) | (uint64_t{flag} << 32));
    atomicStore<MemoryOrder::kRelaxed>(&words[1], static_cast<uint64_t>(p.data1) | (uint64_t{flag} << 32));
#endif
  }

  /// Loads *src once (one 16-byte volatile load on the GPU, two 8-byte relaxed atomic loads on the host) and
  /// decodes it as decode() does.
  WEFT_HOST_DEVICE_INLINE static bool tryLoad(const LL16Packet* src, uint32_t flag, uint64_t& payload,
                                              uint32_t& seenFlag) {
    LL16Packet p;
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
    asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(p.data0), "=r"(p.flag0), "=r"(p.data1), "=r"(p.flag1)
                 : "l"(src)
                 : "memory");
#elif defined(WEFT_DEVICE_COMPILE)
    using U32x4 = uint32_t __attribute__((ext_vector_type(4)));
    U32x4 v = *reinterpret_cast<const volatile U32x4*>(src);
    p = LL16Packet{v.x, v.y, v.z, v.w};
#else
    const auto* words = reinterpret_cast<const uint64_t*>(src);
    const uint64_t lo = atomicLoad<MemoryOrder::kRelaxed>(&words[0]);
    const uint64_t hi = atomicLoad<MemoryOrder::kRelaxed>(&words[1]);
    p = LL16Packet{static_cast<uint32_t>(lo), static_cast<uint32_t>(lo >> 32), static_cast<uint32_t>(hi),
                   static_cast<uint32_t>(hi >> 32)};
#endif
    return decode(p, flag, payload, seenFlag);
  }
};
static_assert(sizeof(LL16Packet) == 16 && alignof(LL16Packet) == 16);

/// An 8-byte LL packet: 4 payload bytes beside the flag.
struct alignas(8) LL8Packet {
  uint32_t data;
  uint32_t flag;

  /// The payload type one packet carries.
  using Payload = uint32_t;
  /// Payload bytes per packet.
  static constexpr uint32_t kPayloadBytes = 4;

  /// The packet that carries `payload` under `flag` (pure encoding).
  WEFT_HOST_DEVICE_INLINE static LL8Packet encode(uint32_t payload, uint32_t flag) { return LL8Packet{payload, flag}; }

  /// When the flag equals `flag`, writes the payload and returns true; otherwise writes the flag seen into
  /// `seenFlag` and returns false (pure decoding).
  WEFT_HOST_DEVICE_INLINE static bool decode(const LL8Packet& p, uint32_t flag, uint32_t& payload, uint32_t& seenFlag) {
    seenFlag = p.flag;
    if (p.flag != flag) return false;
    payload = p.data;
    return true;
  }

  /// Stores `payload` under `flag` into *dst with one 8-byte relaxed atomic store (system scope).
  WEFT_HOST_DEVICE_INLINE static void store(LL8Packet* dst, uint32_t payload, uint32_t flag) {
    atomicStore<MemoryOrder::kRelaxed>(reinterpret_cast<uint64_t*>(dst),
                                       static_cast<uint64_t>(payload) | (uint64_t{flag} << 32));
  }

  /// Loads *src once (one 8-byte relaxed atomic load, system scope) and decodes it.
  WEFT_HOST_DEVICE_INLINE static bool tryLoad(const LL8Packet* src, uint32_t flag, uint32_t& payload,
                                              uint32_t& seenFlag) {
    const uint64_t w = atomicLoad<MemoryOrder::kRelaxed>(reinterpret_cast<const uint64_t*>(src));
    return decode(LL8Packet{static_cast<uint32_t>(w), static_cast<uint32_t>(w >> 32)}, flag, payload, seenFlag);
  }
};
static_assert(sizeof(LL8Packet) == 8 && alignof(LL8Packet) == 8);

/// Packets needed to carry `bytes` of data (the last one partly filled when bytes is not a multiple).
template <class Packet>
WEFT_HOST_DEVICE_INLINE uint64_t packetCount(uint64_t bytes) {
  return (bytes + Packet::kPayloadBytes - 1) / Packet::kPayloadBytes;
}

/// Bytes of packet memory needed to carry `bytes` of data.
template <class Packet>
WEFT_HOST_DEVICE_INLINE uint64_t packetBufferBytes(uint64_t bytes) {
  return packetCount<Packet>(bytes) * sizeof(Packet);
}

/// Waits for *src to carry `flag` (relaxed loads, budget `budgetNs`) and returns its payload. When the budget
/// runs out, reports WaitOp::kPacketRead at `site` with the flag expected and the flag seen (device: trap;
/// host: throws Error(kTimeout)).
template <class Packet>
WEFT_HOST_DEVICE_INLINE typename Packet::Payload readPacket(const Packet* src, uint32_t flag, uint64_t budgetNs,
                                                            const WaitSite& site) {
  typename Packet::Payload payload{};
  uint32_t seen = 0;
  if (Packet::tryLoad(src, flag, payload, seen)) return payload;
  if (!spinWaitUntil([&] { return Packet::tryLoad(src, flag, payload, seen); }, WaitBudget{budgetNs})) {
    reportWaitTimeout(site, WaitOp::kPacketRead, flag, seen, budgetNs);
  }
  return payload;
}

namespace detail {

/// Loads up to one payload from `src` (`bytes` <= kPayloadBytes valid bytes; the rest reads as 0). An aligned
/// full payload is one load; anything else is assembled byte by byte so nothing past the end is touched.
template <class Packet>
WEFT_HOST_DEVICE_INLINE typename Packet::Payload loadPayload(const uint8_t* src, uint64_t bytes) {
  using P = typename Packet::Payload;
  if (bytes >= Packet::kPayloadBytes && (reinterpret_cast<uintptr_t>(src) & (sizeof(P) - 1)) == 0) {
    return *reinterpret_cast<const P*>(src);
  }
  P v = 0;
  for (uint64_t b = 0; b < bytes && b < Packet::kPayloadBytes; ++b) v |= static_cast<P>(src[b]) << (8 * b);
  return v;
}

/// Stores the first `bytes` (<= kPayloadBytes) of a payload at `dst`, whole when aligned and full.
template <class Packet>
WEFT_HOST_DEVICE_INLINE void storePayload(uint8_t* dst, typename Packet::Payload v, uint64_t bytes) {
  using P = typename Packet::Payload;
  if (bytes >= Packet::kPayloadBytes && (reinterpret_cast<uintptr_t>(dst) & (sizeof(P) - 1)) == 0) {
    *reinterpret_cast<P*>(dst) = v;
    return;
  }
  for (uint64_t b = 0; b < bytes && b < Packet::kPayloadBytes; ++b) dst[b] = static_cast<uint8_t>(v >> (8 * b));
}

}  // namespace detail

/// Encodes `bytes` of `src` into packets at `dst` under `flag`, cooperatively: packet i is written by thread
/// i % numThreads. Any size and source alignment (the last packet's unused payload bytes are 0); `dst` must be
/// aligned to sizeof(Packet) and hold packetCount<Packet>(bytes) packets. Relaxed stores: the flags are what
/// the reader waits for.
template <class Packet>
WEFT_HOST_DEVICE_INLINE void putPackets(Packet* dst, const void* src, uint64_t bytes, uint32_t flag, uint32_t threadId,
                                        uint32_t numThreads) {
  const auto* s = static_cast<const uint8_t*>(src);
  const uint64_t count = packetCount<Packet>(bytes);
  for (uint64_t i = threadId; i < count; i += numThreads) {
    const uint64_t offset = i * Packet::kPayloadBytes;
    Packet::store(&dst[i], detail::loadPayload<Packet>(s + offset, bytes - offset), flag);
  }
}

/// Waits for the packets at `src` that carry `bytes` of data under `flag` and writes their payload to `dst`,
/// cooperatively (packet i by thread i % numThreads). Exactly `bytes` bytes of `dst` are written, at any
/// alignment. Each packet's wait has budget `budgetNs` and reports WaitOp::kPacketRead at `site`.
template <class Packet>
WEFT_HOST_DEVICE_INLINE void unpackPackets(void* dst, const Packet* src, uint64_t bytes, uint32_t flag,
                                           uint32_t threadId, uint32_t numThreads, uint64_t budgetNs,
                                           const WaitSite& site) {
  auto* d = static_cast<uint8_t*>(dst);
  const uint64_t count = packetCount<Packet>(bytes);
  for (uint64_t i = threadId; i < count; i += numThreads) {
    const uint64_t offset = i * Packet::kPayloadBytes;
    detail::storePayload<Packet>(d + offset, readPacket(&src[i], flag, budgetNs, site), bytes - offset);
  }
}

}  // namespace weft
