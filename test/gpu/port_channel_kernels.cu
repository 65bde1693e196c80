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

// Thread 0 drives the channel; every thread fills and checks its share of the data between block barriers.
WEFT_GLOBAL void portExerciseKernel(PortChannelDeviceHandle ch, uint8_t* data, uint64_t bytes, int role, int rounds,
                                    PortCheck* check) {
  const uint32_t tid = threadIdx.x;
  const uint32_t n = blockDim.x;
  const int peerRole = 1 - role;
  auto* counter = reinterpret_cast<uint64_t*>(data + portCounterOffset(bytes));
  auto countWrong = [&](uint64_t slice, int round, uint64_t* into) {
    uint64_t wrong = 0;
    for (uint64_t i = tid; i < bytes; i += n) wrong += data[slice * bytes + i] != portPattern(peerRole, round, i);
    if (wrong != 0) atomicFetchAdd<MemoryOrder::kRelaxed>(into, wrong);
  };
  uint64_t expectedCounter = 0;
  for (int r = 0; r < rounds; ++r) {
    for (uint64_t i = tid; i < bytes; i += n) data[i] = portPattern(role, r, i);
    fence<MemoryOrder::kRelease, Scope::kSystem>();
    __syncthreads();
    if (tid == 0) {
      ch.put(bytes, 0, bytes);
      ch.signal();
      ch.wait();
    }
    __syncthreads();
    countWrong(1, r, &check->putWrong);
    __syncthreads();
    if (tid == 0) {
      ch.putWithSignal(2 * bytes, 0, bytes);
      ch.wait();
    }
    __syncthreads();
    countWrong(2, r, &check->putWithSignalWrong);
    __syncthreads();
    if (tid == 0) {
      ch.putWithSignalAndFlush(3 * bytes, 0, bytes);
      ch.wait();
    }
    __syncthreads();
    countWrong(3, r, &check->putSignalFlushWrong);
    __syncthreads();
    if (tid == 0) {
      ch.atomicAdd(portCounterOffset(bytes), static_cast<uint64_t>(r + 1));
      ch.signal();
      ch.wait();
      expectedCounter += static_cast<uint64_t>(r + 1);
      if (atomicLoad<MemoryOrder::kAcquire, Scope::kSystem>(counter) != expectedCounter) check->counterWrong += 1;
      ch.flush();  // every put of this round has read its source: the next round may overwrite it
      check->rounds += 1;
    }
    __syncthreads();
  }
  if (tid == 0) check->pollAfterAll = ch.poll() ? 1 : 0;
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

void launchPortExercise(PortChannelDeviceHandle channel, uint8_t* data, uint64_t bytes, int role, int rounds,
                        int threads, PortCheck* check, hipStream_t stream) {
  portExerciseKernel<<<1, threads, 0, stream>>>(channel, data, bytes, role, rounds, check);
  checkGpu(hipGetLastError(), "launching portExerciseKernel");
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
void launchPortExercise(PortChannelDeviceHandle, uint8_t*, uint64_t, int, int, int, PortCheck*, hipStream_t) {
  throw Error(ErrorCode::kNotSupported, "a WEFT_GPU=none build launches no kernels");
}
void launchPortWait(PortChannelDeviceHandle, uint64_t) {
  throw Error(ErrorCode::kNotSupported, "a WEFT_GPU=none build launches no kernels");
}

}  // namespace weft::test

#endif
