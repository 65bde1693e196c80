/// Atomics, fences and a budgeted spin-wait for host and device code, with scope and order explicit.
///
/// Every function here compiles for the GPU (nvcc, hipcc) and for the host, so protocol code written
/// with it runs in kernels and in host threads alike.
#pragma once

#include <cstdint>
#include <weft/platform.hpp>

#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
#include <cuda/atomic>
#endif
#if !defined(WEFT_DEVICE_COMPILE)
#include <atomic>
#include <chrono>
#include <thread>
#endif

namespace weft {

/// Memory order of an atomic operation or fence.
enum class MemoryOrder { kRelaxed, kAcquire, kRelease, kAcqRel, kSeqCst };

/// Which threads an atomic operation is coherent with: the block, the device, or the whole system
/// (other GPUs and the CPU, through mapped memory).
enum class Scope { kBlock, kDevice, kSystem };

/// A scope as a type, for the generic lambdas that withScope calls.
template <Scope S>
struct ScopeTag {
  static constexpr Scope value = S;
};

/// Calls `f(ScopeTag<Scope::kDevice>{})` when `deviceScope`, otherwise `f(ScopeTag<Scope::kSystem>{})`, and returns
/// what it returns: for state that learns only at run time whether every party runs on one GPU, written once with
/// `decltype(tag)::value` as the scope of its atomics instead of once per scope.
template <class F>
WEFT_HOST_DEVICE_INLINE decltype(auto) withScope(bool deviceScope, F&& f) {
  if (deviceScope) return f(ScopeTag<Scope::kDevice>{});
  return f(ScopeTag<Scope::kSystem>{});
}

namespace detail {

#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
template <Scope S>
inline constexpr cuda::thread_scope kCudaScope = S == Scope::kBlock    ? cuda::thread_scope_block
                                                 : S == Scope::kDevice ? cuda::thread_scope_device
                                                                       : cuda::thread_scope_system;
template <MemoryOrder O>
inline constexpr cuda::memory_order kCudaOrder = O == MemoryOrder::kRelaxed   ? cuda::memory_order_relaxed
                                                 : O == MemoryOrder::kAcquire ? cuda::memory_order_acquire
                                                 : O == MemoryOrder::kRelease ? cuda::memory_order_release
                                                 : O == MemoryOrder::kAcqRel  ? cuda::memory_order_acq_rel
                                                                              : cuda::memory_order_seq_cst;
#elif defined(WEFT_DEVICE_COMPILE)  // HIP device code: clang's scoped builtins.
template <Scope S>
inline constexpr int kHipScope = S == Scope::kBlock    ? __HIP_MEMORY_SCOPE_WORKGROUP
                                 : S == Scope::kDevice ? __HIP_MEMORY_SCOPE_AGENT
                                                       : __HIP_MEMORY_SCOPE_SYSTEM;
template <MemoryOrder O>
inline constexpr int kGccOrder = O == MemoryOrder::kRelaxed   ? __ATOMIC_RELAXED
                                 : O == MemoryOrder::kAcquire ? __ATOMIC_ACQUIRE
                                 : O == MemoryOrder::kRelease ? __ATOMIC_RELEASE
                                 : O == MemoryOrder::kAcqRel  ? __ATOMIC_ACQ_REL
                                                              : __ATOMIC_SEQ_CST;
#else
template <MemoryOrder O>
inline constexpr std::memory_order kStdOrder = O == MemoryOrder::kRelaxed   ? std::memory_order_relaxed
                                               : O == MemoryOrder::kAcquire ? std::memory_order_acquire
                                               : O == MemoryOrder::kRelease ? std::memory_order_release
                                               : O == MemoryOrder::kAcqRel  ? std::memory_order_acq_rel
                                                                            : std::memory_order_seq_cst;
#endif

}  // namespace detail

/// Atomically loads *p. `O` must be kRelaxed, kAcquire or kSeqCst.
template <MemoryOrder O, Scope S = Scope::kSystem, class T>
WEFT_HOST_DEVICE_INLINE T atomicLoad(const T* p) {
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
  return cuda::atomic_ref<T, detail::kCudaScope<S>>(*const_cast<T*>(p)).load(detail::kCudaOrder<O>);
#elif defined(WEFT_DEVICE_COMPILE)
  return __hip_atomic_load(p, detail::kGccOrder<O>, detail::kHipScope<S>);
#else
  return std::atomic_ref<T>(*const_cast<T*>(p)).load(detail::kStdOrder<O>);
#endif
}

/// Atomically stores v into *p. `O` must be kRelaxed, kRelease or kSeqCst.
template <MemoryOrder O, Scope S = Scope::kSystem, class T>
WEFT_HOST_DEVICE_INLINE void atomicStore(T* p, T v) {
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
  cuda::atomic_ref<T, detail::kCudaScope<S>>(*p).store(v, detail::kCudaOrder<O>);
#elif defined(WEFT_DEVICE_COMPILE)
  __hip_atomic_store(p, v, detail::kGccOrder<O>, detail::kHipScope<S>);
#else
  std::atomic_ref<T>(*p).store(v, detail::kStdOrder<O>);
#endif
}

/// Atomically adds v to *p and returns the previous value.
template <MemoryOrder O, Scope S = Scope::kSystem, class T>
WEFT_HOST_DEVICE_INLINE T atomicFetchAdd(T* p, T v) {
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
  return cuda::atomic_ref<T, detail::kCudaScope<S>>(*p).fetch_add(v, detail::kCudaOrder<O>);
#elif defined(WEFT_DEVICE_COMPILE)
  return __hip_atomic_fetch_add(p, v, detail::kGccOrder<O>, detail::kHipScope<S>);
#else
  return std::atomic_ref<T>(*p).fetch_add(v, detail::kStdOrder<O>);
#endif
}

/// Atomically replaces *p with max(*p, v) and returns the previous value (unsigned and signed integers).
template <MemoryOrder O, Scope S = Scope::kSystem, class T>
WEFT_HOST_DEVICE_INLINE T atomicFetchMax(T* p, T v) {
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
  return cuda::atomic_ref<T, detail::kCudaScope<S>>(*p).fetch_max(v, detail::kCudaOrder<O>);
#elif defined(WEFT_DEVICE_COMPILE)
  return __hip_atomic_fetch_max(p, v, detail::kGccOrder<O>, detail::kHipScope<S>);
#else
  std::atomic_ref<T> a(*p);
  T seen = a.load(std::memory_order_relaxed);
  while (seen < v && !a.compare_exchange_weak(seen, v, detail::kStdOrder<O>, std::memory_order_relaxed)) {
  }
  return seen;
#endif
}

/// Atomically replaces *p with v and returns the previous value.
template <MemoryOrder O, Scope S = Scope::kSystem, class T>
WEFT_HOST_DEVICE_INLINE T atomicExchange(T* p, T v) {
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
  return cuda::atomic_ref<T, detail::kCudaScope<S>>(*p).exchange(v, detail::kCudaOrder<O>);
#elif defined(WEFT_DEVICE_COMPILE)
  return __hip_atomic_exchange(p, v, detail::kGccOrder<O>, detail::kHipScope<S>);
#else
  return std::atomic_ref<T>(*p).exchange(v, detail::kStdOrder<O>);
#endif
}

/// Compare-and-swap: when *p == expected, stores desired and returns true; otherwise writes the seen
/// value into expected and returns false. Failure ordering is relaxed.
template <MemoryOrder O, Scope S = Scope::kSystem, class T>
WEFT_HOST_DEVICE_INLINE bool atomicCompareExchange(T* p, T& expected, T desired) {
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
  return cuda::atomic_ref<T, detail::kCudaScope<S>>(*p).compare_exchange_strong(
      expected, desired, detail::kCudaOrder<O>, cuda::memory_order_relaxed);
#elif defined(WEFT_DEVICE_COMPILE)
  return __hip_atomic_compare_exchange_strong(p, &expected, desired, detail::kGccOrder<O>, __ATOMIC_RELAXED,
                                              detail::kHipScope<S>);
#else
  return std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired, detail::kStdOrder<O>,
                                                        std::memory_order_relaxed);
#endif
}

/// A memory fence of the given order and scope.
template <MemoryOrder O, Scope S = Scope::kSystem>
WEFT_HOST_DEVICE_INLINE void fence() {
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
  cuda::atomic_thread_fence(detail::kCudaOrder<O>, detail::kCudaScope<S>);
#elif defined(WEFT_DEVICE_COMPILE)
  __builtin_amdgcn_fence(detail::kGccOrder<O>, S == Scope::kBlock ? "workgroup" : S == Scope::kDevice ? "agent" : "");
#else
  std::atomic_thread_fence(detail::kStdOrder<O>);
#endif
}

/// Nanoseconds on a clock that is monotonic on the executing side: the GPU's global timer in device
/// code, steady_clock on the host. Only differences of two readings on the same side mean anything.
WEFT_HOST_DEVICE_INLINE uint64_t clockNanoseconds() {
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#elif defined(WEFT_DEVICE_COMPILE)
  // s_memrealtime runs at a constant 100 MHz on CDNA.
  return __builtin_amdgcn_s_memrealtime() * 10ull;
#else
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
#endif
}

/// A time budget for one wait, in nanoseconds. 0 means "check once, never wait".
struct WaitBudget {
  uint64_t nanoseconds;
};

/// Spins until `done()` returns true or the budget runs out; returns whether `done()` became true.
/// The clock is first read after 256 polls and then every 256 polls, so a wait that ends quickly (a
/// ping-pong) costs loads only; the budget thus starts a few hundred polls late, which is noise next to
/// any budget worth setting. Host threads yield after a short spin so oversubscribed machines progress.
template <class Pred>
WEFT_HOST_DEVICE_INLINE bool spinWaitUntil(Pred&& done, WaitBudget budget) {
  if (budget.nanoseconds == 0) return done();
  uint64_t start = 0;
  for (uint32_t polls = 0;; ++polls) {
    if (done()) return true;
    if ((polls & 255u) == 255u) {
      const uint64_t now = clockNanoseconds();
      if (start == 0) {
        start = now;
      } else if (now - start >= budget.nanoseconds) {
        return done();
      }
#if !defined(WEFT_DEVICE_COMPILE)
      if (polls >= 4095u) std::this_thread::yield();
#endif
    }
  }
}

}  // namespace weft
