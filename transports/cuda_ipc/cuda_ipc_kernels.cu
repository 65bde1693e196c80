// The signal of the cuda_ipc transport: a one-thread kernel that adds to a 64-bit word in (possibly a peer's) GPU
// memory. Enqueued on the connection's stream behind the data copies, so it runs only after they have completed;
// the system-scope fence and atomic make the add itself visible to the peer's GPU threads and to the host.
// Why a kernel: the stream memory operations (cuStreamWriteValue64) can store but not add, and several connections
// may signal one counter, which needs an atomic read-modify-write.
#include "ipc_runtime.hpp"

namespace weft::cuda_ipc {
namespace {

__global__ void signalAddKernel(unsigned long long* word, unsigned long long value) {
  __threadfence_system();
#if WEFT_CUDA_IPC_HIP
  __hip_atomic_fetch_add(word, value, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  atomicAdd_system(word, value);
#endif
}

constexpr unsigned kCopyThreads = 512;

// One block copies (16 bytes at a time where dst and src share their alignment), then thread 0 adds.
__global__ void copyAndSignalAddKernel(uint8_t* dst, const uint8_t* src, unsigned long long bytes,
                                       unsigned long long* word, unsigned long long value) {
  const unsigned tid = threadIdx.x;
  const unsigned long long misalign = reinterpret_cast<uintptr_t>(dst) & 15u;
  if (misalign == (reinterpret_cast<uintptr_t>(src) & 15u)) {
    unsigned long long head = misalign == 0 ? 0 : 16 - misalign;
    if (head > bytes) head = bytes;
    const unsigned long long units = (bytes - head) / 16;
    for (unsigned long long i = tid; i < head; i += kCopyThreads) dst[i] = src[i];
    auto* d16 = reinterpret_cast<uint4*>(dst + head);
    const auto* s16 = reinterpret_cast<const uint4*>(src + head);
    for (unsigned long long i = tid; i < units; i += kCopyThreads) d16[i] = s16[i];
    for (unsigned long long i = head + units * 16 + tid; i < bytes; i += kCopyThreads) dst[i] = src[i];
  } else {
    for (unsigned long long i = tid; i < bytes; i += kCopyThreads) dst[i] = src[i];
  }
  __syncthreads();
  if (tid == 0) {
    __threadfence_system();
#if WEFT_CUDA_IPC_HIP
    __hip_atomic_fetch_add(word, value, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
    atomicAdd_system(word, value);
#endif
  }
}

}  // namespace

rt::Error rt::launchCopyAndSignalAdd(uint8_t* dst, const uint8_t* src, uint64_t bytes, uint64_t* word, uint64_t value,
                                     Stream stream) {
  if (bytes == 0) return launchSignalAdd(word, value, stream);
  auto* target = reinterpret_cast<unsigned long long*>(word);
  auto add = static_cast<unsigned long long>(value);
  auto count = static_cast<unsigned long long>(bytes);
  void* args[] = {&dst, &src, &count, &target, &add};
#if WEFT_CUDA_IPC_HIP
  return hipLaunchKernel(reinterpret_cast<const void*>(&copyAndSignalAddKernel), dim3(1), dim3(kCopyThreads), args, 0,
                         stream);
#else
  return cudaLaunchKernel(reinterpret_cast<const void*>(&copyAndSignalAddKernel), dim3(1), dim3(kCopyThreads), args, 0,
                          stream);
#endif
}

rt::Error rt::launchSignalAdd(uint64_t* word, uint64_t value, Stream stream) {
  auto* target = reinterpret_cast<unsigned long long*>(word);
  auto add = static_cast<unsigned long long>(value);
  void* args[] = {&target, &add};
  // The launch API returns this launch's error only; <<<>>> would need cudaGetLastError, which also reports
  // (and clears) errors the application left behind.
#if WEFT_CUDA_IPC_HIP
  return hipLaunchKernel(reinterpret_cast<const void*>(&signalAddKernel), dim3(1), dim3(1), args, 0, stream);
#else
  return cudaLaunchKernel(reinterpret_cast<const void*>(&signalAddKernel), dim3(1), dim3(1), args, 0, stream);
#endif
}

rt::Error rt::loadSignalKernel() {
#if WEFT_CUDA_IPC_HIP
  hipFuncAttributes attributes{};
  hipError_t e = hipFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&signalAddKernel));
  if (e != hipSuccess) return e;
  return hipFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&copyAndSignalAddKernel));
#else
  cudaFuncAttributes attributes{};
  cudaError_t e = cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&signalAddKernel));
  if (e != cudaSuccess) return e;
  return cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&copyAndSignalAddKernel));
#endif
}

}  // namespace weft::cuda_ipc
