/// Execution-space attributes and the CUDA/HIP/host split, in one place.
#pragma once

#include <weft/build_config.hpp>

#if WEFT_BUILD_GPU_HIP && !defined(__HIP_PLATFORM_AMD__)
#define __HIP_PLATFORM_AMD__ 1  // hipcc on Debian defines __HIPCC__ only; the HIP headers want this.
#endif

#if defined(__CUDACC__) && !defined(__HIPCC__)
#define WEFT_COMPILER_CUDA 1
#elif defined(__HIPCC__)
#define WEFT_COMPILER_HIP 1
#endif

#if defined(WEFT_COMPILER_HIP)
// HIP mode predefines __host__ and __device__ but not __forceinline__, threadIdx and friends.
#include <hip/hip_runtime.h>
#endif

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
/// Defined while compiling device code (the device pass of nvcc or hipcc).
#define WEFT_DEVICE_COMPILE 1
#endif

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)
#define WEFT_HOST_DEVICE __host__ __device__
#define WEFT_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#define WEFT_DEVICE_INLINE __device__ __forceinline__
/// Cold paths called from hot loops (a wait that ran out): kept out of line, so that every inlined copy of the loop
/// stays small and a kernel's hot path fits the instruction cache.
#define WEFT_HOST_DEVICE_NOINLINE inline __host__ __device__ __noinline__
#define WEFT_GLOBAL __global__
#else
#define WEFT_HOST_DEVICE
#define WEFT_HOST_DEVICE_INLINE inline
#define WEFT_DEVICE_INLINE inline
#define WEFT_HOST_DEVICE_NOINLINE inline
#define WEFT_GLOBAL
#endif

namespace weft {

/// Threads per warp (wavefront) of the platform this translation unit targets.
#if WEFT_BUILD_GPU_HIP && (defined(__GFX9__) || !defined(__HIP_DEVICE_COMPILE__))
inline constexpr int kWarpSize = 64;
#elif WEFT_BUILD_GPU_HIP
inline constexpr int kWarpSize = 32;  // RDNA wave32
#else
inline constexpr int kWarpSize = 32;
#endif

/// The GPU platform libweft was built for.
enum class GpuPlatform { kCuda, kHip, kNone };

#if WEFT_BUILD_GPU_CUDA
inline constexpr GpuPlatform kGpuPlatform = GpuPlatform::kCuda;
#elif WEFT_BUILD_GPU_HIP
inline constexpr GpuPlatform kGpuPlatform = GpuPlatform::kHip;
#else
inline constexpr GpuPlatform kGpuPlatform = GpuPlatform::kNone;
#endif

}  // namespace weft
