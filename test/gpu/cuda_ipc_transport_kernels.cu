// GPU helpers of cuda_ipc_transport_test (see cuda_ipc_transport_kernels.hpp).
#include "cuda_ipc_transport_kernels.hpp"

#include <string>
#include <weft/error.hpp>
#include <weft/gpu.hpp>

#if defined(WEFT_COMPILER_CUDA)
#include <cuda.h>
#endif

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)

namespace weft::test {
namespace {

__global__ void fillPatternKernel(uint8_t* dst, uint64_t bytes, uint32_t seed) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes; i += stride) {
    dst[i] = ipcPatternByte(seed, i);
  }
}

#if defined(WEFT_COMPILER_CUDA)

// The driver's virtual-memory calls, resolved through the runtime like the plugin does (no libcuda link).
template <class Fn>
Fn driverCall(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess || fn == nullptr) {
    throw Error(ErrorCode::kGpuError, std::string("the CUDA driver offers no ") + symbol);
  }
  return reinterpret_cast<Fn>(fn);
}

void checkDriver(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS)
    throw Error(ErrorCode::kGpuError, std::string(what) + " failed: CUresult " + std::to_string(r));
}

#endif

}  // namespace

void launchIpcFillPattern(uint8_t* dst, uint64_t bytes, uint32_t seed) {
  if (bytes == 0) return;
  uint64_t blocks = (bytes + 255) / 256;
  if (blocks > 1024) blocks = 1024;
  fillPatternKernel<<<static_cast<unsigned>(blocks), 256>>>(dst, bytes, seed);
  checkGpu(hipGetLastError(), "launching fillPatternKernel");
  checkGpu(hipDeviceSynchronize(), "fillPatternKernel");
}

#if defined(WEFT_COMPILER_CUDA)

void* allocPosixFdMemory(uint64_t bytes, uint64_t* allocated) {
  int device = 0;
  checkGpu(cudaGetDevice(&device), "cudaGetDevice");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  checkDriver(driverCall<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity")(
                  &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              "cuMemGetAllocationGranularity");
  const uint64_t size = (bytes + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle{};
  checkDriver(driverCall<decltype(&cuMemCreate)>("cuMemCreate")(&handle, size, &prop, 0), "cuMemCreate");
  CUdeviceptr va = 0;
  checkDriver(driverCall<decltype(&cuMemAddressReserve)>("cuMemAddressReserve")(&va, size, granularity, 0, 0),
              "cuMemAddressReserve");
  checkDriver(driverCall<decltype(&cuMemMap)>("cuMemMap")(va, size, 0, handle, 0), "cuMemMap");
  // The mapping keeps the memory; dropping our handle now means unmapping frees it.
  checkDriver(driverCall<decltype(&cuMemRelease)>("cuMemRelease")(handle), "cuMemRelease");
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  checkDriver(driverCall<decltype(&cuMemSetAccess)>("cuMemSetAccess")(va, size, &access, 1), "cuMemSetAccess");
  void* ptr = reinterpret_cast<void*>(va);
  checkGpu(cudaMemset(ptr, 0, size), "cudaMemset of the cuMem allocation");
  checkGpu(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  *allocated = size;
  return ptr;
}

void freePosixFdMemory(void* ptr, uint64_t allocated) {
  const auto va = reinterpret_cast<CUdeviceptr>(ptr);
  (void)driverCall<decltype(&cuMemUnmap)>("cuMemUnmap")(va, allocated);
  (void)driverCall<decltype(&cuMemAddressFree)>("cuMemAddressFree")(va, allocated);
}

#else  // HIP

void* allocPosixFdMemory(uint64_t bytes, uint64_t* allocated) {
  int device = 0;
  checkGpu(hipGetDevice(&device), "hipGetDevice");
  hipMemAllocationProp prop{};
  prop.type = hipMemAllocationTypePinned;
  prop.location.type = hipMemLocationTypeDevice;
  prop.location.id = device;
  prop.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
  size_t granularity = 0;
  checkGpu(hipMemGetAllocationGranularity(&granularity, &prop, hipMemAllocationGranularityMinimum),
           "hipMemGetAllocationGranularity");
  const uint64_t size = (bytes + granularity - 1) / granularity * granularity;
  hipMemGenericAllocationHandle_t handle{};
  checkGpu(hipMemCreate(&handle, size, &prop, 0), "hipMemCreate");
  void* ptr = nullptr;
  checkGpu(hipMemAddressReserve(&ptr, size, granularity, nullptr, 0), "hipMemAddressReserve");
  checkGpu(hipMemMap(ptr, size, 0, handle, 0), "hipMemMap");
  checkGpu(hipMemRelease(handle), "hipMemRelease");
  hipMemAccessDesc access{};
  access.location = prop.location;
  access.flags = hipMemAccessFlagsProtReadWrite;
  checkGpu(hipMemSetAccess(ptr, size, &access, 1), "hipMemSetAccess");
  checkGpu(hipMemset(ptr, 0, size), "hipMemset of the hipMem allocation");
  checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
  checkGpu(hipDeviceSynchronize(), "hipDeviceSynchronize");
  *allocated = size;
  return ptr;
}

void freePosixFdMemory(void* ptr, uint64_t allocated) {
  (void)hipMemUnmap(ptr, allocated);
  (void)hipMemAddressFree(ptr, allocated);
}

#endif

}  // namespace weft::test

#endif
