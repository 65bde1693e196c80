// Kernels of device_atomics_test (see device_atomics_kernels.hpp for why they sit apart from the test).
#include "device_atomics_kernels.hpp"

#include <weft/gpu.hpp>

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)

namespace weft::test {
namespace {

WEFT_GLOBAL void countingKernel(uint64_t* counter, uint32_t* seen, int iters) { countingRole(counter, seen, iters); }

// Block 0 writes, block 1 reads; one thread each. Two blocks are always co-resident on one GPU, so
// neither waits for a block that cannot be scheduled.
WEFT_GLOBAL void messagePassingKernel(Mailbox* box, int rounds, uint64_t budgetNs) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) {
    writerRole(box, rounds, budgetNs);
  } else {
    readerRole(box, rounds, budgetNs);
  }
}

WEFT_GLOBAL void stuckWaitKernel(StuckWait* w, uint64_t budgetNs) { stuckWaitRole(w, budgetNs); }

void finishKernel(const char* what) {
  checkGpu(hipGetLastError(), what);
  checkGpu(hipDeviceSynchronize(), what);
}

}  // namespace

void launchCountingKernel(uint64_t* counter, uint32_t* seen, int iters, int blocks, int threadsPerBlock) {
  countingKernel<<<blocks, threadsPerBlock>>>(counter, seen, iters);
  finishKernel("countingKernel");
}

void launchMessagePassingKernel(Mailbox* box, int rounds, uint64_t budgetNs) {
  messagePassingKernel<<<2, 32>>>(box, rounds, budgetNs);
  finishKernel("messagePassingKernel");
}

void launchStuckWaitKernel(StuckWait* w, uint64_t budgetNs) {
  stuckWaitKernel<<<1, 1>>>(w, budgetNs);
  finishKernel("stuckWaitKernel");
}

}  // namespace weft::test

#endif
