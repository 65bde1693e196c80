/// Device handle of MemoryDevice2DeviceSemaphore: signal by an atomic add into the peer's counter in mapped
/// peer memory, wait by loads of the local counter. Usable in kernels and in host threads alike.
#pragma once

#include <cstdint>
#include <type_traits>
#include <weft/device.hpp>
#include <weft/device_error.hpp>
#include <weft/platform.hpp>

namespace weft {

/// A monotonic 64-bit counter pair between this rank and one peer.
///
/// `inbound` is this rank's counter (the peer's signals add to it); `remoteInbound` is the peer's counter,
/// mapped into this process (GPU memory through cuda_ipc, or shared host memory). `expected` (memory of this
/// rank) counts the signals wait() has consumed, so it survives across kernel launches.
///
/// Many waiters: every thread that waits sees the same inbound counter. wait() and poll() advance the one
/// shared `expected` word without synchronisation, so exactly one thread (per handle) may call them at a
/// time; any number of threads may instead call waitFor(target) with targets they track themselves (for
/// example, a per-waiter count of rounds). signal() may be called by any number of threads concurrently
/// (each call adds exactly one).
struct MemoryDevice2DeviceSemaphoreDeviceHandle {
  uint64_t* inbound;        ///< this rank's inbound counter
  uint64_t* remoteInbound;  ///< the peer's inbound counter (mapped peer memory)
  uint64_t* expected;       ///< signals consumed by wait()/poll() on this side
  uint64_t budgetNs;        ///< budget of every wait
  WaitSite site;            ///< who waits: rank, peer, channel, and where a timeout is recorded
  /// 1 when the peer runs on this rank's GPU (both counters in its memory): signals and waits then order memory
  /// at device scope, which covers every thread of both ranks and does not reach out over the bus (a system-scope
  /// release or acquire does). 0: system scope.
  uint32_t deviceScope;
  uint32_t reserved;

  /// Adds 1 to the peer's counter with release order (system scope, or device scope when deviceScope): every write
  /// this thread made (and every write it has observed) before the call is visible to the peer once its wait sees
  /// the new value. To publish writes made by several threads, synchronise them (e.g. a block barrier) before one
  /// signals.
  WEFT_HOST_DEVICE_INLINE void signal() const {
    withScope(deviceScope != 0, [&](auto scope) {
      atomicFetchAdd<MemoryOrder::kRelease, decltype(scope)::value>(remoteInbound, uint64_t{1});
    });
  }

  /// Adds 1 to the peer's counter with relaxed order: no earlier write is ordered before it. Pair it with an
  /// explicit fence<MemoryOrder::kRelease, Scope::kSystem>() when data must be visible, or use it for pure
  /// flow control.
  WEFT_HOST_DEVICE_INLINE void relaxedSignal() const {
    atomicFetchAdd<MemoryOrder::kRelaxed, Scope::kSystem>(remoteInbound, uint64_t{1});
  }

  /// Signals received so far (one relaxed load of the inbound counter).
  WEFT_HOST_DEVICE_INLINE uint64_t received() const { return atomicLoad<MemoryOrder::kRelaxed>(inbound); }

  /// Signals consumed by wait()/poll() so far.
  WEFT_HOST_DEVICE_INLINE uint64_t consumed() const { return *expected; }

  /// Consumes one signal if one has arrived: an acquire load; on success the peer's writes before that signal
  /// are visible and `expected` advances by one. Single waiter (see the struct comment).
  WEFT_HOST_DEVICE_INLINE bool poll() const {
    const uint64_t seen = withScope(deviceScope != 0, [&](auto scope) {
      return atomicLoad<MemoryOrder::kAcquire, decltype(scope)::value>(inbound);
    });
    if (seen > *expected) {
      *expected += 1;
      return true;
    }
    return false;
  }

  /// Waits for the next signal (acquire loads) and consumes it: afterwards the peer's writes before that signal
  /// are visible to this thread. Single waiter. When the budget runs out, reports WaitOp::kSemaphoreWait with
  /// the expected and seen counts (device: trap; host: throws Error(kTimeout)).
  WEFT_HOST_DEVICE_INLINE void wait() const {
    withScope(deviceScope != 0, [&](auto scope) {
      consumeNextSignal<MemoryOrder::kAcquire, decltype(scope)::value>(inbound, expected, budgetNs, site,
                                                                       WaitOp::kSemaphoreWait);
    });
  }

  /// wait() with relaxed loads: the signal is consumed but the peer's writes are not ordered before this
  /// thread's later reads (add fence<MemoryOrder::kAcquire, Scope::kSystem>() when they must be).
  WEFT_HOST_DEVICE_INLINE void relaxedWait() const {
    consumeNextSignal<MemoryOrder::kRelaxed>(inbound, expected, budgetNs, site, WaitOp::kSemaphoreWait);
  }

  /// Waits until the inbound counter reaches `target` (acquire loads) without touching `expected`: any number
  /// of threads may wait this way at once, each with its own target. Same timeout behaviour as wait().
  WEFT_HOST_DEVICE_INLINE void waitFor(uint64_t target) const {
    withScope(deviceScope != 0, [&](auto scope) {
      waitAtLeast<MemoryOrder::kAcquire, decltype(scope)::value>(inbound, target, budgetNs, site,
                                                                 WaitOp::kSemaphoreWait);
    });
  }

  /// waitFor() with relaxed loads.
  WEFT_HOST_DEVICE_INLINE void relaxedWaitFor(uint64_t target) const {
    waitAtLeast<MemoryOrder::kRelaxed>(inbound, target, budgetNs, site, WaitOp::kSemaphoreWait);
  }
};
static_assert(std::is_trivially_copyable_v<MemoryDevice2DeviceSemaphoreDeviceHandle>);

}  // namespace weft
