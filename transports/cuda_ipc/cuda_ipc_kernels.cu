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

}  // namespace

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

}  // namespace weft::cuda_ipc
