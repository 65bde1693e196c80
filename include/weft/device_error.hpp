/// What a wait that ran out of budget leaves behind: a record in host-visible memory naming the waiter, and
/// the call that stops the waiting kernel (or, on the host, throws).
///
/// Device code: a wait that runs out calls reportWaitTimeout(), which fills the record (the first report
/// wins) and then stops the kernel with a trap. The host API that launched or synchronized the kernel then
/// sees the failed launch, reads the record (DeviceErrorBlock::check) and throws Error(kTimeout) carrying it.
/// A trap leaves the CUDA/HIP context unusable, so the process must end after such an error; that is the price
/// of never hanging. Host code running the same protocol throws at once instead.
#pragma once

#include <cstdint>
#include <weft/device.hpp>
#include <weft/platform.hpp>
#if !defined(WEFT_DEVICE_COMPILE)
#include <string>
#endif

namespace weft {

/// The operation that was waiting.
enum class WaitOp : uint32_t {
  kNone = 0,
  kSemaphoreWait = 1,  ///< a semaphore's wait for a signal
  kFifoPush = 2,       ///< a FIFO push waiting for a free slot (the proxy stopped popping)
  kFifoSync = 3,       ///< a FIFO sync/flush waiting for the proxy to catch up
  kPacketRead = 4,     ///< an LL packet read waiting for its flag
  kChannelWait = 5,    ///< a channel's wait for a peer signal
  kBarrier = 6,        ///< a device-wide or cross-rank barrier
};

/// Short name of a WaitOp, e.g. "semaphore wait".
WEFT_HOST_DEVICE_INLINE const char* waitOpName(WaitOp op) {
  switch (op) {
    case WaitOp::kSemaphoreWait: return "semaphore wait";
    case WaitOp::kFifoPush: return "fifo push";
    case WaitOp::kFifoSync: return "fifo sync";
    case WaitOp::kPacketRead: return "packet read";
    case WaitOp::kChannelWait: return "channel wait";
    case WaitOp::kBarrier: return "barrier";
    default: return "wait";
  }
}

/// The record of the first wait that ran out of budget. Lives in host-visible memory (mapped pinned memory on
/// a GPU build); `state` is 0 while empty, 1 while being written, 2 once complete. GPU reporters take the record by
/// a compare-and-swap on `claim`, which is in device memory on a GPU build: read-modify-writes on mapped host memory
/// are not atomic over PCIe (compute-sanitizer refuses them), plain loads and stores are. Host reporters
/// compare-and-swap `state` itself.
struct DeviceErrorRecord {
  uint32_t state;
  uint32_t op;  ///< a WaitOp
  int32_t rank;
  int32_t peer;     ///< -1 when the wait is not on a peer (e.g. the FIFO)
  int32_t channel;  ///< channel or semaphore index, -1 when none
  uint32_t reserved;
  uint64_t expected;  ///< the value waited for
  uint64_t observed;  ///< the value last seen
  uint64_t budgetNs;  ///< the budget that ran out
  uint32_t* claim;    ///< 0 until a reporter takes the record; nullptr: claim through `state` (host memory only)
};
static_assert(sizeof(DeviceErrorRecord) == 56);

/// Who is waiting: carried by device handles so a timeout can say which wait it was.
struct WaitSite {
  DeviceErrorRecord* record;  ///< nullptr: no record (a host-only wait still throws with the same text)
  int32_t rank;
  int32_t peer;
  int32_t channel;
};

namespace detail {
#if !defined(WEFT_DEVICE_COMPILE)
/// Throws Error(kTimeout) describing a record (host side).
[[noreturn]] void throwWaitTimeout(const DeviceErrorRecord& record);
#endif
}  // namespace detail

/// Records a wait that ran out (the first report wins; later ones only stop their own thread) and stops:
/// in device code with a trap, which ends the kernel; in host code by throwing Error(kTimeout).
WEFT_HOST_DEVICE_NOINLINE void reportWaitTimeout(const WaitSite& site, WaitOp op, uint64_t expected, uint64_t observed,
                                                 uint64_t budgetNs) {
  DeviceErrorRecord local{
      2, static_cast<uint32_t>(op), site.rank, site.peer, site.channel, 0, expected, observed, budgetNs, nullptr};
  if (site.record != nullptr) {
    uint32_t empty = 0;
#if defined(WEFT_DEVICE_COMPILE)
    // GPU threads claim through the device-memory word; a host reporter (which cannot touch device memory) may
    // have taken `state` already, which the plain load below sees in all but a vanishing window.
    uint32_t* claim = site.record->claim != nullptr ? site.record->claim : &site.record->state;
    const bool won = atomicCompareExchange<MemoryOrder::kAcqRel>(claim, empty, 1u) &&
                     (claim == &site.record->state || atomicLoad<MemoryOrder::kAcquire>(&site.record->state) == 0u);
#else
    const bool won = atomicCompareExchange<MemoryOrder::kAcqRel>(&site.record->state, empty, 1u);
#endif
    if (won) {
      atomicStore<MemoryOrder::kRelaxed>(&site.record->state, 1u);
      site.record->op = local.op;
      site.record->rank = local.rank;
      site.record->peer = local.peer;
      site.record->channel = local.channel;
      site.record->expected = local.expected;
      site.record->observed = local.observed;
      site.record->budgetNs = local.budgetNs;
      atomicStore<MemoryOrder::kRelease>(&site.record->state, 2u);
    }
#if defined(WEFT_DEVICE_COMPILE)
    // A trap ends every thread of the context at once, stores still in flight included: the writer pushes its
    // record out to host memory first, and a thread that lost the race waits (a bounded while) for the writer to
    // finish, else its trap could end the kernel with the record half written or never seen by the host.
    fence<MemoryOrder::kSeqCst, Scope::kSystem>();
    const uint64_t start = clockNanoseconds();
    while (atomicLoad<MemoryOrder::kAcquire>(&site.record->state) != 2u && clockNanoseconds() - start < 10000000u) {
    }
#endif
  }
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
  __trap();
#elif defined(WEFT_DEVICE_COMPILE)
  __builtin_trap();
#else
  detail::throwWaitTimeout(local);
#endif
}

/// Spins until `*word >= target` (loads with `Order` at scope `S`) or `budgetNs` runs out; `seen` ends as the
/// last value loaded. True when the target was reached. The one spin every counter wait below is built on.
template <MemoryOrder Order = MemoryOrder::kAcquire, Scope S = Scope::kSystem, class T>
WEFT_HOST_DEVICE_INLINE bool spinUntilAtLeast(const T* word, T target, uint64_t budgetNs, T& seen) {
  seen = atomicLoad<Order, S>(word);
  if (seen >= target) return true;
  return spinWaitUntil(
      [&] {
        seen = atomicLoad<Order, S>(word);
        return seen >= target;
      },
      WaitBudget{budgetNs});
}

/// Spins until `*word >= target` (acquire loads unless `Order` is kRelaxed, at scope `S`) or `budgetNs` runs out;
/// then reports the timeout. Returns the value seen.
template <MemoryOrder Order = MemoryOrder::kAcquire, Scope S = Scope::kSystem, class T>
WEFT_HOST_DEVICE_INLINE T waitAtLeast(const T* word, T target, uint64_t budgetNs, const WaitSite& site, WaitOp op) {
  T seen{};
  if (!spinUntilAtLeast<Order, S>(word, target, budgetNs, seen)) {
    reportWaitTimeout(site, op, static_cast<uint64_t>(target), static_cast<uint64_t>(seen), budgetNs);
  }
  return seen;
}

/// Consumes the next signal of a counter: waits until `*word >= *consumed + 1` (acquire loads unless `Order` is
/// kRelaxed, at scope `S`) and advances `*consumed`. The advance is stored before the wait, not after it: a release the
/// waiter makes next (its answer in a ping-pong) then finds the store long done, where a store made just before would
/// hold it back by a memory round trip. A timeout puts the count back before it reports, so a caught host timeout
/// leaves the signal still to be consumed.
template <MemoryOrder Order = MemoryOrder::kAcquire, Scope S = Scope::kSystem>
WEFT_HOST_DEVICE_INLINE void consumeNextSignal(const uint64_t* word, uint64_t* consumed, uint64_t budgetNs,
                                               const WaitSite& site, WaitOp op) {
  const uint64_t target = *consumed + 1;
  *consumed = target;
  uint64_t seen = 0;
  if (spinUntilAtLeast<Order, S>(word, target, budgetNs, seen)) return;
  *consumed = target - 1;
  reportWaitTimeout(site, op, target, seen, budgetNs);
}

#if !defined(WEFT_DEVICE_COMPILE)
/// Host owner of a DeviceErrorRecord in host-visible memory (mapped pinned memory when a GPU is present,
/// plain host memory otherwise).
class DeviceErrorBlock {
 public:
  DeviceErrorBlock();
  ~DeviceErrorBlock();
  DeviceErrorBlock(const DeviceErrorBlock&) = delete;
  DeviceErrorBlock& operator=(const DeviceErrorBlock&) = delete;

  /// The record as host code sees it.
  DeviceErrorRecord* hostRecord() const { return host_; }
  /// The record's address for device code (the same memory, mapped).
  DeviceErrorRecord* deviceRecord() const { return device_; }

  /// Whether a wait has recorded a timeout.
  bool hasError() const;
  /// A description of the record ("" when empty).
  std::string describe() const;
  /// Throws Error(kTimeout) carrying the record when one is set; otherwise returns.
  void check() const;
  /// Empties the record.
  void clear();

 private:
  DeviceErrorRecord* host_ = nullptr;
  DeviceErrorRecord* device_ = nullptr;
  uint32_t* claim_ = nullptr;  // device memory (GPU builds with a GPU): the word reporters compare-and-swap
  bool pinned_ = false;
};

/// Default budget of device and host waits in nanoseconds: WEFT_WAIT_TIMEOUT_MS (default 30000).
uint64_t defaultWaitBudgetNs();
#endif

}  // namespace weft
