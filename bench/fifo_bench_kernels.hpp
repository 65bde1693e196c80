// Kernels of the FIFO benchmark (fifo_bench_kernels.cu), built into weft-bench when WEFT_FIFO_BENCH_GPU is defined.
#pragma once

#include <cstdint>
#include <weft/fifo_device.hpp>

namespace weft::bench {

/// Results of one producer loop, written by the producer (GPU clock or host clock).
struct FifoBenchTimes {
  uint64_t roundTripNs;  ///< total over the round trips
  uint64_t rateNs;       ///< total over the rate loop
  uint64_t rawRoundTripNs;
  uint64_t rawRateNs;
};

/// The raw floor's shared words: the producer bumps `flag`, the host echoes it into `ack`; `slots` is a ring of
/// `slotCount` 16-byte entries written without protocol.
struct RawRing {
  uint64_t* flag;
  const uint64_t* ack;
  FifoTrigger* slots;
  uint32_t slotCount;
};

/// The producer side of all four measurements, for a host thread or a GPU thread.
WEFT_HOST_DEVICE_INLINE void fifoBenchProducer(FifoDeviceHandle fifo, RawRing raw, int roundTrips, int rateTriggers,
                                               FifoBenchTimes* out) {
  uint64_t t0 = clockNanoseconds();
  for (int i = 0; i < roundTrips; ++i) fifo.sync(fifo.push(FifoTrigger{static_cast<uint64_t>(i), 1}));
  uint64_t t1 = clockNanoseconds();
  uint64_t last = 0;
  for (int i = 0; i < rateTriggers; ++i) {
    last = fifo.push(FifoTrigger{static_cast<uint64_t>(i), 2});
    if ((i + 1) % fifo.size == 0) fifo.sync(last);
  }
  fifo.sync(last);
  uint64_t t2 = clockNanoseconds();
  for (int i = 1; i <= roundTrips; ++i) {
    atomicStore<MemoryOrder::kRelease>(raw.flag, static_cast<uint64_t>(i));
    while (atomicLoad<MemoryOrder::kAcquire>(raw.ack) < static_cast<uint64_t>(i)) {
    }
  }
  uint64_t t3 = clockNanoseconds();
  for (int i = 0; i < rateTriggers; ++i) {
    FifoTrigger* s = raw.slots + (static_cast<uint32_t>(i) % raw.slotCount);
    atomicStore<MemoryOrder::kRelaxed>(&s->word0, static_cast<uint64_t>(i));
    atomicStore<MemoryOrder::kRelease>(&s->word1, uint64_t{3});
  }
  uint64_t t4 = clockNanoseconds();
  out->roundTripNs = t1 - t0;
  out->rateNs = t2 - t1;
  out->rawRoundTripNs = t3 - t2;
  out->rawRateNs = t4 - t3;
}

/// Runs fifoBenchProducer in one GPU thread to completion; `out` must be host-visible (mapped) memory.
void runFifoBenchProducerOnGpu(FifoDeviceHandle fifo, RawRing raw, int roundTrips, int rateTriggers,
                               FifoBenchTimes* out);

}  // namespace weft::bench
