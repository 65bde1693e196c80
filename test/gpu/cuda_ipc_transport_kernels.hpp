// GPU helpers of cuda_ipc_transport_test: pattern kernels and virtual-memory (cuMem/hipMem) allocations exported as
// POSIX file descriptors. They sit in cuda_ipc_transport_kernels.cu, away from GoogleTest (clang 15's HIP mode
// crashes on GoogleTest's headers in C++20), and exist in GPU builds only. Each throws weft::Error on failure.
#pragma once

#include <cstdint>
#include <weft/platform.hpp>

namespace weft::test {

/// Byte `i` of the pattern `seed` (never 0, so a zeroed byte is never mistaken for written data).
WEFT_HOST_DEVICE_INLINE uint8_t ipcPatternByte(uint32_t seed, uint64_t i) {
  return static_cast<uint8_t>((((i * 2654435761u) >> 7) + seed * 31u) | 1u);
}

/// Fills dst[0, bytes) with ipcPatternByte(seed, i) from a kernel on the current device and waits for it. `dst` may
/// be local device memory or peer memory mapped into this process.
void launchIpcFillPattern(uint8_t* dst, uint64_t bytes, uint32_t seed);

/// A virtual-memory allocation of at least `bytes` on the current device, made shareable as a POSIX file descriptor,
/// mapped read-write here and zeroed. `*allocated` gets the size actually allocated (rounded to the granularity).
void* allocPosixFdMemory(uint64_t bytes, uint64_t* allocated);

/// Unmaps and frees what allocPosixFdMemory returned.
void freePosixFdMemory(void* ptr, uint64_t allocated);

}  // namespace weft::test
