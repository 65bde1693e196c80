/// The GPU runtime, written with hip* names.
///
/// On NVIDIA the names map onto the CUDA runtime; on AMD this is the HIP runtime itself; with no GPU
/// (WEFT_GPU=none) a small host implementation stands in: device memory is host memory, streams are
/// synchronous and one pseudo-device (the host) exists, so host code and tests run unchanged.
#pragma once

#include <weft/platform.hpp>

#if WEFT_BUILD_GPU_HIP
#include <hip/hip_runtime.h>
#elif WEFT_BUILD_GPU_CUDA
#include <cuda_runtime.h>

#include <cstddef>

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipMemcpyKind = cudaMemcpyKind;
using hipDeviceProp_t = cudaDeviceProp;
using hipIpcMemHandle_t = cudaIpcMemHandle_t;

inline constexpr hipError_t hipSuccess = cudaSuccess;
inline constexpr hipError_t hipErrorNoDevice = cudaErrorNoDevice;
inline constexpr hipError_t hipErrorInvalidValue = cudaErrorInvalidValue;
inline constexpr hipError_t hipErrorNotReady = cudaErrorNotReady;
inline constexpr hipMemcpyKind hipMemcpyHostToHost = cudaMemcpyHostToHost;
inline constexpr hipMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
inline constexpr hipMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
inline constexpr hipMemcpyKind hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
inline constexpr hipMemcpyKind hipMemcpyDefault = cudaMemcpyDefault;
inline constexpr unsigned hipStreamNonBlocking = cudaStreamNonBlocking;
inline constexpr unsigned hipHostMallocMapped = cudaHostAllocMapped;
inline constexpr unsigned hipHostMallocPortable = cudaHostAllocPortable;
inline constexpr unsigned hipHostMallocDefault = cudaHostAllocDefault;
inline constexpr unsigned hipIpcMemLazyEnablePeerAccess = cudaIpcMemLazyEnablePeerAccess;

inline const char* hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }
inline const char* hipGetErrorName(hipError_t e) { return cudaGetErrorName(e); }
inline hipError_t hipGetLastError() { return cudaGetLastError(); }
inline hipError_t hipGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline hipError_t hipGetDevice(int* d) { return cudaGetDevice(d); }
inline hipError_t hipSetDevice(int d) { return cudaSetDevice(d); }
inline hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int d) { return cudaGetDeviceProperties(p, d); }
inline hipError_t hipDeviceGetPCIBusId(char* id, int len, int d) { return cudaDeviceGetPCIBusId(id, len, d); }
inline hipError_t hipDeviceSynchronize() { return cudaDeviceSynchronize(); }
inline hipError_t hipMalloc(void** p, size_t n) { return cudaMalloc(p, n); }
template <class T>
inline hipError_t hipMalloc(T** p, size_t n) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
inline hipError_t hipFree(void* p) { return cudaFree(p); }
inline hipError_t hipHostMalloc(void** p, size_t n, unsigned flags = 0) { return cudaHostAlloc(p, n, flags); }
template <class T>
inline hipError_t hipHostMalloc(T** p, size_t n, unsigned flags = 0) {
  return cudaHostAlloc(reinterpret_cast<void**>(p), n, flags);
}
inline hipError_t hipHostFree(void* p) { return cudaFreeHost(p); }
inline hipError_t hipHostGetDevicePointer(void** d, void* h, unsigned flags) {
  return cudaHostGetDevicePointer(d, h, flags);
}
inline hipError_t hipMemcpy(void* d, const void* s, size_t n, hipMemcpyKind k) { return cudaMemcpy(d, s, n, k); }
inline hipError_t hipMemcpyAsync(void* d, const void* s, size_t n, hipMemcpyKind k, hipStream_t st = nullptr) {
  return cudaMemcpyAsync(d, s, n, k, st);
}
inline hipError_t hipMemset(void* d, int v, size_t n) { return cudaMemset(d, v, n); }
inline hipError_t hipMemsetAsync(void* d, int v, size_t n, hipStream_t st = nullptr) {
  return cudaMemsetAsync(d, v, n, st);
}
inline hipError_t hipStreamCreate(hipStream_t* s) { return cudaStreamCreate(s); }
inline hipError_t hipStreamCreateWithFlags(hipStream_t* s, unsigned f) { return cudaStreamCreateWithFlags(s, f); }
inline hipError_t hipStreamDestroy(hipStream_t s) { return cudaStreamDestroy(s); }
inline hipError_t hipStreamSynchronize(hipStream_t s) { return cudaStreamSynchronize(s); }
inline hipError_t hipStreamQuery(hipStream_t s) { return cudaStreamQuery(s); }
inline hipError_t hipEventCreate(hipEvent_t* e) { return cudaEventCreate(e); }
inline constexpr unsigned hipEventDisableTiming = cudaEventDisableTiming;
inline hipError_t hipEventCreateWithFlags(hipEvent_t* e, unsigned f) { return cudaEventCreateWithFlags(e, f); }
inline hipError_t hipEventQuery(hipEvent_t e) { return cudaEventQuery(e); }
inline hipError_t hipEventDestroy(hipEvent_t e) { return cudaEventDestroy(e); }
inline hipError_t hipEventRecord(hipEvent_t e, hipStream_t s = nullptr) { return cudaEventRecord(e, s); }
inline hipError_t hipEventSynchronize(hipEvent_t e) { return cudaEventSynchronize(e); }
inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t a, hipEvent_t b) { return cudaEventElapsedTime(ms, a, b); }
inline hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t* h, void* p) { return cudaIpcGetMemHandle(h, p); }
inline hipError_t hipIpcOpenMemHandle(void** p, hipIpcMemHandle_t h, unsigned f) {
  return cudaIpcOpenMemHandle(p, h, f);
}
inline hipError_t hipIpcCloseMemHandle(void* p) { return cudaIpcCloseMemHandle(p); }

#else  // WEFT_BUILD_GPU_NONE: the host stands in for the device.

#include <cstddef>
#include <cstdlib>
#include <cstring>

enum hipError_t {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorOutOfMemory = 2,
  hipErrorNoDevice = 100,
  hipErrorNotReady = 600
};
enum hipMemcpyKind {
  hipMemcpyHostToHost = 0,
  hipMemcpyHostToDevice = 1,
  hipMemcpyDeviceToHost = 2,
  hipMemcpyDeviceToDevice = 3,
  hipMemcpyDefault = 4
};
struct weftHostStream;
using hipStream_t = weftHostStream*;
struct weftHostEvent;
using hipEvent_t = weftHostEvent*;
inline constexpr unsigned hipStreamNonBlocking = 1;
inline constexpr unsigned hipHostMallocDefault = 0;
inline constexpr unsigned hipHostMallocPortable = 1;
inline constexpr unsigned hipHostMallocMapped = 2;

/// Alignment of host "device" allocations, matching what GPU allocators guarantee.
inline constexpr size_t kWeftHostDeviceAlignment = 256;

inline const char* hipGetErrorString(hipError_t e) {
  switch (e) {
    case hipSuccess: return "no error";
    case hipErrorInvalidValue: return "invalid argument";
    case hipErrorOutOfMemory: return "out of memory";
    case hipErrorNoDevice: return "no GPU device (built with WEFT_GPU=none)";
    case hipErrorNotReady: return "not ready";
  }
  return "unknown error";
}
inline const char* hipGetErrorName(hipError_t e) { return hipGetErrorString(e); }
inline hipError_t hipGetLastError() { return hipSuccess; }
inline hipError_t hipGetDeviceCount(int* n) {
  if (n == nullptr) return hipErrorInvalidValue;
  *n = 1;
  return hipSuccess;
}
inline hipError_t hipGetDevice(int* d) {
  if (d == nullptr) return hipErrorInvalidValue;
  *d = 0;
  return hipSuccess;
}
inline hipError_t hipSetDevice(int d) { return d == 0 ? hipSuccess : hipErrorInvalidValue; }
inline hipError_t hipDeviceSynchronize() { return hipSuccess; }
inline hipError_t hipMalloc(void** p, size_t n) {
  if (p == nullptr) return hipErrorInvalidValue;
  size_t rounded = (n + kWeftHostDeviceAlignment - 1) / kWeftHostDeviceAlignment * kWeftHostDeviceAlignment;
  *p = std::aligned_alloc(kWeftHostDeviceAlignment, rounded == 0 ? kWeftHostDeviceAlignment : rounded);
  return *p ? hipSuccess : hipErrorOutOfMemory;
}
template <class T>
inline hipError_t hipMalloc(T** p, size_t n) {
  return hipMalloc(reinterpret_cast<void**>(p), n);
}
inline hipError_t hipFree(void* p) {
  std::free(p);
  return hipSuccess;
}
inline hipError_t hipHostMalloc(void** p, size_t n, unsigned = 0) { return hipMalloc(p, n); }
template <class T>
inline hipError_t hipHostMalloc(T** p, size_t n, unsigned flags = 0) {
  return hipHostMalloc(reinterpret_cast<void**>(p), n, flags);
}
inline hipError_t hipHostFree(void* p) { return hipFree(p); }
inline hipError_t hipHostGetDevicePointer(void** d, void* h, unsigned) {
  if (d == nullptr) return hipErrorInvalidValue;
  *d = h;
  return hipSuccess;
}
inline hipError_t hipMemcpy(void* d, const void* s, size_t n, hipMemcpyKind) {
  if (n != 0) std::memmove(d, s, n);
  return hipSuccess;
}
inline hipError_t hipMemcpyAsync(void* d, const void* s, size_t n, hipMemcpyKind k, hipStream_t = nullptr) {
  return hipMemcpy(d, s, n, k);
}
inline hipError_t hipMemset(void* d, int v, size_t n) {
  if (n != 0) std::memset(d, v, n);
  return hipSuccess;
}
inline hipError_t hipMemsetAsync(void* d, int v, size_t n, hipStream_t = nullptr) { return hipMemset(d, v, n); }
inline hipError_t hipStreamCreate(hipStream_t* s) {
  if (s == nullptr) return hipErrorInvalidValue;
  *s = nullptr;
  return hipSuccess;
}
inline hipError_t hipStreamCreateWithFlags(hipStream_t* s, unsigned) { return hipStreamCreate(s); }
inline hipError_t hipStreamDestroy(hipStream_t) { return hipSuccess; }
inline hipError_t hipStreamSynchronize(hipStream_t) { return hipSuccess; }
inline hipError_t hipStreamQuery(hipStream_t) { return hipSuccess; }

#endif

namespace weft {

/// True when this build talks to a real GPU runtime (CUDA or HIP), whether or not a device is present.
inline constexpr bool kHasGpuRuntime = kGpuPlatform != GpuPlatform::kNone;

/// Number of GPUs usable by this process: 0 on a machine without a GPU or driver (said once in the log),
/// and 0 for WEFT_GPU=none builds, whose host pseudo-device is not a GPU.
int gpuDeviceCount();

/// Throws weft::Error (ErrorCode::kGpuError) naming `what` and the runtime's text when `e` is not success.
void checkGpu(hipError_t e, const char* what);

}  // namespace weft
