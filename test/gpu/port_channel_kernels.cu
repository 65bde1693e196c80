// Kernels of the GPU PortChannel test (declared in fifo_kernels.hpp).
#include <weft/error.hpp>
#include <weft/gpu.hpp>

#include "fifo_kernels.hpp"

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)

namespace weft::test {
namespace {

WEFT_GLOBAL void portSenderKernel(PortChannelDeviceHandle ch, uint64_t bytes, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    ch.putWithSignal(static_cast<uint64_t>(r) * bytes, bytes);
    ch.flush();
  }
  ch.wait();
}

WEFT_GLOBAL void portReceiverKernel(PortChannelDeviceHandle ch, int rounds) {
  for (int r = 0; r < rounds; ++r) ch.wait();
  ch.signal();
  ch.flush();
}

WEFT_GLOBAL void portWaitKernel(PortChannelDeviceHandle ch, uint64_t budgetNs) { ch.wait(budgetNs); }

}  // namespace

void finishGpuKernels(const char* what) { checkGpu(hipDeviceSynchronize(), what); }

void launchPortSender(PortChannelDeviceHandle channel, uint64_t bytes, int rounds) {
  portSenderKernel<<<1, 1>>>(channel, bytes, rounds);
  checkGpu(hipGetLastError(), "launching portSenderKernel");
}

void launchPortReceiver(PortChannelDeviceHandle channel, int rounds) {
  portReceiverKernel<<<1, 1>>>(channel, rounds);
  checkGpu(hipGetLastError(), "launching portReceiverKernel");
}

void launchPortWait(PortChannelDeviceHandle channel, uint64_t budgetNs) {
  portWaitKernel<<<1, 1>>>(channel, budgetNs);
  checkGpu(hipGetLastError(), "launching portWaitKernel");
}

}  // namespace weft::test

#else  // WEFT_GPU=none: the tests skip before calling these.

namespace weft::test {

void finishGpuKernels(const char*) {
  throw Error(ErrorCode::kNotSupported, "a WEFT_GPU=none build launches no kernels");
}
void launchPortSender(PortChannelDeviceHandle, uint64_t, int) {
  throw Error(ErrorCode::kNotSupported, "a WEFT_GPU=none build launches no kernels");
}
void launchPortReceiver(PortChannelDeviceHandle, int) {
  throw Error(ErrorCode::kNotSupported, "a WEFT_GPU=none build launches no kernels");
}
void launchPortWait(PortChannelDeviceHandle, uint64_t) {
  throw Error(ErrorCode::kNotSupported, "a WEFT_GPU=none build launches no kernels");
}

}  // namespace weft::test

#endif
