// Kernels of memory_semaphore_test (see memory_semaphore_kernels.hpp).
#include "memory_semaphore_kernels.hpp"

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)

namespace weft::test {
namespace {

WEFT_GLOBAL void semaphorePingPongKernel(MemoryDevice2DeviceSemaphoreDeviceHandle sem, int rank, int rounds,
                                         int waiters) {
  if (threadIdx.x == 0) {
    for (int r = 0; r < rounds; ++r) {
      if (rank == 0) {
        sem.signal();
        sem.wait();
      } else {
        sem.wait();
        sem.signal();
      }
    }
  }
  // Many waiters on one counter, each with its own target; the final count is already there.
  if (static_cast<int>(threadIdx.x) < waiters) sem.waitFor(static_cast<uint64_t>(rounds));
}

WEFT_GLOBAL void stuckSemaphoreKernel(MemoryDevice2DeviceSemaphoreDeviceHandle sem) { sem.wait(); }

}  // namespace

void launchSemaphorePingPong(const MemoryDevice2DeviceSemaphoreDeviceHandle& sem, int rank, int rounds, int waiters,
                             hipStream_t stream) {
  const int threads = waiters < 1 ? 1 : waiters;
  semaphorePingPongKernel<<<1, threads, 0, stream>>>(sem, rank, rounds, waiters);
  checkGpu(hipGetLastError(), "launching semaphorePingPongKernel");
}

hipError_t runStuckSemaphoreWait(const MemoryDevice2DeviceSemaphoreDeviceHandle& sem, hipStream_t stream) {
  stuckSemaphoreKernel<<<1, 1, 0, stream>>>(sem);
  hipError_t e = hipGetLastError();
  return e != hipSuccess ? e : hipStreamSynchronize(stream);
}

}  // namespace weft::test

#endif
