// Kernels of memory_semaphore_test: MemoryDevice2DeviceSemaphore signalled and waited on by GPU threads.
// GoogleTest stays out of the GPU translation unit (see device_atomics_kernels.hpp).
#pragma once

#include <cstdint>
#include <weft/gpu.hpp>
#include <weft/memory_semaphore_device.hpp>

namespace weft::test {

/// Semaphore ping-pong in one thread: rank 0 signals then waits, rank 1 waits then signals, `rounds` times;
/// then `waiters` threads of the block each waitFor() the final count. Launched on `stream`, not waited for.
void launchSemaphorePingPong(const MemoryDevice2DeviceSemaphoreDeviceHandle& sem, int rank, int rounds, int waiters,
                             hipStream_t stream);

/// One thread waits once on `sem` (nobody signals it: the budget runs out and the kernel traps). Returns the
/// error hipStreamSynchronize gave (hipSuccess would mean the wait returned).
hipError_t runStuckSemaphoreWait(const MemoryDevice2DeviceSemaphoreDeviceHandle& sem, hipStream_t stream);

}  // namespace weft::test
