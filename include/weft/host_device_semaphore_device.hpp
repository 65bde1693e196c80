/// The device handle of a Host2DeviceSemaphore: a monotonic 64-bit counter that the peer's proxy increments (an
/// atomicAdd over the transport) and that a GPU thread (or a host thread, in CPU tests) waits on.
#pragma once

#include <cstdint>
#include <type_traits>
#include <weft/device.hpp>
#include <weft/device_error.hpp>
#include <weft/platform.hpp>

namespace weft {

/// What a kernel needs to wait on one Host2DeviceSemaphore. Trivially copyable, passed by value. One thread at a time
/// may call wait/poll on the semaphore (they advance the shared expected count).
struct Host2DeviceSemaphoreDeviceHandle {
  const uint64_t* inbound;   ///< the counter the peer's proxy adds to (mapped for the waiting side)
  uint64_t* expected;        ///< signals consumed so far (lives on the waiting side, persists across kernels)
  uint64_t defaultBudgetNs;  ///< budget of wait() when none is given
  WaitSite site;             ///< who waits, for a timeout record

  /// Consumes one signal if one has arrived: returns whether it did. Acquire, system scope: after a true return,
  /// everything the peer wrote before signalling is visible. Never waits.
  WEFT_HOST_DEVICE_INLINE bool poll() const {
    const uint64_t want = *expected + 1;
    if (atomicLoad<MemoryOrder::kAcquire>(inbound) < want) return false;
    *expected = want;
    return true;
  }

  /// Waits for the next signal and consumes it (acquire, system scope). When `budgetNs` runs out, reports `op`
  /// (WaitOp::kSemaphoreWait by default) with the expected and seen count: a trap on the GPU, Error(kTimeout) on
  /// the host.
  WEFT_HOST_DEVICE_INLINE void wait(uint64_t budgetNs, WaitOp op = WaitOp::kSemaphoreWait) const {
    consumeNextSignal(inbound, expected, budgetNs, site, op);
  }
  /// wait() with the handle's default budget.
  WEFT_HOST_DEVICE_INLINE void wait() const { wait(defaultBudgetNs); }

  /// Signals that have arrived so far (relaxed).
  WEFT_HOST_DEVICE_INLINE uint64_t received() const { return atomicLoad<MemoryOrder::kRelaxed>(inbound); }
};
static_assert(std::is_trivially_copyable_v<Host2DeviceSemaphoreDeviceHandle>);

}  // namespace weft
