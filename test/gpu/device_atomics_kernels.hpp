// Protocols of device_atomics_test, written once for kernels and host threads, and the kernel launchers.
//
// GoogleTest stays out of the GPU translation unit: clang 15's HIP mode crashes (a segfault in
// Sema::checkTypeSupport) on a struct holding std::pair<const std::string, T> in C++20, which
// GoogleTest's headers contain. So the kernels live in device_atomics_kernels.cu and the test in a
// plain C++ file that calls the launchers below.
#pragma once

#include <cstdint>
#include <weft/device.hpp>

namespace weft::test {

inline constexpr uint64_t kMillisecond = 1'000'000;

/// Adds 1 to *counter `iters` times; each previous value it gets back is tallied in seen[previous],
/// so a lost or duplicated update shows up as a slot that is not exactly 1.
WEFT_HOST_DEVICE_INLINE void countingRole(uint64_t* counter, uint32_t* seen, int iters) {
  for (int i = 0; i < iters; ++i) {
    uint64_t previous = atomicFetchAdd<MemoryOrder::kRelaxed, Scope::kDevice>(counter, uint64_t{1});
    atomicFetchAdd<MemoryOrder::kRelaxed, Scope::kDevice>(&seen[previous], 1u);
  }
}

inline constexpr int kMessageWords = 64;

/// One mailbox: the writer fills `words` with plain stores and publishes them with a release store of
/// `ready`; the reader acquires `ready`, checks the words and hands the mailbox back through `ack`.
struct Mailbox {
  uint64_t words[kMessageWords];
  uint64_t ready;
  uint64_t ack;
  uint64_t errors;    ///< words that were not what the writer wrote
  uint64_t timeouts;  ///< waits that ran out of budget (either side)
};

/// The value the writer stores in word i of round `round`.
WEFT_HOST_DEVICE_INLINE uint64_t messageWord(int round, int i) {
  return (static_cast<uint64_t>(round) << 32) | static_cast<uint64_t>(i * 7 + 1);
}

/// Writes `rounds` messages, each after the reader acknowledged the previous one.
WEFT_HOST_DEVICE_INLINE void writerRole(Mailbox* box, int rounds, uint64_t budgetNs) {
  for (int round = 0; round < rounds; ++round) {
    const uint64_t want = static_cast<uint64_t>(round);
    if (!spinWaitUntil([&] { return atomicLoad<MemoryOrder::kAcquire, Scope::kDevice>(&box->ack) == want; },
                       WaitBudget{budgetNs})) {
      atomicFetchAdd<MemoryOrder::kRelaxed, Scope::kDevice>(&box->timeouts, uint64_t{1});
      return;
    }
    for (int i = 0; i < kMessageWords; ++i) box->words[i] = messageWord(round, i);
    atomicStore<MemoryOrder::kRelease, Scope::kDevice>(&box->ready, want + 1);
  }
}

/// Reads `rounds` messages, counting every word that is not what the writer wrote.
WEFT_HOST_DEVICE_INLINE void readerRole(Mailbox* box, int rounds, uint64_t budgetNs) {
  for (int round = 0; round < rounds; ++round) {
    const uint64_t want = static_cast<uint64_t>(round) + 1;
    if (!spinWaitUntil([&] { return atomicLoad<MemoryOrder::kAcquire, Scope::kDevice>(&box->ready) == want; },
                       WaitBudget{budgetNs})) {
      atomicFetchAdd<MemoryOrder::kRelaxed, Scope::kDevice>(&box->timeouts, uint64_t{1});
      return;
    }
    uint64_t bad = 0;
    for (int i = 0; i < kMessageWords; ++i) bad += box->words[i] != messageWord(round, i) ? 1 : 0;
    if (bad != 0) atomicFetchAdd<MemoryOrder::kRelaxed, Scope::kDevice>(&box->errors, bad);
    atomicStore<MemoryOrder::kRelease, Scope::kDevice>(&box->ack, want);
  }
}

/// What a wait on a flag reports.
struct StuckWait {
  uint64_t flag;
  uint64_t returned;   ///< 1 when spinWaitUntil said the flag was set
  uint64_t elapsedNs;  ///< on the waiting side's clock
};

/// Waits up to `budgetNs` for w->flag to become non-zero and records the outcome.
WEFT_HOST_DEVICE_INLINE void stuckWaitRole(StuckWait* w, uint64_t budgetNs) {
  const uint64_t start = clockNanoseconds();
  bool done = spinWaitUntil([&] { return atomicLoad<MemoryOrder::kAcquire, Scope::kSystem>(&w->flag) != 0; },
                            WaitBudget{budgetNs});
  w->elapsedNs = clockNanoseconds() - start;
  w->returned = done ? 1 : 0;
}

// Kernel launchers (GPU builds only): each runs its kernel to completion on the current device and
// throws weft::Error (kGpuError) when the launch or the kernel fails. Pointers are device memory.

/// countingRole in blocks x threadsPerBlock GPU threads.
void launchCountingKernel(uint64_t* counter, uint32_t* seen, int iters, int blocks, int threadsPerBlock);
/// writerRole in block 0 and readerRole in block 1, one thread each.
void launchMessagePassingKernel(Mailbox* box, int rounds, uint64_t budgetNs);
/// stuckWaitRole in one GPU thread.
void launchStuckWaitKernel(StuckWait* w, uint64_t budgetNs);

}  // namespace weft::test
