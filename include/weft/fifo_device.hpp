/// The device side of the trigger FIFO: GPU threads (or host threads, in tests and on WEFT_GPU=none builds) push
/// 16-byte triggers into a ring in host-visible memory; one proxy thread pops them (weft::Fifo, fifo.hpp).
///
/// Protocol. A producer takes a position `p` with one atomic fetch-add on `head` (device memory), waits until the
/// ring has room for it (`p < tail + size`, tail being the count of triggers the proxy has finished, published by the
/// host into host-mapped memory), then writes slot `p % size`. Slots are never cleared: bit 63 of a trigger's
/// word1 (kFifoLapBit) carries the parity of the lap `p / size`, inverted (lap 0 writes 1, lap 1 writes 0, ...), so
/// the zeroed ring reads as empty and a slot left over from the previous lap never looks new. One bit suffices because
/// back-pressure keeps every producer within one lap of the consumer: position p + size cannot be written before
/// the proxy finished p.
///
/// Concurrency: any number of producers, one consumer per FIFO. Producers that took positions below p are already
/// running (they did their fetch-add), so the wait for room always ends while the proxy pops.
/// On AMD (no independent thread scheduling inside a wavefront), lanes of one wavefront that spin for room wait on
/// each other: keep the number of concurrently pushing lanes of one wavefront below the FIFO size (the usual
/// pattern, one pushing thread per block, is far below it).
#pragma once

#include <cstdint>
#include <type_traits>
#include <weft/device.hpp>
#include <weft/device_error.hpp>
#include <weft/platform.hpp>

namespace weft {

/// One FIFO entry: two 64-bit words. Bit 63 of word1 belongs to the FIFO (the lap bit); the other 127 bits are the
/// payload the proxy interprets. Aligned so a slot is one 16-byte store.
struct alignas(16) FifoTrigger {
  uint64_t word0;
  uint64_t word1;
};
static_assert(sizeof(FifoTrigger) == 16);
static_assert(std::is_trivially_copyable_v<FifoTrigger>);

/// The bit of word1 the FIFO uses to tell a newly written slot from the previous lap's.
inline constexpr uint64_t kFifoLapBit = uint64_t{1} << 63;

/// Largest number of slots a FIFO may have (checked on the host when a Fifo is made).
inline constexpr uint32_t kMaxFifoSize = uint32_t{1} << 20;

/// The value of the lap bit that marks slot position `p` as written, for a ring of `size` slots.
WEFT_HOST_DEVICE_INLINE uint64_t fifoLapBitFor(uint64_t position, uint32_t size) {
  return ((position / size) & 1u) ? uint64_t{0} : kFifoLapBit;
}

/// What a kernel (or a host thread) needs to push into one FIFO. A passive, trivially copyable struct, passed to
/// kernels by value; every pointer is valid on the side the handle was made for (see FifoSide in fifo.hpp).
struct FifoDeviceHandle {
  FifoTrigger* ring;         ///< `size` slots in host-visible memory
  uint64_t* head;            ///< next position to hand out (device memory for GPU producers)
  const uint64_t* tail;      ///< triggers the proxy has finished, published by the host (host-mapped memory)
  uint64_t* tailCache;       ///< last tail a producer read (device memory), to avoid reading host memory per push
  uint32_t size;             ///< number of slots, 1..kMaxFifoSize
  uint32_t reserved;         ///< zero
  uint64_t defaultBudgetNs;  ///< budget of push/sync when none is given
  WaitSite site;             ///< who waits, for a timeout record

  /// Pushes one trigger and returns its position (the slot id for sync). `t.word1` must have kFifoLapBit clear.
  /// Waits, up to `budgetNs`, for room while the ring is full; when that runs out reports WaitOp::kFifoPush
  /// (trap on the GPU, Error(kTimeout) on the host). Ordering: every memory operation of this thread before the push
  /// is visible system-wide before the proxy can see the trigger (release, system scope).
  WEFT_HOST_DEVICE_INLINE uint64_t push(FifoTrigger t, uint64_t budgetNs) const {
    // The cached tail is read before the fetch-add so that the two device-memory round trips overlap instead of
    // running one after the other (a stale cache only delays a push; see waitForRoom).
    const uint64_t cached = atomicLoad<MemoryOrder::kRelaxed, Scope::kDevice>(tailCache);
    const uint64_t p = atomicFetchAdd<MemoryOrder::kRelaxed, Scope::kDevice>(head, uint64_t{1});
    waitForRoom(p, cached, budgetNs);
    store(p, t);
    return p;
  }
  /// push() with the handle's default budget.
  WEFT_HOST_DEVICE_INLINE uint64_t push(FifoTrigger t) const { return push(t, defaultBudgetNs); }

  /// Pushes two triggers into two consecutive positions (one fetch-add, so no other producer's trigger comes between
  /// them) and returns the position of the second. Waiting and ordering as push(); `first` is published before
  /// `second`, so a consumer that sees `first` only has to wait briefly for `second`.
  WEFT_HOST_DEVICE_INLINE uint64_t pushPair(FifoTrigger first, FifoTrigger second, uint64_t budgetNs) const {
    const uint64_t cached = atomicLoad<MemoryOrder::kRelaxed, Scope::kDevice>(tailCache);
    const uint64_t p = atomicFetchAdd<MemoryOrder::kRelaxed, Scope::kDevice>(head, uint64_t{2});
    waitForRoom(p + 1, cached, budgetNs);
    store(p, first);
    store(p + 1, second);
    return p + 1;
  }

  /// Waits until the proxy has finished the trigger at `position` (and so every trigger before it): acquire,
  /// system scope, so whatever the proxy did for it (a completed flush) is visible afterwards. Reports
  /// WaitOp::kFifoSync when `budgetNs` runs out.
  WEFT_HOST_DEVICE_INLINE void sync(uint64_t position, uint64_t budgetNs) const {
    waitAtLeast(tail, position + 1, budgetNs, site, WaitOp::kFifoSync);
  }
  /// sync() with the handle's default budget.
  WEFT_HOST_DEVICE_INLINE void sync(uint64_t position) const { sync(position, defaultBudgetNs); }

  /// Whether the proxy has finished the trigger at `position` (acquire, system scope); never waits.
  WEFT_HOST_DEVICE_INLINE bool finished(uint64_t position) const {
    return atomicLoad<MemoryOrder::kAcquire>(tail) > position;
  }

 private:
  // Room for position p means p < tail + size. The cached tail (device memory, `cached`: read by the caller before it
  // took p) answers most pushes; only when it says "full" does the producer read the real tail across PCIe. A stale
  // cache is only ever smaller than the real tail (both are monotonic, the cache is written from real reads), so it
  // can delay a push but never let one in early; reading it before taking p only makes it staler. Concurrent cache
  // stores may race; the loser leaves a smaller, still-safe value.
  WEFT_HOST_DEVICE_INLINE void waitForRoom(uint64_t p, uint64_t cached, uint64_t budgetNs) const {
    if (p < cached + size) return;
    const uint64_t need = p + 1 - size;  // tail must reach this
    // Acquire pairs with the consumer's release of tail: the consumer's reads of the slot we are about to
    // overwrite happened before it advanced tail past it.
    const uint64_t seen = waitAtLeast(tail, need, budgetNs, site, WaitOp::kFifoPush);
    atomicStore<MemoryOrder::kRelaxed, Scope::kDevice>(tailCache, seen);
  }

  WEFT_HOST_DEVICE_INLINE void store(uint64_t p, FifoTrigger t) const {
    t.word1 = (t.word1 & ~kFifoLapBit) | fifoLapBitFor(p, size);
    FifoTrigger* slot = ring + (p % size);
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
    // NVIDIA: a system-scope release fence (fence.acq_rel.sys) and then ONE 16-byte store. The fence orders
    // everything this thread wrote before (e.g. the data a put will copy) ahead of the store for every observer,
    // the CPU included. The 16-byte aligned vector store leaves the SM as one PCIe write of one 16-byte range
    // inside a cache line, so the proxy never sees the lap bit of the new trigger beside the payload of the old one:
    // it reads word1 (acquire) then word0. A release st on word1 after a plain st of word0 would also be correct,
    // but costs two PCIe writes per trigger; this is one. st.relaxed.sys (not .volatile or .weak) keeps the store
    // in the PTX memory model as a strong system-scope store, which the fence-then-store release pattern needs.
    fence<MemoryOrder::kRelease, Scope::kSystem>();
    asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(slot), "l"(t.word0), "l"(t.word1) : "memory");
#else
    // HIP and host producers: word0 with a relaxed store, then word1 (which carries the lap bit) with a
    // system-scope release store. The consumer acquires word1 before it reads word0, so a new lap bit guarantees
    // the new word0 (the release/acquire pair); no claim about how wide a store reaches host memory in one piece is
    // needed. The release also orders this thread's earlier writes (a put's source data) before the trigger.
    // (clang's __hip_atomic on a 128-bit type is not lock-free on CDNA: it would take a lock in host memory.)
    atomicStore<MemoryOrder::kRelaxed>(&slot->word0, t.word0);
    atomicStore<MemoryOrder::kRelease>(&slot->word1, t.word1);
#endif
  }
};
static_assert(std::is_trivially_copyable_v<FifoDeviceHandle>);

}  // namespace weft
