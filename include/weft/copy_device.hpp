/// Cooperative byte copies for host and device code: a set of threads (chosen by the caller as
/// (threadId, numThreads)) copies one range together, 16 bytes per access where the alignment allows.
#pragma once

#include <cstdint>
#include <weft/platform.hpp>

namespace weft {

/// A 16-byte unit: one vector load or store on the GPU (ld/st.v2.u64, global_load_dwordx4).
struct alignas(16) Bytes16 {
  uint64_t lo;
  uint64_t hi;
};
static_assert(sizeof(Bytes16) == 16);

namespace detail {

/// Copies count elements of U, element i by thread i % numThreads (consecutive threads touch consecutive
/// elements, so GPU accesses coalesce).
template <class U>
WEFT_HOST_DEVICE_INLINE void copyStrided(U* dst, const U* src, uint64_t count, uint32_t threadId, uint32_t numThreads) {
  for (uint64_t i = threadId; i < count; i += numThreads) dst[i] = src[i];
}

/// copyStrided for the aligned middle of a copy: each thread loads kUnroll elements before it stores any. The
/// compiler may not move a load above a store that could alias it, so the plain loop keeps one load in flight per
/// thread.
template <class U, uint32_t kUnroll = 4>
WEFT_HOST_DEVICE_INLINE void copyStridedUnrolled(U* dst, const U* src, uint64_t count, uint32_t threadId,
                                                 uint32_t numThreads) {
  const uint64_t n = numThreads;
  uint64_t i = threadId;
  for (; i + (kUnroll - 1) * n < count; i += kUnroll * n) {
    U v[kUnroll];
    for (uint32_t u = 0; u < kUnroll; ++u) v[u] = src[i + u * n];
    for (uint32_t u = 0; u < kUnroll; ++u) dst[i + u * n] = v[u];
  }
  for (; i < count; i += n) dst[i] = src[i];
}

/// Copies bytes with accesses of U for the part of the range where dst is U-aligned (src is too: the caller
/// checked that both have the same remainder modulo sizeof(U)), single bytes for the head and tail around it.
template <class U, uint32_t kUnroll = 4>
WEFT_HOST_DEVICE_INLINE void copyWithUnit(uint8_t* dst, const uint8_t* src, uint64_t bytes, uint32_t threadId,
                                          uint32_t numThreads) {
  constexpr uint64_t kUnit = sizeof(U);
  const uint64_t misalign = reinterpret_cast<uintptr_t>(dst) & (kUnit - 1);
  uint64_t head = misalign == 0 ? 0 : kUnit - misalign;
  if (head > bytes) head = bytes;
  const uint64_t units = (bytes - head) / kUnit;
  const uint64_t tailStart = head + units * kUnit;
  copyStrided(dst, src, head, threadId, numThreads);
  copyStridedUnrolled<U, kUnroll>(reinterpret_cast<U*>(dst + head), reinterpret_cast<const U*>(src + head), units,
                                  threadId, numThreads);
  copyStrided(dst + tailStart, src + tailStart, bytes - tailStart, threadId, numThreads);
}

}  // namespace detail

/// Copies `bytes` from `src` to `dst` (ranges must not overlap) cooperatively: every thread of the set calls it
/// with the same arguments and its own threadId in [0, numThreads); each byte is written by exactly one thread.
/// The widest access (16, 8, 4, 2 or 1 bytes) that both pointers can share is used for the aligned middle;
/// unaligned heads and tails go byte by byte, so any size and offset is correct. Plain (non-atomic) accesses:
/// make the copy visible to another agent with a release (e.g. a semaphore signal) after every thread is done.
/// A threadId >= numThreads copies nothing.
WEFT_HOST_DEVICE_INLINE void copyCooperative(void* dst, const void* src, uint64_t bytes, uint32_t threadId,
                                             uint32_t numThreads) {
  if (threadId >= numThreads || bytes == 0) return;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  const uintptr_t diff = reinterpret_cast<uintptr_t>(d) ^ reinterpret_cast<uintptr_t>(s);
  if ((diff & 15u) == 0) {
    detail::copyWithUnit<Bytes16>(d, s, bytes, threadId, numThreads);
  } else if ((diff & 7u) == 0) {
    detail::copyWithUnit<uint64_t>(d, s, bytes, threadId, numThreads);
  } else if ((diff & 3u) == 0) {
    detail::copyWithUnit<uint32_t>(d, s, bytes, threadId, numThreads);
  } else if ((diff & 1u) == 0) {
    detail::copyWithUnit<uint16_t>(d, s, bytes, threadId, numThreads);
  } else {
    detail::copyStrided(d, s, bytes, threadId, numThreads);
  }
}

/// copyCooperative for a single thread (a PortChannel put that skips the proxy): sixteen 16-byte loads in flight
/// instead of four, since one thread's copy is bound by load latency, not bandwidth.
WEFT_HOST_DEVICE_INLINE void copyByOneThread(void* dst, const void* src, uint64_t bytes) {
  const uintptr_t diff = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
  if ((diff & 15u) == 0 && bytes != 0) {
    detail::copyWithUnit<Bytes16, 16>(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes, 0, 1);
  } else {
    copyCooperative(dst, src, bytes, 0, 1);
  }
}

}  // namespace weft
