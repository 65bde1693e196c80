// Kernels of the GPU FIFO test (see fifo_kernels.hpp).
#include <weft/error.hpp>
#include <weft/gpu.hpp>

#include "fifo_kernels.hpp"

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)

namespace weft::test {
namespace {

WEFT_GLOBAL void fifoProducersKernel(FifoDeviceHandle fifo, int perThread) {
  const uint32_t thread = blockIdx.x * blockDim.x + threadIdx.x;
  for (int i = 0; i < perThread; ++i) fifo.push(gpuTestTrigger(thread, static_cast<uint32_t>(i)));
}

WEFT_GLOBAL void fifoPushAndSyncKernel(FifoDeviceHandle fifo, int count, int syncEvery) {
  for (int i = 0; i < count; ++i) {
    const uint64_t p = fifo.push(gpuTestTrigger(0, static_cast<uint32_t>(i)));
    if ((i + 1) % syncEvery == 0 || i + 1 == count) fifo.sync(p);
  }
}

}  // namespace

void launchFifoProducers(FifoDeviceHandle fifo, int blocks, int threadsPerBlock, int perThread) {
  fifoProducersKernel<<<blocks, threadsPerBlock>>>(fifo, perThread);
  checkGpu(hipGetLastError(), "launching fifoProducersKernel");
}

void launchFifoPushAndSync(FifoDeviceHandle fifo, int count, int syncEvery) {
  fifoPushAndSyncKernel<<<1, 1>>>(fifo, count, syncEvery);
  checkGpu(hipGetLastError(), "launching fifoPushAndSyncKernel");
}

void finishGpuKernels(const char* what) { checkGpu(hipDeviceSynchronize(), what); }

}  // namespace weft::test

#else  // WEFT_GPU=none: the tests skip before calling these.

namespace weft::test {

void launchFifoProducers(FifoDeviceHandle, int, int, int) {
  throw Error(ErrorCode::kNotSupported, "a WEFT_GPU=none build launches no kernels");
}
void launchFifoPushAndSync(FifoDeviceHandle, int, int) {
  throw Error(ErrorCode::kNotSupported, "a WEFT_GPU=none build launches no kernels");
}
void finishGpuKernels(const char*) {
  throw Error(ErrorCode::kNotSupported, "a WEFT_GPU=none build launches no kernels");
}

}  // namespace weft::test

#endif
